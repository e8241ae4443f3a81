"""Find and remove what a fabric left behind: the processes recorded in `build/run/`
(switch targets, Mininet node shells, host programs) and switch-side veths named in
`build/topology.json`, and the same for the fabrics the benches and demos build in folders of
their own below it (`build/bench/`, `build/tp/`, ...); then Mininet's own global cleanup
(`mn -c`), but only when no other checkout's fabric is up (topologies.machine) or when asked.
`make stop` runs this.
"""
from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from pathlib import Path

from p4sim.dataplane.traffic import remove_stale_labs
from topologies import machine
from topologies.fabric import leftovers, present_intfs, recorded_topology, unimpair_switch_links
from topologies.procs import end, recorded

log = logging.getLogger(__name__)

MN_CLEAN_TIMEOUT_S = 120.0


def fabric_dirs(build_dir: Path) -> list[Path]:
    """`build_dir` and the folders below it that a bench or demo built a fabric in (`make bench`
    uses build/bench, `make demo-tp` build/tp): each has its own run/ records."""
    return [build_dir, *sorted(run.parent for run in build_dir.glob("*/run") if run.is_dir())]


def clean(build_dir: Path) -> list[str]:
    """End recorded processes and delete leftover switch veths, of `build_dir`'s fabric and of
    those below it, and the veth labs of p4sim's benches and tests that were killed before they
    removed theirs; return what was removed."""
    return ([what for d in fabric_dirs(build_dir) for what in clean_one(d)]
            + [f"namespace {name}" for name in remove_stale_labs()])


def clean_one(build_dir: Path) -> list[str]:
    """End the processes recorded in build_dir/run and delete the fabric's leftover switch veths."""
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


def mininet_cleanup_decision(build_dir: Path, everything: bool, only_ours: bool,
                             up: machine.FabricRecord | None,
                             last: machine.FabricRecord | None) -> tuple[bool, str]:
    """Whether `make stop` in `build_dir` may run `mn -c`, which removes every Mininet fabric's
    shells and interfaces on the machine, and why: not while another checkout's fabric is up
    (`up`: the slot's holder) or left processes running (`last`: the slot's last holder)."""
    if everything:
        return True, "asked to clean Mininet up globally (ALL=1)"
    if only_ours:
        return False, "asked to stop only this checkout's fabric"
    ours = str(build_dir.resolve())
    if up is not None and up.build_dir != ours:
        return False, (f"{up.describe()} is up: `mn -c` would tear it down; stop it there, "
                       "or clean up everything with make stop ALL=1")
    if up is None and last is not None and last.build_dir != ours:
        still = leftovers(Path(last.build_dir))
        if still:
            return False, (f"{last.describe()} left {len(still)} processes and interfaces running "
                           f"({', '.join(still[:3])}{', ...' if len(still) > 3 else ''}): make stop in "
                           f"{last.checkout}, or make stop ALL=1")
    return True, "no other checkout's fabric is up"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m topologies.cleanup",
        description="Stop every switch, Mininet node shell and host program that a p4inc fabric "
                    "recorded in BUILD/run/ (or in BUILD/*/run/: the benches' and demos' fabrics), and delete "
                    "the switch veths named in the topology.json beside it; "
                    "then run Mininet's global cleanup (mn -c) unless another checkout's fabric is up "
                    f"(the holder of {machine.FABRIC_LOCK}) or left processes running. Notes what it "
                    f"did in {machine.TEARDOWN_LOG}, so a fabric it tore down can say who did.")
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="the build directory of the fabric (default: build)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--all", action="store_true",
                       help="run mn -c even when another checkout's fabric is up (make stop ALL=1)")
    scope.add_argument("--only-ours", action="store_true", help="never run mn -c")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    removed = clean(args.build_dir)
    print("\n".join(f"removed {what}" for what in removed) or "nothing of this checkout's left over")
    run_mn, why = mininet_cleanup_decision(args.build_dir, args.all, args.only_ours, machine.fabric_up(),
                                           machine.last_holder())
    if removed or run_mn:
        machine.note_teardown(args.build_dir, run_mn)
    if not run_mn:
        print(f"not running mn -c: {why}")
        return 0
    print(f"mn -c: {why}")
    try:
        done = subprocess.run(["mn", "-c"], capture_output=True, text=True, timeout=MN_CLEAN_TIMEOUT_S)
    except FileNotFoundError:
        print("mn is not installed: nothing more to clean (make setup installs Mininet)", file=sys.stderr)
        return 0
    except subprocess.TimeoutExpired:
        print(f"error: mn -c did not finish within {MN_CLEAN_TIMEOUT_S:.0f} s", file=sys.stderr)
        return 1
    if done.returncode != 0:
        print(f"error: mn -c failed (exit {done.returncode}): {done.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
