"""p4sim's backends, side by side as p4c's are: each turns the frontend's checked program
into something a switch runs. `python` (backends/python) is the reference and runs every
program; `Switch(...)` builds the switch of the backend asked for, or of the default one.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

from ..program import Program

log = logging.getLogger(__name__)

BACKENDS = ("python",)
ENV_VAR = "P4SIM_BACKEND"          # the default for every Switch of this process, if set


def default_backend() -> str:
    """The backend a Switch gets when none is asked for: $P4SIM_BACKEND, else python."""
    name = os.environ.get(ENV_VAR, "").strip() or "python"
    if name not in BACKENDS:
        raise ValueError(f"{ENV_VAR}={name!r}: choose one of {', '.join(BACKENDS)}")
    return name


def Switch(program: Program | None = None, cpu_port: int | None = None, trace: bool = False,  # noqa: N802
           on_digest: Callable[[str, tuple], None] | None = None, seed: int | None = None,
           backend: str | None = None) -> Any:
    """A v1model switch running `program` (or none yet: load() one later) on `backend`."""
    from .python import PythonSwitch
    name = backend or default_backend()
    if name not in BACKENDS:
        raise ValueError(f"unknown p4sim backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return PythonSwitch(program, cpu_port=cpu_port, trace=trace, on_digest=on_digest, seed=seed)
