"""Project-wide test setup: tests marked `mininet`, `impairment` or `bmv2` skip, naming exactly
the tool they lack; `--target bmv2` runs the Mininet fabric tests on BMv2 instead of p4sim; every test fails if it leaves threads, child processes, network namespaces
or veths behind; SIGTERM unwinds like Ctrl-C.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

# How long what a test started may take to end after it: gRPC servers and streams wind down.
LEAK_GRACE_S = 5.0


def mininet_missing() -> str | None:
    """Why Mininet tests cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root: Mininet creates network namespaces and veth pairs"
    if shutil.which("mnexec") is None:
        return "needs Mininet's mnexec (apt-get install mininet, or make setup)"
    if importlib.util.find_spec("mininet") is None:
        return "needs the mininet Python module (pip install -r requirements.txt, or make setup)"
    return None


def impairment_missing() -> str | None:
    """Why link-impairment tests (loss, duplication, reordering) cannot run here, or None."""
    missing = [tool for tool in ("nft", "tc") if shutil.which(tool) is None]
    if missing:
        return (f"needs {' and '.join(missing)} for link loss, duplication and reordering "
                "(apt-get install nftables iproute2, or make setup)")
    return None


def bmv2_missing() -> str | None:
    """Why BMv2 tests cannot run here, or None if they can."""
    missing = [tool for tool in ("simple_switch_grpc", "p4c") if shutil.which(tool) is None]
    if missing:
        return (f"needs BMv2 1.15.0 and p4c 1.2.4.0: {' and '.join(missing)} not on PATH "
                "(the default target is p4sim; README.md, Targets)")
    return None


@pytest.fixture(scope="session")
def switch_target(request: pytest.FixtureRequest) -> str:
    """The target of `--target`; a test using it skips when that is BMv2 and BMv2 is absent."""
    target = request.config.getoption("--target")
    reason = bmv2_missing() if target == "bmv2" else None
    if reason:
        pytest.skip(reason)
    return target


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = {"mininet": mininet_missing(), "impairment": impairment_missing(), "bmv2": bmv2_missing()}
    for item in items:
        for marker, reason in reasons.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))
                break


def pytest_sessionstart(session: pytest.Session) -> None:
    # A CI timeout's SIGTERM then unwinds like Ctrl-C: fixture teardowns still stop
    # the switches and namespaces they started.
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)


@dataclass(frozen=True)
class Snapshot:
    """What this process has running or has made: threads, live children, and the network
    namespaces and interfaces named with its tag (other processes' are not its business;
    Mininet fabrics check their own switch veths while they hold the machine lock)."""
    threads: frozenset[threading.Thread]
    children: frozenset[int]
    netdevs: frozenset[str]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(frozenset(t for t in threading.enumerate() if t.is_alive()), frozenset(_children()),
                   frozenset(_tagged_netdevs()))

    def new_since(self, before: Snapshot) -> list[str]:
        return ([f"thread {t.name}" for t in self.threads - before.threads]
                + [f"child process {pid} ({_cmdline(pid)})" for pid in sorted(self.children - before.children)]
                + [f"{what}" for what in sorted(self.netdevs - before.netdevs)])


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Fail a test that leaves behind what it started (module-scoped fixtures start first, so
    their processes are not counted against the test that happened to start the module)."""
    before = Snapshot.take()
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    while (leaked := Snapshot.take().new_since(before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leaked, f"this test left behind: {', '.join(leaked)}"


def process_tag() -> str:
    """The tag tests put in the names of the namespaces and veths they create."""
    return str(os.getpid() % 100000)


def _children() -> list[int]:
    """Live (not zombie) child processes of this process, from /proc."""
    me, found = str(os.getpid()), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _tagged_netdevs() -> list[str]:
    tagged = re.compile(rf"(?<!\d){process_tag()}(?!\d)")
    names = [f"network namespace {n.name}" for n in _listdir(Path("/run/netns"))]
    names += [f"interface {n.name}" for n in _listdir(Path("/sys/class/net"))]
    return [name for name in names if tagged.search(name)]


def _listdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "ended"
