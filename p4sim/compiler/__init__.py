"""Compile a checked P4 program into Python code, once per program; the pipeline execs it.

The frontend (p4sim.frontend) parses and checks; this package is the backend, split by
idea: layout (types as classes), expressions, statements and calls, externs, blocks
(parsers, controls, tables), tied together in codegen.
"""
from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Iterator

from ..errors import P4Error
from .codegen import CompiledCode, compile_program

log = logging.getLogger(__name__)

__all__ = ["CompiledCode", "Program", "compile_file", "compile_program"]


class Program:
    """A checked, compiled P4 program: what a Switch loads and a device config carries."""

    FORMAT = "p4sim/1"

    def __init__(self, source: str, source_file: str) -> None:
        from ..frontend.checker import check
        from ..frontend.parser import parse_text
        self.source = source
        self.source_file = source_file
        with _internal_errors("checking", source_file):
            self.checked = check(parse_text(source, source_file))
        self._code: dict[bool, tuple[CompiledCode, Any]] = {}
        self.code(False)            # compile now, so errors show at load time

    @property
    def info(self):
        return self.checked.info

    def code(self, trace: bool = False) -> tuple[CompiledCode, Any]:
        """The generated module (and its Python code object), built once per trace setting."""
        if trace not in self._code:
            with _internal_errors("compiling", self.source_file):
                cc = compile_program(self.checked, trace)
                obj = compile(cc.source, f"<p4sim:{self.source_file}>", "exec")
            self._code[trace] = (cc, obj)
        return self._code[trace]

    def device_config(self) -> bytes:
        return json.dumps({"format": self.FORMAT, "source_file": self.source_file,
                           "source": self.source}).encode()

    @classmethod
    def from_device_config(cls, data: bytes) -> Program:
        try:
            cfg = json.loads(data.decode())
            if cfg.get("format") != cls.FORMAT:
                raise ValueError(f"format is {cfg.get('format')!r}, expected {cls.FORMAT!r}")
            return cls(cfg["source"], cfg["source_file"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
            raise P4Error(f"not a p4sim device config: {err}", "<device config>") from None


@contextlib.contextmanager
def _internal_errors(stage: str, source_file: str) -> Iterator[None]:
    """A p4sim bug, not the user's, still reaches the user as a P4Error, not a traceback."""
    try:
        yield
    except P4Error:
        raise
    except Exception as err:
        log.debug("internal error %s %s", stage, source_file, exc_info=True)
        raise P4Error(f"p4sim internal error while {stage} ({type(err).__name__}: {err}); "
                      "please report it with this program", source_file) from None


def compile_file(path: str, include_dirs: tuple[str, ...] = (), defines: tuple[str, ...] = ()) -> Program:
    """cpp + parse + check + compile one P4 file; raises P4Error for bad input."""
    from ..frontend.preprocess import preprocess
    return Program(preprocess(str(path), include_dirs, defines), str(path))
