"""The bench's record of the code that ran: a run is dirty when tracked code changed since the
commit, wherever the change is in the checkout, and not when only results were rewritten."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.environment import RESULTS_DIR, is_dirty

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A repository with code in two folders and a committed result, clean."""
    for name in ("bench/run.py", "hosts/agent.py", f"{RESULTS_DIR}/bench.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("0\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "start")
    return tmp_path


def test_a_clean_checkout_is_not_dirty(checkout: Path):
    assert is_dirty(checkout / "bench") is False


def test_rewritten_results_do_not_make_it_dirty(checkout: Path):
    (checkout / RESULTS_DIR / "bench.json").write_text("1\n")
    assert is_dirty(checkout / "bench") is False


@pytest.mark.parametrize("changed", ["hosts/agent.py", "bench/run.py"])
def test_changed_code_anywhere_in_the_checkout_makes_it_dirty(checkout: Path, changed: str):
    (checkout / changed).write_text("1\n")
    assert is_dirty(checkout / "bench") is True


def test_untracked_files_do_not_make_it_dirty(checkout: Path):
    (checkout / "notes.txt").write_text("scratch\n")
    assert is_dirty(checkout / "bench") is False
