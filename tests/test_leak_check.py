"""The autouse leak check of tests/conftest.py sees what a test would leave behind: a thread,
a child process, a grandchild (a child's child that outlives it), a zombie (a child that
ended and was never waited for), and a veth named with this process's tag (and not another
process's)."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import Snapshot, process_tag


def test_a_running_thread_and_child_are_seen_until_they_end():
    before = Snapshot.take()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="p4inc-test-leak")
    thread.start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        leaked = Snapshot.take().new_since(before)
        assert "thread p4inc-test-leak" in leaked
        assert any(item.startswith(f"child process {child.pid} ") for item in leaked)
    finally:
        stop.set()
        thread.join()
        child.kill()
        child.wait()
    assert Snapshot.take().new_since(before) == []


def test_a_grandchild_is_seen():
    """A child's child (e.g. the program a Mininet host shell runs), found through its parent."""
    before = Snapshot.take()
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
                              "'import time; time.sleep(60)', 'p4inc-grandchild']); print(p.pid, flush=True); "
                              "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    try:
        leaked = Snapshot.take().new_since(before)
        assert f"grandchild process {grandchild} ({sys.executable} -c import time; time.sleep(60) " \
               "p4inc-grandchild)" in leaked
    finally:
        os.kill(grandchild, signal.SIGKILL)
        child.stdin.close()
        child.wait()
        child.stdout.close()
    assert Snapshot.take().new_since(before) == []


def test_a_child_that_ended_unreaped_is_seen_as_a_zombie():
    before = Snapshot.take()
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while (leaked := Snapshot.take().new_since(before)) != [f"child process {child.pid} (zombie, was true)"]:
            assert time.monotonic() < deadline, leaked
            time.sleep(0.05)
    finally:
        child.wait()
    assert Snapshot.take().new_since(before) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a veth")
def test_only_veths_named_with_this_process_tag_count():
    ours, theirs = f"p4lk{process_tag()}", f"p4lk{process_tag()}9"
    before = Snapshot.take()
    subprocess.run(["ip", "link", "add", ours, "type", "veth", "peer", "name", theirs], check=True)
    try:
        assert Snapshot.take().new_since(before) == [f"interface {ours}"]
    finally:
        subprocess.run(["ip", "link", "del", ours], check=True)
