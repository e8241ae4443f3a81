"""p4sim: an embedded v1model switch that runs P4_16 source in Python.

compile_file() turns a .p4 file into a Program; Switch runs it packet by packet
(see p4sim/README.md for the in-process API).
"""
from .compiler import Program, compile_file
from .errors import P4Error
from .pipeline import Switch

__all__ = ["compile_file", "Program", "Switch", "P4Error"]
