"""The one error type p4sim reports for bad P4 input: P4Error.

Its text is ``file:line:col: error: message`` so editors and users can jump to the
spot; the CLI prints str(err) and exits 1, never a traceback.
"""
from __future__ import annotations


class P4Error(Exception):
    """A problem in a P4 program, located in the original (pre-cpp) source."""

    def __init__(self, message: str, file: str = "<unknown>", line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: error: {self.message}"
