"""One checkout sees another's fabric: the machine's fabric slot (an flock whose file names its
holder), the teardown log that `make stop` appends to, and `make stop`'s decision to run the
global `mn -c`. Uses lock and log files of its own in tmp_path: never the machine's, never mn -c."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topologies import machine
from topologies.cleanup import mininet_cleanup_decision
from topologies.machine import FabricRecord, SlotError

REPO = Path(__file__).resolve().parents[2]
# Holds the slot in a child process until its stdin closes.
HOLDER = ("import sys; from pathlib import Path; from topologies import machine; "
          "lock = machine.take_slot(Path(sys.argv[2]), Path(sys.argv[1])); print('held', flush=True); "
          "sys.stdin.read()")


@pytest.fixture
def other_holder(tmp_path):
    """Start a process (another checkout, as far as the slot can tell) that holds tmp_path's lock."""
    procs = []

    def start(build_dir: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "fabric.lock"), str(build_dir)],
                                cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc
    try:
        yield start
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(10)
            proc.stdout.close()


def test_the_slot_holder_is_seen_by_others_and_named_while_up(tmp_path, other_holder):
    lock = tmp_path / "fabric.lock"
    assert machine.fabric_up(lock) is None
    holder = other_holder(tmp_path / "theirs")
    up = machine.fabric_up(lock)
    assert up == FabricRecord(holder.pid, str(machine.CHECKOUT), str(tmp_path / "theirs"), up.started)
    assert abs(up.started - time.time()) < 60
    holder.stdin.close()
    holder.wait(10)
    assert machine.fabric_up(lock) is None
    assert machine.last_holder(lock).pid == holder.pid      # remembered once it is gone


def test_waiting_for_the_slot_gives_up_naming_the_holder(tmp_path, other_holder):
    holder = other_holder(tmp_path / "theirs")
    start = time.monotonic()
    with pytest.raises(SlotError, match=rf"build dir {tmp_path}/theirs, pid {holder.pid}.* for 1 s"):
        machine.take_slot(tmp_path / "ours", tmp_path / "fabric.lock", timeout_s=1.0)
    assert time.monotonic() - start < 5


def test_a_waiter_does_not_erase_the_holders_record(tmp_path, other_holder):
    holder = other_holder(tmp_path / "theirs")
    with pytest.raises(SlotError):
        machine.take_slot(tmp_path / "ours", tmp_path / "fabric.lock", timeout_s=0.1)
    assert json.loads((tmp_path / "fabric.lock").read_text())["pid"] == holder.pid


def test_taking_the_slot_twice_in_one_process_fails_at_once(tmp_path):
    lock = machine.take_slot(tmp_path / "ours", tmp_path / "fabric.lock")
    try:
        with pytest.raises(SlotError, match="this process already holds"):
            machine.take_slot(tmp_path / "ours", tmp_path / "fabric.lock")
        assert machine.fabric_up(tmp_path / "fabric.lock").pid == os.getpid()
    finally:
        lock.close()


def test_who_tore_down_names_the_make_stop_that_did_it(tmp_path):
    log = tmp_path / "teardowns.jsonl"
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    started = time.time()
    assert "no `make stop` since it started" in machine.who_tore_down(ours, started, log)
    machine.note_teardown(theirs, mininet_cleanup=False, log_path=log)
    assert "no `make stop` since it started" in machine.who_tore_down(ours, started, log)   # not ours
    machine.note_teardown(ours, mininet_cleanup=False, log_path=log)
    assert f"(pid {os.getpid()}) stopped the fabric of {ours} at" in machine.who_tore_down(ours, started, log)
    machine.note_teardown(theirs, mininet_cleanup=True, log_path=log)
    assert f"`make stop` in {machine.CHECKOUT} (pid {os.getpid()}) ran `mn -c`" in machine.who_tore_down(
        ours, started, log)
    assert "no `make stop` since" in machine.who_tore_down(ours, time.time() + 1, log)    # all before it started


def test_the_teardown_log_keeps_the_last_entries(tmp_path):
    log = tmp_path / "teardowns.jsonl"
    for i in range(machine.TEARDOWN_LOG_KEPT + 5):
        machine.note_teardown(tmp_path / f"b{i}", mininet_cleanup=False, log_path=log)
    lines = log.read_text().splitlines()
    assert len(lines) == machine.TEARDOWN_LOG_KEPT
    assert json.loads(lines[-1])["build_dir"] == str(tmp_path / f"b{machine.TEARDOWN_LOG_KEPT + 4}")


def record(build_dir: Path, pid: int = 4242) -> FabricRecord:
    return FabricRecord(pid, "/work/wt/other", str(build_dir), 0.0)


@pytest.mark.parametrize("everything, only_ours, up, last, runs", [
    (False, False, None, None, True),                       # nobody else: clean Mininet up
    (False, False, "theirs", None, False),                  # another checkout's fabric is up
    (False, False, "ours", None, True),                     # the holder is this checkout's own fabric
    (True, False, "theirs", None, True),                    # ALL=1
    (False, True, None, None, False),                       # --only-ours
    (False, False, None, "theirs-leftovers", False),        # gone, but its processes still run
    (False, False, None, "theirs-clean", True),             # gone, nothing of it left
], ids=["nobody", "other-up", "own-holder", "all", "only-ours", "other-leftovers", "other-gone"])
def test_make_stop_runs_mn_c_only_when_no_other_fabric_is_up(tmp_path, everything, only_ours, up, last, runs):
    ours = tmp_path / "ours"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)",
                                "p4inc-test-leftover"], stdout=subprocess.PIPE, text=True)
    try:
        assert sleeper.stdout.readline() == "ready\n"      # its command line is its own by now
        leftover_dir = tmp_path / "theirs-leftovers"
        (leftover_dir / "run").mkdir(parents=True)
        (leftover_dir / "run" / "s1.pid").write_text(json.dumps({"pid": sleeper.pid, "marker": "p4inc-test-leftover"}))
        dirs = {"theirs": tmp_path / "theirs", "ours": ours, "theirs-leftovers": leftover_dir,
                "theirs-clean": tmp_path / "theirs-clean"}
        decided, why = mininet_cleanup_decision(ours, everything, only_ours, up and record(dirs[up]),
                                                last and record(dirs[last]))
    finally:
        sleeper.kill()
        sleeper.wait()
        sleeper.stdout.close()
    assert decided is runs, why
    if up == "theirs" and not everything:
        assert f"build dir {tmp_path}/theirs, pid 4242" in why and "make stop ALL=1" in why
    if last == "theirs-leftovers":
        assert f"process {sleeper.pid} (p4inc-test-leftover)" in why and "make stop in /work/wt/other" in why
