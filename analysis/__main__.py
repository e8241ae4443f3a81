"""Fit the latency model to a bench JSON, check it out of sample, predict a described fabric,
write plots, model.json and a Markdown report (results.md).

Usage: python -m analysis results/bench.json -o results/ [--workers 8 64 --link-gbps 400 ...]
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.budget import budget_table
from hosts.args import unwritable

from . import plots
from .model import STALL_RATIO, TERMS, Check, Errors, Fabric, Point, Setup, check, fit, points, predict

log = logging.getLogger("analysis")
BASELINES = ("ring", "mpi")
PREDICTED_SIZES = (256, 4096, 1 << 20, 64 << 20)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m analysis",
        description="Fit a latency model of in-network (INC), host-ring and MPI AllReduce to measured "
                    "completion times (the JSON `make bench` writes), check it out of sample (fit without one "
                    "worker count, predict it), plot measured and modelled times and "
                    "speedups, and predict the speedup of our protocol on a fabric you describe.")
    ap.add_argument("results", type=Path, help="bench JSON (results/bench.json)")
    ap.add_argument("-o", "--out", type=Path, default=None,
                    help="folder for the PNGs, model.json and results.md (default: beside the results)")
    ap.add_argument("--budget", type=Path, default=None,
                    help="a `bench --budget` JSON to add to results.md (default: budget.json beside the "
                         "results, if there is one)")
    real = ap.add_argument_group("the fabric to predict (defaults: an accelerator cluster)")
    real.add_argument("--workers", type=int, nargs="+", default=[8, 64], help="worker counts, each at least 2")
    real.add_argument("--link-gbps", type=float, default=400.0, help="per-host link speed")
    real.add_argument("--switch-latency-ns", type=float, default=500.0, help="switch pipeline latency")
    real.add_argument("--link-latency-ns", type=float, default=100.0, help="one-way cable + NIC latency")
    real.add_argument("--host-overhead-us", type=float, default=1.0,
                      help="send + receive software overhead per step")
    real.add_argument("--payload-bytes", type=int, default=None,
                      help="tensor bytes per packet (default: the measured protocol's)")
    real.add_argument("--window", type=int, default=None,
                      help="packets in flight per sender (default: the measured protocol's)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if any(n < 2 for n in args.workers):
        ap.error("--workers: an AllReduce needs at least 2 workers (1 has nothing to reduce)")
    if not args.link_gbps > 0 or not args.host_overhead_us >= 0 or not args.switch_latency_ns >= 0 \
            or not args.link_latency_ns >= 0:
        ap.error("--link-gbps must be positive and the latencies and overhead not negative")
    if not args.host_overhead_us + args.switch_latency_ns + args.link_latency_ns > 0:
        ap.error("a fabric with no latency at all has no round trip to model")
    if (args.payload_bytes is not None and args.payload_bytes < 1) or (args.window is not None and args.window < 1):
        ap.error("--payload-bytes and --window must be at least 1")
    try:
        bench = json.loads(args.results.read_text())
        runs, config = bench["runs"], bench["config"]
        setup = Setup.from_bench(bench)
        check_runs(runs)
        measured = points(runs)
        fitted = fit(measured, setup)
    except (OSError, ValueError, KeyError, TypeError) as err:
        ap.error(f"{args.results}: not a usable bench result ({err})")
    out = args.out or args.results.parent
    if (why := unwritable(out / "model.json")) is not None:
        ap.error(why)
    budget_path = args.budget or args.results.parent / "budget.json"
    budget = None
    if args.budget is not None or budget_path.exists():
        try:
            budget = json.loads(budget_path.read_text())
            if not isinstance(budget.get("budget"), list):
                raise ValueError("no 'budget' list")
        except (OSError, ValueError, AttributeError) as err:
            ap.error(f"{budget_path}: not a usable budget result ({err})")
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    real = Fabric.describe(args.link_gbps, args.switch_latency_ns, args.host_overhead_us, args.link_latency_ns,
                           args.payload_bytes or setup.payload_bytes, args.window or setup.window)
    real_title = (f"{args.link_gbps:g} Gb/s links, {args.switch_latency_ns:g} ns switch, "
                  f"{args.host_overhead_us:g} us host overhead; {real.window} x {real.payload_bytes} B in flight")
    plots.completion_times(runs, fitted, out / "completion_time.png")
    plots.speedups(runs, fitted, out / "speedup.png")
    plots.fabric_speedups(real, args.workers, np.geomspace(64, 256 << 20, 80), real_title,
                          out / "fabric_speedup.png")
    checks = check(measured, fitted)
    summary = {
        "bench": {"environment": bench.get("environment"), "config": config},
        "measured_model": {"setup": asdict(setup), "stall_ratio": STALL_RATIO, "costs_s": fitted.costs,
                           "terms": {a: {t.name: t.meaning for t in TERMS[a]} for a in fitted.costs}},
        "fit": {a: _errors(c.in_sample) for a, c in checks.items()},
        "out_of_sample": {a: _errors(c.out_of_sample) | {
            "by_workers": {str(n): _errors(e) for n, e in c.by_workers.items()},
            "worst": [_point(p, q) for p, q in sorted(c.held_out, key=lambda pq: -pq[0].error(pq[1]))[:3]]}
            for a, c in checks.items()},
        "stalled": [_point(p, fitted.predict(p.algorithm, p.workers, p.nbytes)) for c in checks.values()
                    for p in c.stalled],
        "points": _points(runs),
        "measured_speedup": {b: _measured_speedups(runs, b) for b in BASELINES},
        "measured_cpu_ratio": {b: _cpu_ratios(runs, b) for b in BASELINES},
        "described_fabric": asdict(real),
        "predicted_speedup": {
            str(n): {str(s): predict(real, "ring", n, s) / predict(real, "inc", n, s) for s in PREDICTED_SIZES}
            for n in args.workers},
    }
    try:
        (out / "model.json").write_text(json.dumps(summary, indent=2))
        (out / "results.md").write_text(report(summary, checks, real_title, budget))
    except OSError as err:
        log.error("cannot write into %s: %s", out, err.strerror or err)
        return 1
    log.info("model error, median / max: %s", "; ".join(
        f"{a} in sample {_pct(c.in_sample)}, leaving one N out {_pct(c.out_of_sample)}" for a, c in checks.items()))
    stalled = [p for c in checks.values() for p in c.stalled]
    if stalled:
        log.info("left out as stalled (wall time > %g x the workers' CPU: waiting for a timer): %s", STALL_RATIO,
                 ", ".join(f"{p.algorithm} N={p.workers} {_size(p.nbytes)} {1e3 * p.time_s:.1f} ms for "
                           f"{1e3 * p.cpu_s:.1f} ms of CPU" for p in stalled))
    for baseline, by_n in summary["measured_speedup"].items():
        for n, by_size in by_n.items():
            log.info("N=%s measured INC speedup over %s: %s", n, baseline,
                     ", ".join(f"{s} B x{v:.2f}" for s, v in by_size.items()))
    for baseline, by_n in summary["measured_cpu_ratio"].items():
        for n, by_size in by_n.items():
            log.info("N=%s host CPU per call, INC / %s: %s", n, baseline,
                     ", ".join(f"{s} B {v:.2f}" for s, v in by_size.items()))
    log.info("wrote %s", ", ".join(str(out / f) for f in ("completion_time.png", "speedup.png",
                                                          "fabric_speedup.png", "model.json", "results.md")))
    return 0


def check_runs(runs: list[dict]) -> None:
    """Raise ValueError unless there are INC runs and a baseline to compare them with, and every
    time is a finite positive number: a model fitted without them predicts nothing it measured."""
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ValueError("'runs' is not a list of runs")
    for r in runs:
        times = r["times_s"]
        if not isinstance(times, list) or not times:
            raise ValueError(f"{r['algorithm']} N={r['workers']} {r['bytes']} B has no times")
        bad = [t for t in times if not isinstance(t, (int, float)) or not 0 < t < math.inf]
        if bad:
            raise ValueError(f"{r['algorithm']} N={r['workers']} {r['bytes']} B has a time of {bad[0]} s: "
                             "times must be finite and positive")
    have = {r["algorithm"] for r in runs}
    if "inc" not in have:
        raise ValueError("no INC runs: nothing to model or compare (bench --algorithms must include inc)")
    if not have & set(BASELINES):
        raise ValueError(f"no {' or '.join(BASELINES)} runs to compare INC with")


def _errors(e: Errors | None) -> dict:
    if e is None:
        return {"points": 0, "median_abs_rel_error": None, "max_abs_rel_error": None}
    return {"points": e.points, "median_abs_rel_error": e.median, "max_abs_rel_error": e.max}


def _pct(e: Errors | None) -> str:
    return "not checked (one worker count)" if e is None else f"{100 * e.median:.1f}% / {100 * e.max:.1f}%"


def _point(p: Point, predicted: float) -> dict:
    return {"algorithm": p.algorithm, "workers": p.workers, "bytes": p.nbytes, "median_s": p.time_s,
            "cpu_per_call_s": p.cpu_s, "predicted_s": predicted, "rel_error": p.error(predicted)}


def _points(runs: list[dict]) -> list[dict]:
    return [{"algorithm": r["algorithm"], "workers": r["workers"], "bytes": r["bytes"], "reps": len(r["times_s"]),
             "median_s": float(np.median(r["times_s"])), "p99_s": float(np.percentile(r["times_s"], 99)),
             **({"cpu_per_call_s": float(np.median(r["cpu_s"]))} if "cpu_s" in r else {})}
            for r in sorted(runs, key=lambda r: (r["workers"], r["bytes"], r["algorithm"]))]


def _measured_speedups(runs: list[dict], baseline: str) -> dict[str, dict[str, float]]:
    med = {(r["algorithm"], r["workers"], r["bytes"]): float(np.median(r["times_s"])) for r in runs}
    result: dict[str, dict[str, float]] = {}
    for (alg, n, s), t in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if alg == "inc" and (baseline, n, s) in med:
            result.setdefault(str(n), {})[str(s)] = med[(baseline, n, s)] / t
    return result


def _cpu_ratios(runs: list[dict], baseline: str) -> dict[str, dict[str, float]]:
    """INC's host CPU per call over the baseline's (medians; < 1: INC leaves the hosts more free)."""
    cpu = {(r["algorithm"], r["workers"], r["bytes"]): float(np.median(r["cpu_s"])) for r in runs if "cpu_s" in r}
    result: dict[str, dict[str, float]] = {}
    for (alg, n, s), c in sorted(cpu.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if alg == "inc" and cpu.get((baseline, n, s)):
            result.setdefault(str(n), {})[str(s)] = c / cpu[(baseline, n, s)]
    return result


def report(summary: dict, checks: dict[str, Check], real_title: str, budget: dict | None) -> str:
    """results.md: where the numbers came from, then per worker count the medians and p99s
    of every algorithm and INC's speedup over each baseline, the model and its errors."""
    env = summary["bench"]["environment"] or {}
    config = summary["bench"]["config"]
    lines = ["# AllReduce on p4sim in Mininet: INC vs host ring vs MPI_Allreduce", "",
             f"Command: `{config.get('command', 'python -m bench')}`, then `python -m analysis`. "
             f"Commit {env.get('versions', {}).get('p4inc')}"
             f"{' with uncommitted changes' if env.get('dirty') else ''}, {env.get('created')}, "
             f"{env.get('machine', {}).get('cores')} cores ({env.get('machine', {}).get('cpu')}), "
             f"target {env.get('target')}, {config.get('dtype')}, {config.get('payload_bytes')} B per packet, "
             f"window {config.get('window')}, {config.get('duration_s', 0):.0f} s.", "",
             "Speedup = baseline median / INC median, same run, same switch. *ring*: the host ring "
             "(hosts/ring.py) over UDP with cumulative and selective acks; *MPI*: Open MPI's "
             "MPI_Allreduce over TCP, one rank per host.", ""]
    points = {(p["algorithm"], p["workers"], p["bytes"]): p for p in summary["points"]}
    for n in sorted({w for _, w, _ in points}):
        lines += [f"## N = {n}", "", "| size | reps | INC median / p99 (ms) | ring median / p99 (ms) | "
                  "MPI median / p99 (ms) | INC over ring | INC over MPI |", "|---|---|---|---|---|---|---|"]
        for s in sorted({b for _, w, b in points if w == n}):
            cells = [_size(s), str(max(p["reps"] for (a, w, b), p in points.items() if w == n and b == s))]
            for alg in ("inc", "ring", "mpi"):
                p = points.get((alg, n, s))
                cells.append(f"{1e3 * p['median_s']:.2f} / {1e3 * p['p99_s']:.2f}" if p else "-")
            for baseline in BASELINES:
                v = summary["measured_speedup"][baseline].get(str(n), {}).get(str(s))
                cells.append(f"{v:.2f}x" if v is not None else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## The model (analysis/model.py)", "",
              "Time = the sum of each term's count x its fitted cost, per algorithm; fitted by non-negative "
              "least squares on relative error. *Leaving one N out*: fitted without that worker count's points, "
              "then predicting them (errors pooled over the held-out points).", "",
              "| algorithm | term | count | fitted cost |", "|---|---|---|---|"]
    costs = summary["measured_model"]["costs_s"]
    for algorithm, meanings in summary["measured_model"]["terms"].items():
        for name, meaning in meanings.items():
            lines.append(f"| {algorithm} | {name} | {meaning} | {1e6 * costs[algorithm][name]:.2f} us |")
    lines += ["", "| algorithm | points | in sample: median / max | leaving one N out: median / max | per held-out N | "
              "worst held-out points (predicted / measured) |", "|---|---|---|---|---|---|"]
    for algorithm, c in checks.items():
        worst = ", ".join(f"N={w['workers']} {_size(w['bytes'])} {1e3 * w['predicted_s']:.2f} / "
                          f"{1e3 * w['median_s']:.2f} ms" for w in summary["out_of_sample"][algorithm]["worst"])
        lines.append(f"| {algorithm} | {c.in_sample.points} | {_pct(c.in_sample)} | {_pct(c.out_of_sample)} | "
                     + ", ".join(f"N={n}: {_pct(e)}" for n, e in c.by_workers.items()) + f" | {worst} |")
    stalled = summary["stalled"]
    lines += ["", (f"Left out as stalled (wall time over {STALL_RATIO:g}x the CPU all workers used: the call waited "
                   "for a timer, which the model does not count): " + ", ".join(
                       f"{p['algorithm']} N={p['workers']} {_size(p['bytes'])} {1e3 * p['median_s']:.1f} ms for "
                       f"{1e3 * p['cpu_per_call_s']:.1f} ms of CPU (model {1e3 * p['predicted_s']:.1f} ms)"
                       for p in stalled) + ".") if stalled else "No point stalled.", "",
              f"Predicted speedup over ring for a real fabric ({real_title}), from our protocol's limits: a host "
              "sends at most window x payload per round trip, one step for INC (its result is its ack), two for "
              "the ring (a chunk, then its ack); the measured machine's costs (calls, wake-ups, per-packet CPU) are 0 there:",
              "",
              "| N | " + " | ".join(_size(s) for s in PREDICTED_SIZES) + " |",
              "|---|" + "---|" * len(PREDICTED_SIZES)]
    for n, by_size in summary["predicted_speedup"].items():
        lines.append(f"| {n} | " + " | ".join(f"{by_size[str(s)]:.2f}x" for s in PREDICTED_SIZES) + " |")
    if budget:
        env = budget.get("environment") or {}
        lines += ["", "## Latency budget of one INC call", "",
                  f"Command: `{budget.get('config', {}).get('command', 'python -m bench --budget')}`, commit "
                  f"{env.get('versions', {}).get('p4inc')}{' with uncommitted changes' if env.get('dirty') else ''}. "
                  "*call*: the last worker's start to the last worker's end; *start skew*: spread of their "
                  "starts after the barrier; *packet RTT*: one INC packet's round trip through the switch; "
                  "the rest is each worker's own call as the agent times it (medians).", "",
                  budget_table(budget["budget"])]
    return "\n".join(lines) + "\n"


def _size(nbytes: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


if __name__ == "__main__":
    sys.exit(main())
