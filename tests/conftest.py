"""Project-wide test setup: tests marked `mininet` or `bmv2` skip, with the reason,
on machines that cannot run them (not root, no mnexec, no BMv2); SIGTERM unwinds like Ctrl-C.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal

import pytest


def mininet_missing() -> str | None:
    """Why Mininet tests cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root: Mininet creates network namespaces and veth pairs"
    if shutil.which("mnexec") is None:
        return "needs Mininet's mnexec (apt-get install mininet, or make setup)"
    if importlib.util.find_spec("mininet") is None:
        return "needs the mininet Python module (pip install -r requirements.txt, or make setup)"
    if shutil.which("nft") is None:
        return "needs nft for link loss (apt-get install nftables, or make setup)"
    return None


def bmv2_missing() -> str | None:
    """Why BMv2 tests cannot run here, or None if they can."""
    missing = [tool for tool in ("simple_switch_grpc", "p4c") if shutil.which(tool) is None]
    if missing:
        return f"needs BMv2: {' and '.join(missing)} not on PATH (the default target is p4sim)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = {"mininet": mininet_missing(), "bmv2": bmv2_missing()}
    for item in items:
        for marker, reason in reasons.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_sessionstart(session: pytest.Session) -> None:
    # A CI timeout's SIGTERM then unwinds like Ctrl-C: fixture teardowns still stop
    # the switches and namespaces they started.
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)
