"""The machine, target and versions a benchmark ran on, recorded beside its numbers."""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

PACKAGES = ("scapy", "numpy", "grpcio", "protobuf", "p4runtime", "p4runtime-shell", "lark", "mininet")


def describe_environment(target: str) -> dict:
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": target,
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
                    "python": platform.python_version()},
        "versions": {"p4inc": _git_revision(), **{p: _version(p) for p in PACKAGES}},
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


def _git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
