"""The switch's other collectives (Reduce, ReduceScatter, Broadcast, AllGather, Barrier) against
their host baselines on the ring (hosts/ring.py), on one Mininet star through the same switch.

The fabric, the per-host benchmark workers and the trials are `python -m bench`'s; each trial
is checked against numpy by every rank before it counts (bench.calls). Writes JSON (with the
commit and dirty flag) and a plot of time vs size, one panel per collective.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm

from analysis.plots import collective_times
from hosts.agent import JobConfig
from hosts.args import unwritable
from topologies.fabric import Fabric, FabricError, FabricOptions
from topologies.pieces import PieceError
from topologies.spec import TopologyError, star

from .__main__ import (ROOT, BenchError, Plan, _sizes, add_counts, add_trial_options, check_trial_options,
                       program_elements_per_packet, set_up, summarise)
from .budget import call_cpu, call_time
from .calls import ROOT as COLLECTIVE_ROOT
from .environment import describe_environment

log = logging.getLogger("bench.collectives")
COLLECTIVES = ("reduce", "reduce-scatter", "broadcast", "all-gather", "barrier")
DEFAULT_SIZES = [256 << (2 * i) for i in range(7)]        # 256 B, 1 KiB, ... 1 MiB
# What each collective is measured against (hosts/ring.py).
BASELINES = {
    "reduce": f"pipeline along the ring ending at rank {COLLECTIVE_ROOT}, each rank adds and passes each chunk on",
    "reduce-scatter": "the ring AllReduce's first half (N-1 steps)",
    "broadcast": f"pipeline along the ring from rank {COLLECTIVE_ROOT}, each rank passes each chunk on",
    "all-gather": "the ring AllReduce's second half (N-1 steps)",
    "barrier": "ring AllReduce of one element (2(N-1) hops)",
}


def bench_collectives(plan: Plan, collectives: list[str], options: FabricOptions, progress: tqdm) -> list[dict]:
    """Every collective, size and repetition on one fresh star of plan.workers[0] hosts."""
    n = plan.workers[0]
    times: dict[tuple[str, str, int], list[float]] = {}
    skews: dict[tuple[str, str, int], list[float]] = {}
    cpus: dict[tuple[str, str, int], list[float | None]] = {}
    checked: dict[tuple[str, str, int], int] = {}       # ranks' results found right by numpy
    totals: dict[tuple[str, str, int], dict[str, float]] = {}
    k = len(plan.algorithms)
    with Fabric(star(n, mtu=plan.mtu), options) as fabric:
        trials = set_up(fabric, plan, options)
        for collective in collectives:
            sizes = [0] if collective == "barrier" else plan.sizes
            for algorithm in plan.algorithms:   # warm up the collective's own code paths, untimed
                trials.run(algorithm, sizes[0], seed=0, collective=collective)
            for size in sizes:
                for rep in range(plan.reps_for(size)):
                    # Rotate which algorithm goes first, so drift hits both alike.
                    for algorithm in plan.algorithms[rep % k:] + plan.algorithms[:rep % k]:
                        progress.set_postfix_str(f"{collective} {algorithm} {size} B")
                        seconds, replies = trials.run(algorithm, size, seed=rep + 1, collective=collective)
                        key = (collective, algorithm, size)
                        times.setdefault(key, []).append(seconds)
                        skews.setdefault(key, []).append(call_time(replies)[1])
                        cpus.setdefault(key, []).append(call_cpu(replies))
                        checked[key] = checked.get(key, 0) + sum(bool(r["ok"]) for r in replies)
                        add_counts(totals.setdefault(key, {}), replies)
                        progress.update()
        trials.close()
    return [{"collective": c, "algorithm": a, "workers": n, "bytes": s, "elements_per_packet": trials.k,
             **summarise(ts, skews[(c, a, s)], cpus[(c, a, s)]),
             "checked_results": checked[(c, a, s)], "agent_totals": totals[(c, a, s)],
             **({"switch_passes_per_chunk": passes_per_chunk(totals[(c, a, s)], n)} if a == "inc" else {})}
            for (c, a, s), ts in times.items()]


def passes_per_chunk(totals: dict[str, float], n: int) -> float:
    """The switch's ingress passes per chunk of a call: every packet the n workers sent (each one
    pass; retransmissions included) over the call's chunks (each worker counts all of them)."""
    return totals["packets_sent"] * n / totals["chunks"] if totals.get("chunks") else 0.0


def median_table(runs: list[dict]) -> str:
    """Markdown: per collective and size, the medians of switch and ring, their ratio, and the
    switch's passes per chunk."""
    median = {(r["collective"], r["algorithm"], r["bytes"]): r["median_s"] for r in runs}
    passes = {(r["collective"], r["bytes"]): r.get("switch_passes_per_chunk", 0.0) for r in runs
              if r["algorithm"] == "inc"}
    lines = ["| collective | bytes | switch median (ms) | ring median (ms) | ring / switch | switch passes per chunk |",
             "|---|---:|---:|---:|---:|---:|"]
    for (collective, algorithm, size), inc in median.items():
        ring = median.get((collective, "ring", size))
        if algorithm == "inc" and ring is not None:
            lines.append(f"| {collective} | {size} | {inc * 1e3:.2f} | {ring * 1e3:.2f} | {ring / inc:.2f} "
                         f"| {passes[(collective, size)]:.2f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench.collectives",
        description="Measure the switch's Reduce, ReduceScatter, Broadcast, AllGather and Barrier "
                    "against host baselines on a ring (ReduceScatter and AllGather: the ring "
                    "AllReduce's halves; Reduce and Broadcast: pipelines along the ring; Barrier: a "
                    "one-element ring AllReduce) on one Mininet star, every result checked against "
                    "numpy. Sizes are the whole buffer (AllGather's output, the others' input). "
                    "Needs root. Writes JSON and a PNG plot.")
    ap.add_argument("--workers", type=int, default=8, help="hosts in the star, 2..8 (default 8)")
    ap.add_argument("--sizes", type=_sizes,
                    help="comma-separated buffer sizes in bytes (default 256 B to 1 MiB, x4)")
    ap.add_argument("--collectives", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES),
                    help="what to measure (default all)")
    ap.add_argument("--reps", type=int, default=15, help="repetitions per point up to 64 KiB (default 15)")
    ap.add_argument("--reps-large", type=int, default=5, help="repetitions per point above 64 KiB (default 5)")
    add_trial_options(ap)
    ap.add_argument("--window-acks", action=argparse.BooleanOptionalAction, default=JobConfig.window_acks,
                    help="INC workers' Reduce and ReduceScatter acknowledged by their roots (docs/protocol.md, "
                         f"\"Window ACKs\"; default {'on' if JobConfig.window_acks else 'off'})")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "results" / "collectives.json",
                    help="JSON output (default results/collectives.json)")
    ap.add_argument("--plot", type=Path, default=None,
                    help="PNG plot (default: the JSON's path with .png)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    check_trial_options(ap, args, [args.workers])
    plot = args.plot or args.out.with_suffix(".png")
    for path in (args.out, plot):
        if (why := unwritable(path)) is not None:
            ap.error(why)
    if os.geteuid() != 0:
        ap.error("Mininet needs root: run as root")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    environment = describe_environment(args.target)
    sizes = args.sizes or DEFAULT_SIZES
    plan = Plan([args.workers], sizes, args.reps, args.reps_large, ("inc", "ring"), args.dtype,
                args.window, args.timeout, args.trial_timeout, args.target, args.engine, args.mtu,
                args.elements_per_packet, args.eager_rounds, spin=args.spin, window_acks=args.window_acks)
    options = FabricOptions(target=args.target, build_dir=ROOT / "build" / "bench")
    started, load_before = time.monotonic(), os.getloadavg()
    total = 2 * sum(plan.reps_for(s) for c in args.collectives for s in ([0] if c == "barrier" else sizes))
    try:
        with tqdm(total=total, unit="trial") as progress:
            runs = bench_collectives(plan, args.collectives, options, progress)
    except (BenchError, FabricError, PieceError, TopologyError) as err:
        log.error("benchmark stopped: %s", err)
        return 1
    k = program_elements_per_packet(runs)
    config = {"payload_bytes": 4 * k, "elements_per_packet": k, "mtu": plan.mtu, "dtype": plan.dtype,
              "window": plan.window, "timeout_s": plan.timeout, "reps": plan.reps, "reps_large": plan.reps_large,
              "engine": plan.engine, "eager_rounds": plan.eager_rounds, "window_acks": plan.window_acks,
              "spin_s": plan.spin_for(args.workers)._asdict(),
              "workers": args.workers, "sizes": sizes, "collectives": args.collectives, "root": COLLECTIVE_ROOT,
              "baselines": {c: BASELINES[c] for c in args.collectives},
              # The machine's 1, 5 and 15 minute load averages: other work on it slows both sides.
              "load_average": {"start": list(load_before), "end": list(os.getloadavg())},
              "duration_s": time.monotonic() - started,
              "command": "python -m bench.collectives " + " ".join(argv if argv is not None else sys.argv[1:])}
    try:
        args.out.write_text(json.dumps({"environment": environment, "config": config, "runs": runs}, indent=2))
        collective_times(runs, plot)
    except OSError as err:
        log.error("cannot write the results: %s", err.strerror or err)
        return 1
    log.info("wrote %s and %s", args.out, plot)
    print(median_table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
