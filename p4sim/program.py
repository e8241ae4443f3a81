"""A checked P4 program: what a switch loads and a device config carries.

The frontend (p4sim.frontend) parses and checks it once; each backend (p4sim.backends)
compiles the checked program into what its switch runs and keeps that in `artifacts`.
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
from typing import Any, Iterator

from .errors import P4Error

log = logging.getLogger(__name__)

__all__ = ["Program", "compile_file", "internal_errors"]


class Program:
    """A checked P4 program. Compiled once per backend: `artifacts` holds what each built."""

    FORMAT = "p4sim/1"

    def __init__(self, source: str, source_file: str) -> None:
        from .frontend.checker import check
        from .frontend.parser import parse_text
        self.source = source
        self.source_file = source_file
        self.artifacts: dict[Any, Any] = {}
        with gc_paused():
            with internal_errors("checking", source_file):
                self.checked = check(parse_text(source, source_file))
            # The Python backend is the reference and takes every checked program: compiling
            # it now makes a program's errors show when it is loaded, whatever backend runs it.
            from .backends.python import python_code
            python_code(self, trace=False)

    @property
    def info(self):
        return self.checked.info

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
def internal_errors(stage: str, source_file: str) -> Iterator[None]:
    """A p4sim bug, not the user's, still reaches the user as a P4Error, not a traceback."""
    try:
        yield
    except P4Error:
        raise
    except Exception as err:
        log.debug("internal error %s %s", stage, source_file, exc_info=True)
        raise P4Error(f"p4sim internal error while {stage} ({type(err).__name__}: {err}); "
                      "please report it with this program", source_file) from None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while compiling: a large program's AST is millions of
    objects that all stay alive, and the collector would walk them again and again (nearly
    half the compile time of allreduce.p4 at K=2048). What the compile leaves is collected after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_file(path: str, include_dirs: tuple[str, ...] = (), defines: tuple[str, ...] = ()) -> Program:
    """cpp + parse + check + compile one P4 file; raises P4Error for bad input."""
    from .frontend.preprocess import preprocess
    return Program(preprocess(str(path), include_dirs, defines), str(path))
