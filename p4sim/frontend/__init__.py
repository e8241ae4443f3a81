"""The P4_16 front end: cpp preprocessing, the lark grammar, the AST, and checking.

preprocess() -> parse_text() -> check() gives a CheckedProgram for the compiler.
"""
from .checker import CheckedProgram, check
from .parser import parse_text
from .preprocess import preprocess

__all__ = ["preprocess", "parse_text", "check", "CheckedProgram"]
