"""Find and remove what a fabric left behind: the processes recorded in `build/run/`
(switch targets, Mininet node shells, host programs) and switch-side veths named in
`build/topology.json`. `make stop` runs this before `mn -c`; tests use `leftovers`.
"""
from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from pathlib import Path

from topologies.fabric import TOPOLOGY_FILE, unimpair_switch_links
from topologies.procs import end, recorded
from topologies.spec import Topology, TopologyError

log = logging.getLogger(__name__)


def leftovers(build_dir: Path, topo: Topology | None = None) -> list[str]:
    """What is still alive or present from the fabric in `build_dir`, one line each."""
    found = [f"process {r.pid} ({r.marker})" for r in recorded(build_dir / "run") if r.alive()]
    found += [f"interface {name}" for name in _present_intfs(build_dir, topo)]
    return found


def clean(build_dir: Path) -> list[str]:
    """End recorded processes and delete leftover switch veths; return what was removed."""
    removed = []
    # Host programs first, then switch targets, then the node shells that hold the namespaces.
    records = sorted(recorded(build_dir / "run"), key=lambda r: ("mininet:" in r.marker, r.path.name))
    for rec in records:
        if rec.alive():
            removed.append(f"process {rec.pid} ({rec.marker})")
        # An interactive shell ignores SIGTERM; SIGHUP is how Mininet ends its node shells.
        end(rec, first=signal.SIGHUP if "mininet:" in rec.marker else signal.SIGTERM)
    topo = _topology(build_dir)
    if topo is not None:
        unimpair_switch_links(topo)     # the loss rules on switch links live in the root namespace
    for name in _present_intfs(build_dir, topo):
        # Deleting one end of a veth deletes its peer in the host namespace too.
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)
        removed.append(f"interface {name}")
    return removed


def _topology(build_dir: Path) -> Topology | None:
    path = build_dir / TOPOLOGY_FILE
    if not path.exists():
        return None
    try:
        return Topology.load(path)
    except TopologyError as e:
        log.warning("cannot tell which interfaces are ours: %s", e)
        return None


def _present_intfs(build_dir: Path, topo: Topology | None) -> list[str]:
    topo = topo or _topology(build_dir)
    if topo is None:
        return []
    return [name for name in topo.switch_intfs() if Path("/sys/class/net", name).exists()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topologies.cleanup",
        description="Stop every switch, Mininet node shell and host program that a p4inc fabric "
                    "recorded in BUILD/run/, and delete the switch veths named in BUILD/topology.json. "
                    "Touches nothing else.")
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="the build directory of the fabric (default: build)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    removed = clean(args.build_dir)
    print("\n".join(f"removed {what}" for what in removed) or "nothing left over")
    return 0


if __name__ == "__main__":
    sys.exit(main())
