"""The autouse leak check of tests/conftest.py sees what a test would leave behind: a thread,
a child process, and a veth named with this process's tag (and not another process's)."""
import os
import subprocess
import sys
import threading

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


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a veth")
def test_only_veths_named_with_this_process_tag_count():
    ours, theirs = f"p4lk{process_tag()}", f"p4lk{process_tag()}9"
    before = Snapshot.take()
    subprocess.run(["ip", "link", "add", ours, "type", "veth", "peer", "name", theirs], check=True)
    try:
        assert Snapshot.take().new_since(before) == [f"interface {ours}"]
    finally:
        subprocess.run(["ip", "link", "del", ours], check=True)
