"""The machine, target and versions a benchmark ran on, recorded beside its numbers."""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from p4sim.backends import default_backend

CHECKOUT = Path(__file__).parent      # any folder of this checkout: git finds its top
RESULTS_DIR = "docs/results"
PACKAGES = ("scapy", "numpy", "grpcio", "protobuf", "p4runtime", "p4runtime-shell", "lark", "mininet",
            "mpi4py")


def describe_environment(target: str) -> dict:
    """Call it when the run starts: the commit and dirtiness are those of the code that ran."""
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": target,
        # p4sim's backend as the switches start it ($P4SIM_BACKEND, else c where gcc is present);
        # its log says "pipeline committed: ... on the c backend" for the program it runs.
        "p4sim_backend": default_backend() if target == "p4sim" else None,
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
                    "python": platform.python_version()},
        "versions": {"p4inc": _git(["rev-parse", "--short", "HEAD"]), **{p: _version(p) for p in PACKAGES}},
        "dirty": is_dirty(),
    }


def is_dirty(checkout: Path = CHECKOUT) -> bool:
    """Whether tracked files changed since the checkout's commit, so that numbers measured now
    are not that commit's. Results are not code: `make bench RESULTS=docs/results` rewrites
    them as its steps finish, and they do not count."""
    return _git(["status", "--porcelain", "--untracked-files=no", "--", ":(top)", f":(top,exclude){RESULTS_DIR}"],
                checkout) not in (None, "")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(args: list[str], checkout: Path = CHECKOUT) -> str | None:
    """git's output in the checkout (this one by default), stripped; None where git or the
    checkout is missing."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=checkout, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None
