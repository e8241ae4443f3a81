"""The machine, target and versions a benchmark ran on, recorded beside its numbers."""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from p4sim.backends import default_backend

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
        # Tracked files changed since that commit: the numbers are not that commit's. Results are
        # not code: `make bench RESULTS=docs/results` rewrites them as its steps finish.
        "dirty": _git(["status", "--porcelain", "--untracked-files=no", "--", ".",
                       f":(exclude){RESULTS_DIR}"]) not in (None, ""),
    }


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


def _git(args: list[str]) -> str | None:
    """git's output in this checkout, stripped; None where git or the checkout is missing."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent,
                             timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None
