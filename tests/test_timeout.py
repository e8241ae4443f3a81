"""No test can hang the suite: pytest-timeout ends any test that runs longer than pyproject.toml's
limit, and the time a test spends waiting for another fabric to give up the machine's slot does
not count against it (tests/conftest.py)."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import timer_paused

REPO = Path(__file__).resolve().parents[1]


def test_every_test_runs_under_the_configured_timeout(request):
    assert request.config.pluginmanager.hasplugin("timeout")
    assert float(request.config.getini("timeout")) > 0


def test_a_test_that_outlives_its_timeout_fails_and_the_suite_goes_on(tmp_path):
    (tmp_path / "test_stuck.py").write_text(
        "import time\n"
        "def test_stuck():\n    time.sleep(60)\n"
        "def test_next():\n    pass\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "2",
                           str(tmp_path / "test_stuck.py")], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "1 failed, 1 passed" in done.stdout, done.stdout
    assert "Timeout (>2.0s) from pytest-timeout" in done.stdout and time.monotonic() - start < 30


@pytest.mark.timeout(2)
def test_time_inside_timer_paused_does_not_count():
    with timer_paused():
        time.sleep(2.5)
    time.sleep(1.0)         # 3.5 s in all, 1 s of it the test's own
