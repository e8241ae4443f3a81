"""Shared fixtures for p4sim's tests: the conformance programs in tests/p4programs,
compiled once per session, and a fresh in-process Switch per test.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pytest

if TYPE_CHECKING:
    from p4sim import Program, Switch

PROGRAMS_DIR = Path(__file__).resolve().parent.parent / "p4programs"
REPO_ROOT = PROGRAMS_DIR.parent.parent


def reference_dir(name: str) -> Path | None:
    """`shared/reference/<name>` beside the repository (as CI lays it out), looked up from the
    nearest ancestor that has it: a git worktree sits a level deeper than the main checkout."""
    for base in REPO_ROOT.parents:
        candidate = base / "shared" / "reference" / name
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture(scope="session")
def p4program() -> Callable[[str], Program]:
    """`p4program("ipv4_router")` compiles tests/p4programs/ipv4_router.p4 once."""
    # Imported here so the other p4sim tests still collect while p4sim is incomplete.
    from p4sim import compile_file

    compiled: dict[str, Program] = {}

    def load(name: str) -> Program:
        if name not in compiled:
            compiled[name] = compile_file(str(PROGRAMS_DIR / f"{name}.p4"))
        return compiled[name]

    return load


@pytest.fixture
def make_switch(p4program: Callable[[str], Program]) -> Callable[..., Switch]:
    """`make_switch("calc", cpu_port=255)`: a new switch with fresh state."""
    from p4sim import Switch

    def make(name: str, **kwargs) -> Switch:
        return Switch(p4program(name), **kwargs)

    return make


# p4runtime-shell's handshake waits 2 s (hard-coded) for the arbitration answer, then calls
# sys.exit(1); a switch on a busy machine (load 10 on 2 cores) can take longer than that.
ARBITRATION_WAIT_S = 60.0


@pytest.fixture
def p4runtime_shell(monkeypatch: pytest.MonkeyPatch):
    """`p4runtime_sh.shell`, whose setup waits up to ARBITRATION_WAIT_S for arbitration."""
    import p4runtime_sh.shell as sh
    from p4runtime_sh.p4runtime import P4RuntimeClient

    original = P4RuntimeClient.get_stream_packet

    def get_stream_packet(self: P4RuntimeClient, type_: str, timeout: float = 1):
        return original(self, type_, ARBITRATION_WAIT_S if type_ == "arbitration" else timeout)

    monkeypatch.setattr(P4RuntimeClient, "get_stream_packet", get_stream_packet)
    return sh
