"""`make stop`'s own part (topologies.cleanup.clean): it ends the processes a fabric recorded, the
benches' and demos' fabrics below the build folder included (an interrupted `make demo-tp`
records its switch in build/tp/run). Uses a stand-in process in tmp_path, never a fabric."""
import subprocess
import sys
import time
from pathlib import Path

from topologies.cleanup import clean, fabric_dirs
from topologies.procs import record, running

MARKER = "p4inc-cleanup-test-stand-in"


def stand_in() -> subprocess.Popen:
    """A process whose command line carries MARKER, as a recorded switch's carries its own. Waits
    until it does: on a busy machine the child can still be pytest's fork, not yet exec'd, and
    clean() rightly leaves a pid alone whose command line lacks the marker."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", MARKER])
    deadline = time.monotonic() + 30
    while not running(proc.pid, MARKER):
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError("the stand-in never showed its marker")
        time.sleep(0.01)
    return proc


def test_a_demos_fabric_below_the_build_folder_is_stopped_too(tmp_path: Path) -> None:
    top, demo = stand_in(), stand_in()
    try:
        record(tmp_path / "run", "s1", top.pid, MARKER)
        record(tmp_path / "tp" / "run", "s1", demo.pid, MARKER)
        (tmp_path / "results").mkdir()               # a folder without run/ is no fabric's
        assert fabric_dirs(tmp_path) == [tmp_path, tmp_path / "tp"]
        removed = clean(tmp_path)
        assert removed == [f"process {top.pid} ({MARKER})", f"process {demo.pid} ({MARKER})"]
        assert top.wait(10) is not None and demo.wait(10) is not None
        assert clean(tmp_path) == []
    finally:
        for proc in (top, demo):
            proc.kill()
            proc.wait()
