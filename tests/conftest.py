"""Project-wide test setup: tests marked `mininet`, `impairment` or `bmv2` skip, naming exactly
the tool they lack; `--target bmv2` runs the Mininet fabric tests on BMv2 instead of p4sim; every
test fails if it leaves threads, processes (children, grandchildren, zombies), network namespaces
or veths behind; SIGTERM unwinds like Ctrl-C; the per-test timeout (pyproject.toml) does not run
while a test waits for another fabric on the machine to give up the fabric slot.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
from p4sim.dataplane.traffic import lab_tag

from topologies import machine

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


# The per-test timer as pytest-timeout last set it: (settings, when), by item.
_TIMER = pytest.StashKey[tuple[Any, float]]()
_running: list[pytest.Item] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Remember the timer pytest-timeout is about to set (returning None lets it set it)."""
    item.stash[_TIMER] = (settings, time.monotonic())


@contextmanager
def timer_paused() -> Iterator[None]:
    """Stop the running test's timeout while inside; it resumes with what was left of it."""
    item = _running[-1] if _running else None
    timer = item.stash.get(_TIMER, None) if item is not None else None
    if timer is None:
        yield
        return
    settings, since = timer
    left = max(1.0, settings.timeout - (time.monotonic() - since))
    item.config.hook.pytest_timeout_cancel_timer(item=item)
    try:
        yield
    finally:
        item.config.hook.pytest_timeout_set_timer(item=item, settings=settings._replace(timeout=left))


@pytest.fixture(scope="session", autouse=True)
def fabric_slot_waits_are_not_test_time() -> Iterator[None]:
    """Waiting for another checkout's fabric to end is not the test's own time (the wait is
    bounded by machine.LOCK_TIMEOUT_S and says whom it waits for)."""
    take = machine.take_slot

    def take_paused(*args: Any, **kwargs: Any) -> Any:
        with timer_paused():
            return take(*args, **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(machine, "take_slot", take_paused)
        yield


@pytest.fixture
def fabric_slot_free() -> None:
    """For a test whose fabric starts in a subprocess (make demo, bench): wait, timer paused,
    until no fabric holds the machine's slot, so the subprocess's own time limit is its run's."""
    with timer_paused():
        deadline = time.monotonic() + machine.LOCK_TIMEOUT_S
        while (holder := machine.fabric_up()) is not None:
            if time.monotonic() > deadline:
                pytest.fail(f"{holder.describe()} held the machine's fabric slot for {machine.LOCK_TIMEOUT_S:.0f} s")
            time.sleep(1.0)


def pytest_sessionstart(session: pytest.Session) -> None:
    # A CI timeout's SIGTERM then unwinds like Ctrl-C: fixture teardowns still stop
    # the switches and namespaces they started.
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)


@dataclass(frozen=True)
class Snapshot:
    """What this process has running or has made: threads, descendant processes (children,
    their children, and zombies nobody reaped), and the network namespaces and interfaces named
    with its tag (other processes' are not its business; Mininet fabrics check their own switch
    veths while they hold the machine lock)."""
    threads: frozenset[threading.Thread]
    processes: frozenset[Descendant]
    netdevs: frozenset[str]

    @classmethod
    def take(cls) -> Snapshot:
        return cls(frozenset(t for t in threading.enumerate() if t.is_alive()), frozenset(_descendants()),
                   frozenset(_tagged_netdevs()))

    def new_since(self, before: Snapshot) -> list[str]:
        return ([f"thread {t.name}" for t in self.threads - before.threads]
                + [str(p) for p in sorted(self.processes - before.processes)]
                + [f"{what}" for what in sorted(self.netdevs - before.netdevs)])


@dataclass(frozen=True, order=True)
class Descendant:
    """A process below this one: a zombie is one that ended and was never waited for."""
    pid: int
    generation: int         # 1: a child, 2: a grandchild, ...
    zombie: bool

    def __str__(self) -> str:
        relation = {1: "child", 2: "grandchild"}.get(self.generation, f"generation-{self.generation} descendant")
        what = f"zombie, was {_comm(self.pid)}" if self.zombie else _cmdline(self.pid)
        return f"{relation} process {self.pid} ({what})"


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
    return lab_tag()


def _descendants() -> list[Descendant]:
    """Every process below this one in /proc's parent links, zombies included."""
    parents: dict[int, list[tuple[int, bool]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append((int(stat.parent.name), fields[0] == "Z"))
    found, level, generation = [], [os.getpid()], 1
    while level:
        below = [(pid, zombie) for parent in level for pid, zombie in parents.get(parent, [])]
        found += [Descendant(pid, generation, zombie) for pid, zombie in below]
        level, generation = [pid for pid, _ in below], generation + 1
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


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "reaped"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "ended"
