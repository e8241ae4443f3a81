"""Pid files and stopping: `make stop` ends exactly the processes a fabric recorded.
Uses ordinary child processes; no root needed.
"""
import subprocess
import sys

import pytest

from topologies.procs import end, end_child, record, recorded, running

IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


@pytest.fixture
def child():
    procs = []

    def start(code: str = "import time; print('ready', flush=True); time.sleep(60)") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code, "p4inc-test-child"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        procs.append(proc)
        return proc
    try:
        yield start
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_recorded_process_is_found_and_ended(tmp_path, child):
    proc = child()
    record(tmp_path, "s1", proc.pid, "p4inc-test-child")
    [rec] = recorded(tmp_path)
    assert rec.alive()
    end(rec)
    assert proc.wait(5) is not None
    assert recorded(tmp_path) == []


def test_process_ignoring_sigterm_is_killed(tmp_path, child):
    proc = child(IGNORES_SIGTERM)
    end(record(tmp_path, "stubborn", proc.pid, "p4inc-test-child"), grace_s=0.2)
    assert proc.wait(5) == -9


def test_pid_whose_command_line_lacks_the_marker_is_left_alone(tmp_path, child):
    proc = child()
    end(record(tmp_path, "reused", proc.pid, "simple_switch_grpc"))
    assert proc.poll() is None
    assert not (tmp_path / "reused.pid").exists()


def test_exited_child_is_not_running_and_end_child_reaps_it(child):
    proc = child()
    assert running(proc.pid, "p4inc-test-child")
    end_child(proc, grace_s=1)
    assert proc.returncode == -15 and not running(proc.pid, "p4inc-test-child")


def test_unreadable_pid_file_is_skipped(tmp_path):
    (tmp_path / "junk.pid").write_text("not json")
    assert recorded(tmp_path) == []


def test_a_lock_this_process_holds_is_recognised(tmp_path):
    import fcntl
    from topologies.machine import _held_by_this_process
    held, free = tmp_path / "held.lock", tmp_path / "free.lock"
    free.touch()
    with held.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        assert _held_by_this_process(held) and not _held_by_this_process(free)
    assert not _held_by_this_process(held)
