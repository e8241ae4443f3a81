"""Find and remove what a fabric left behind: the processes recorded in `build/run/`
(switch targets, Mininet node shells, host programs) and switch-side veths named in
`build/topology.json`. `make stop` runs this before `mn -c`.
"""
from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from pathlib import Path

from topologies.fabric import present_intfs, recorded_topology, unimpair_switch_links
from topologies.procs import end, recorded

log = logging.getLogger(__name__)


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
    topo = recorded_topology(build_dir)
    if topo is not None:
        unimpair_switch_links(topo)     # the loss rules on switch links live in the root namespace
    for name in present_intfs(build_dir, topo):
        # Deleting one end of a veth deletes its peer in the host namespace too.
        subprocess.run(["ip", "link", "del", name], check=False, capture_output=True)
        removed.append(f"interface {name}")
    return removed


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
