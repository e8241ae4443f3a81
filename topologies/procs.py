"""Processes the fabric starts, recorded in pid files under `build/run/` so that
`make stop` can find and end exactly those (SIGTERM, then SIGKILL).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class Recorded:
    """A started process: its pid and a string its command line must contain.

    The marker guards against pid reuse: a pid whose command line no longer
    contains it belongs to someone else and is left alone.
    """
    path: Path
    pid: int
    marker: str

    def alive(self) -> bool:
        return running(self.pid, self.marker)


def record(run_dir: Path, name: str, pid: int, marker: str) -> Recorded:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"{name}.pid"
    path.write_text(json.dumps({"pid": pid, "marker": marker}) + "\n")
    return Recorded(path, pid, marker)


def recorded(run_dir: Path) -> list[Recorded]:
    found = []
    for path in sorted(run_dir.glob("*.pid")):
        try:
            data = json.loads(path.read_text())
            found.append(Recorded(path, int(data["pid"]), str(data["marker"])))
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable pid file %s", path)
    return found


def running(pid: int, marker: str) -> bool:
    """Whether `pid` is alive (not a zombie) and its command line contains `marker`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z" and marker in cmdline


def end(rec: Recorded, grace_s: float = STOP_GRACE_S, first: signal.Signals = signal.SIGTERM) -> None:
    """Stop a recorded process (`first`, then SIGKILL after `grace_s`) and forget it."""
    for sig in (first, signal.SIGKILL):
        if not rec.alive():
            break
        log.info("sending %s to %s (pid %d)", sig.name, rec.marker, rec.pid)
        try:
            os.kill(rec.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace_s
        while rec.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    rec.path.unlink(missing_ok=True)


def end_child(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a child process we started (SIGTERM, SIGKILL after `grace_s`) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            log.warning("pid %d ignored SIGTERM for %.0f s; killing it", proc.pid, grace_s)
            proc.kill()
            proc.wait()
