"""Who has a fabric up on this machine, and who tore one down. A fabric holds the machine's one
fabric slot, an flock on FABRIC_LOCK, with its checkout, build directory and pid written in the
file; `make stop` appends what it stopped to TEARDOWN_LOG. So one checkout sees another's fabric
(`fabric_up`), and a fabric whose shells or interfaces vanished can name who removed them.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

FABRIC_LOCK = Path("/run/lock/p4inc-fabric.lock")
TEARDOWN_LOG = Path("/run/lock/p4inc-teardowns.jsonl")
LOCK_TIMEOUT_S = 1800.0
TEARDOWN_LOG_KEPT = 50          # lines; older teardowns are forgotten
CHECKOUT = Path(__file__).resolve().parents[1]


class SlotError(RuntimeError):
    """The machine's fabric slot could not be taken; the message says who holds it."""


@dataclass(frozen=True)
class FabricRecord:
    """A fabric that holds (or last held) the slot: whose it is and where it records its processes."""
    pid: int
    checkout: str
    build_dir: str
    started: float

    def describe(self) -> str:
        return (f"the fabric of {self.checkout} (build dir {self.build_dir}, pid {self.pid}, "
                f"up since {_clock(self.started)})")


@dataclass(frozen=True)
class Teardown:
    """One `make stop`: whose it was, the build directory it stopped, and whether it also ran
    `mn -c`, which removes every Mininet fabric's shells and interfaces on the machine."""
    pid: int
    checkout: str
    build_dir: str
    mininet_cleanup: bool
    time: float

    def describe(self) -> str:
        what = "ran `mn -c`" if self.mininet_cleanup else f"stopped the fabric of {self.build_dir}"
        return f"`make stop` in {self.checkout} (pid {self.pid}) {what} at {_clock(self.time)}"


def take_slot(build_dir: Path, lock_path: Path = FABRIC_LOCK, timeout_s: float = LOCK_TIMEOUT_S) -> IO[str]:
    """Wait for the machine's one fabric slot (interface names like s1-eth1 live in the root
    namespace, so a second fabric waits instead of colliding), then write who holds it. The
    lock goes with the returned open file: close it to give the slot up; it is also released
    when the process dies."""
    if _held_by_this_process(lock_path):
        raise SlotError(f"this process already holds {lock_path}: one of its own fabrics is still up "
                        "(e.g. a module-scoped fixture's), and waiting for it would wait forever; "
                        "stop that fabric first")
    lock = lock_path.open("a+")       # not "w": that would erase the holder's record while we wait
    deadline = time.monotonic() + timeout_s
    waiting = False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                raise SlotError(f"{_holder_text(lock_path)} has held {lock_path} for {timeout_s:.0f} s; "
                                "stop it (make stop in its checkout) and try again") from None
            if not waiting:
                log.warning("%s is up on this machine; waiting for it to stop", _holder_text(lock_path))
                waiting = True
            time.sleep(0.5)
    record = FabricRecord(os.getpid(), str(CHECKOUT), str(build_dir.resolve()), time.time())
    lock.seek(0)
    lock.truncate()
    lock.write(json.dumps(asdict(record)) + "\n")
    lock.flush()
    return lock


def fabric_up(lock_path: Path = FABRIC_LOCK) -> FabricRecord | None:
    """The fabric holding the machine's slot now, or None when no process holds it."""
    try:
        probe = lock_path.open("a+")
    except OSError:
        return None
    with probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return last_holder(lock_path) or FabricRecord(0, "an unknown checkout", "?", 0.0)
        fcntl.flock(probe, fcntl.LOCK_UN)
    return None


def last_holder(lock_path: Path = FABRIC_LOCK) -> FabricRecord | None:
    """Who took the slot last (still up or not), as its lock file says."""
    try:
        return FabricRecord(**json.loads(lock_path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def note_teardown(build_dir: Path, mininet_cleanup: bool, log_path: Path = TEARDOWN_LOG) -> None:
    """Append this `make stop` to the machine's teardown log (keeping the last few)."""
    entry = Teardown(os.getpid(), str(CHECKOUT), str(build_dir.resolve()), mininet_cleanup, time.time())
    try:
        lines = log_path.read_text().splitlines()[-(TEARDOWN_LOG_KEPT - 1):] if log_path.exists() else []
        log_path.write_text("\n".join([*lines, json.dumps(asdict(entry))]) + "\n")
    except OSError as err:
        log.warning("cannot note this teardown in %s: %s", log_path, err.strerror or err)


def who_tore_down(build_dir: Path, since: float, log_path: Path = TEARDOWN_LOG) -> str:
    """Who removed the fabric of `build_dir` (up since `since`), as far as the teardown log knows."""
    ours = str(build_dir.resolve())
    for entry in reversed(_teardowns(log_path)):
        if entry.time >= since and (entry.mininet_cleanup or entry.build_dir == ours):
            return f"removed by {entry.describe()}"
    return (f"no `make stop` since it started is in {log_path}: removed by something else "
            "(`mn -c` by hand, another Mininet user, or a crash)")


def _teardowns(log_path: Path) -> list[Teardown]:
    try:
        lines = log_path.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            found.append(Teardown(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return found


def _holder_text(lock_path: Path) -> str:
    holder = last_holder(lock_path)
    return holder.describe() if holder else "another p4inc fabric"


def _held_by_this_process(path: Path) -> bool:
    """Whether this process holds a flock on `path` (/proc/locks names the pid that took it):
    flock locks belong to open files, so a second open() in the same process would wait."""
    try:
        st = path.stat()
        locks = Path("/proc/locks").read_text()
    except OSError:
        return False
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(fields[1] == "FLOCK" and fields[4] == str(os.getpid()) and fields[5] == where
               for fields in (line.split() for line in locks.splitlines()) if len(fields) > 5)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))
