"""p4sim's backends, side by side as p4c's are: each turns the frontend's checked program
into something a switch runs. `python` (backends/python) is the reference and runs every
program, and traces; `c` (backends/c) compiles it to C for speed. `Switch(...)` builds the
switch of the backend asked for, or of the default one, and falls back to Python, with one
log line saying why, when the C backend cannot run a program.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

from ..cbuild import compiler
from ..program import Program

log = logging.getLogger(__name__)

BACKENDS = ("python", "c")
ENV_VAR = "P4SIM_BACKEND"          # the default for every Switch of this process, if set
_said_no_compiler = False


def default_backend() -> str:
    """The backend a Switch gets when none is asked for: $P4SIM_BACKEND, else c where a C
    compiler is present, else python (saying why, once)."""
    global _said_no_compiler
    name = os.environ.get(ENV_VAR, "").strip()
    if name:
        if name not in BACKENDS:
            raise ValueError(f"{ENV_VAR}={name!r}: choose one of {', '.join(BACKENDS)}")
        return name
    if compiler() is not None:
        return "c"
    if not _said_no_compiler:
        _said_no_compiler = True
        log.info("p4sim: no C compiler found (install gcc: make setup; or set CC): using the Python backend")
    return "python"


def Switch(program: Program | None = None, cpu_port: int | None = None, trace: bool = False,  # noqa: N802
           on_digest: Callable[[str, tuple], None] | None = None, seed: int | None = None,
           backend: str | None = None) -> Any:
    """A v1model switch running `program` (or none yet: load() one later) on `backend`."""
    from .python import PythonSwitch
    name = backend or default_backend()
    if name not in BACKENDS:
        raise ValueError(f"unknown p4sim backend {name!r}; choose one of {', '.join(BACKENDS)}")
    kwargs = dict(cpu_port=cpu_port, trace=trace, on_digest=on_digest, seed=seed)
    if name == "python":
        return PythonSwitch(program, **kwargs)
    if trace:
        log.info("p4sim: tracing (--log-console) runs on the Python backend, which logs every step")
        return PythonSwitch(program, **kwargs)
    from .c import CBackendUnavailable, CSwitch, fallback_note
    try:
        return CSwitch(program, **kwargs)
    except CBackendUnavailable as err:
        log.warning("%s", fallback_note(program, err))
        return PythonSwitch(program, **kwargs)
