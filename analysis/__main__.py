"""Fit the latency model to a bench JSON, predict a described fabric, write plots and a summary.

Usage: python -m analysis results/bench.json -o results/ [--workers 8 64 --link-gbps 400 ...]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from . import plots
from .model import Fabric, fit, predict

log = logging.getLogger("analysis")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m analysis",
        description="Fit an alpha-beta model of ring, tree and in-network AllReduce to measured "
                    "completion times (the JSON `make bench` writes), plot measured vs modelled "
                    "times and speedups, and predict the speedup on a fabric you describe.")
    ap.add_argument("results", type=Path, help="bench JSON (results/bench.json)")
    ap.add_argument("-o", "--out", type=Path, default=None,
                    help="folder for the PNGs and model.json (default: beside the results)")
    real = ap.add_argument_group("the fabric to predict (defaults: an accelerator cluster)")
    real.add_argument("--workers", type=int, nargs="+", default=[8, 64], help="worker counts")
    real.add_argument("--link-gbps", type=float, default=400.0, help="per-host link speed")
    real.add_argument("--switch-latency-ns", type=float, default=500.0, help="switch pipeline latency")
    real.add_argument("--link-latency-ns", type=float, default=100.0, help="one-way cable + NIC latency")
    real.add_argument("--host-overhead-us", type=float, default=1.0,
                      help="send + receive software overhead per step")
    real.add_argument("--payload-bytes", type=int, default=1024, help="tensor bytes per packet")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    try:
        bench = json.loads(args.results.read_text())
        runs, payload = bench["runs"], int(bench["config"]["payload_bytes"])
        fitted = fit(runs, payload)
    except (OSError, ValueError, KeyError, TypeError) as err:
        ap.error(f"{args.results}: not a usable bench result ({err})")
    out = args.out or args.results.parent
    out.mkdir(parents=True, exist_ok=True)

    real = Fabric.describe(args.link_gbps, args.switch_latency_ns, args.host_overhead_us,
                           args.link_latency_ns, args.payload_bytes)
    sizes = np.geomspace(256, 256 << 20, 80)
    plots.completion_times(runs, fitted.fabric, out / "completion_time.png")
    plots.speedups(runs, fitted.fabric, out / "speedup.png")
    plots.fabric_speedups(real, args.workers, sizes,
                          f"{args.link_gbps:g} Gb/s links, {args.switch_latency_ns:g} ns switch, "
                          f"{args.host_overhead_us:g} us host overhead", out / "fabric_speedup.png")

    summary = {
        "measured_fabric": asdict(fitted.fabric),
        "fit": {"points": fitted.points, "median_abs_rel_error": fitted.median_abs_rel_error,
                "max_abs_rel_error": fitted.max_abs_rel_error},
        "measured_speedup": _measured_speedups(runs),
        "described_fabric": asdict(real),
        "predicted_speedup": {
            str(n): {str(s): predict(real, "ring", n, s) / predict(real, "inc", n, s)
                     for s in (4096, 1 << 20, 64 << 20)} for n in args.workers},
    }
    (out / "model.json").write_text(json.dumps(summary, indent=2))
    log.info("fit over %d points: median error %.1f%%, max %.1f%%", fitted.points,
             100 * fitted.median_abs_rel_error, 100 * fitted.max_abs_rel_error)
    for n, by_size in summary["measured_speedup"].items():
        log.info("N=%s measured INC speedup over ring: %s", n,
                 ", ".join(f"{s} B x{v:.2f}" for s, v in by_size.items()))
    log.info("wrote %s", ", ".join(str(out / f) for f in
                                   ("completion_time.png", "speedup.png", "fabric_speedup.png", "model.json")))
    return 0


def _measured_speedups(runs: list[dict]) -> dict[str, dict[str, float]]:
    med = {(r["algorithm"], r["workers"], r["bytes"]): float(np.median(r["times_s"])) for r in runs}
    result: dict[str, dict[str, float]] = {}
    for (alg, n, s), t in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if alg == "inc" and ("ring", n, s) in med:
            result.setdefault(str(n), {})[str(s)] = med[("ring", n, s)] / t
    return result


if __name__ == "__main__":
    sys.exit(main())
