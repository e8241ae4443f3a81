"""The one error type p4sim reports for bad P4 input: P4Error.

Its text is ``file:line:col: error: message`` so editors and users can jump to the
spot; the CLI prints str(err) and exits 1, never a traceback.
"""
from __future__ import annotations

from typing import Any


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


def internal_error(stage: str, err: Exception, node: Any, source_file: str) -> P4Error:
    """A p4sim bug still reaches the user as one located P4Error naming the construct it
    stopped at (`node`, an AST node or None), never as a traceback."""
    what = f" at this {type(node).__name__}" if node is not None else ""
    pos = getattr(node, "pos", None)
    where = (pos.file, pos.line, pos.column) if pos is not None and pos.line else (source_file, 0, 0)
    return P4Error(f"p4sim cannot run this program: internal error while {stage}{what} "
                   f"({type(err).__name__}: {err}); please report it with this program", *where)
