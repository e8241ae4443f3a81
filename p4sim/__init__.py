"""p4sim: an embedded v1model switch that runs P4_16 source.

compile_file() turns a .p4 file into a Program; Switch runs it packet by packet on one
of the backends (see p4sim/README.md for the in-process API).
"""
from .backends import Switch
from .errors import P4Error
from .program import Program, compile_file

__all__ = ["compile_file", "Program", "Switch", "P4Error"]
