"""In-network AllReduce vs host ring AllReduce on the same Mininet star, same packets.

For each worker count a fresh fabric is built (p4sim or BMv2 running p4src/allreduce.p4),
one benchmark worker starts in every host, and trials alternate INC and ring so that a
noisy machine biases neither. Every sum is checked against numpy. Writes JSON.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hosts.inc import INC_K
from topologies.fabric import Fabric, FabricError, FabricOptions
from topologies.pieces import DEFAULT_PROGRAM, PieceError, compile_program, setup_controller
from topologies.spec import TopologyError, star

from .environment import describe_environment

log = logging.getLogger("bench")
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = [256 << (2 * i) for i in range(8)]        # 256 B, 1 KiB, ... 4 MiB


class BenchError(RuntimeError):
    """A trial that failed or did not finish; the benchmark stops rather than report it."""


@dataclass(frozen=True)
class Plan:
    workers: list[int]
    sizes: list[int]
    reps: int
    dtype: str
    window: int
    timeout: float
    trial_timeout: float
    target: str


class Trials:
    """The benchmark workers of one fabric, one per host, driven over their stdin/stdout."""

    def __init__(self, fabric: Fabric, plan: Plan) -> None:
        job = fabric.topo.jobs[0]
        peers = ",".join(fabric.topo.hosts[h].address for h in job.workers)
        self.plan = plan
        self.procs = [
            fabric.popen(host, [sys.executable, "-m", "bench.worker", "--job-id", str(job.job_id),
                                "--rank", str(rank), "--peers", peers, "--window", str(plan.window),
                                "--timeout", str(plan.timeout)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
            for rank, host in enumerate(job.workers)]

    def run(self, algorithm: str, nbytes: int, seed: int) -> float:
        """One AllReduce on every host: the earliest start to the latest end, in seconds."""
        line = json.dumps({"algorithm": algorithm, "bytes": nbytes, "dtype": self.plan.dtype,
                           "seed": seed}) + "\n"
        for proc in self.procs:
            proc.stdin.write(line)
            proc.stdin.flush()
        replies = [self._reply(proc) for proc in self.procs]
        bad = [r["error"] for r in replies if not r["ok"]]
        if bad:
            raise BenchError(f"{algorithm} AllReduce of {nbytes} B failed: {bad[0]}")
        return max(r["end"] for r in replies) - min(r["start"] for r in replies)

    def close(self) -> None:
        """End of input: each worker acknowledges its last ring chunks and exits."""
        for proc in self.procs:
            proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.warning("a benchmark worker did not exit; the fabric will stop it")

    def _reply(self, proc: subprocess.Popen) -> dict:
        ready, _, _ = select.select([proc.stdout], [], [], self.plan.trial_timeout)
        text = proc.stdout.readline() if ready else ""
        if not text:
            raise BenchError(f"a benchmark worker gave no answer within {self.plan.trial_timeout:g} s "
                             f"(exit code {proc.poll()})")
        return json.loads(text)


def bench_workers(n: int, plan: Plan, options: FabricOptions, progress: tqdm) -> list[dict]:
    """All sizes and repetitions for one worker count, on a fresh star of n hosts."""
    times: dict[tuple[str, int], list[float]] = {}
    with Fabric(star(n), options) as fabric:
        program = compile_program(plan.target, DEFAULT_PROGRAM, options.build_dir)
        setup_controller(options.topology_path, options.build_dir, program, plan.target)
        trials = Trials(fabric, plan)
        for algorithm in ("inc", "ring"):          # warm up sockets, ARP and code paths
            trials.run(algorithm, plan.sizes[0], seed=0)
        for size in plan.sizes:
            for rep in range(plan.reps):
                # Alternate which algorithm goes first, so drift hits both alike.
                for algorithm in (("inc", "ring") if rep % 2 == 0 else ("ring", "inc")):
                    progress.set_postfix_str(f"N={n} {algorithm} {size} B")
                    times.setdefault((algorithm, size), []).append(trials.run(algorithm, size, seed=rep + 1))
                    progress.update()
        trials.close()
    return [{"algorithm": alg, "workers": n, "bytes": size, "times_s": ts,
             "median_s": float(np.median(ts)), "q25_s": float(np.percentile(ts, 25)),
             "q75_s": float(np.percentile(ts, 75))}
            for (alg, size), ts in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes are comma-separated byte counts, not {text!r}") from None
    if any(s < 4 for s in sizes):
        raise argparse.ArgumentTypeError("each size must be at least 4 bytes (one element)")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="Measure in-network AllReduce (the switch aggregates) against a host ring "
                    "AllReduce (the switch only forwards) on the same Mininet star, same packet "
                    "size, same socket path and loss recovery. Needs root. Writes JSON with the "
                    "machine, target and versions; `python -m analysis` fits the model and plots.")
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8], help="worker counts (2..8)")
    ap.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES,
                    help="comma-separated message sizes in bytes per worker (default 256 B to 4 MiB, x4)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per algorithm and size")
    ap.add_argument("--dtype", choices=("float32", "int32"), default="float32")
    ap.add_argument("--window", type=int, default=16, help="slots (INC) / unacked chunks (ring) in flight")
    ap.add_argument("--timeout", type=float, default=0.05, help="retransmission timeout, seconds")
    ap.add_argument("--trial-timeout", type=float, default=600.0,
                    help="give up on a trial after this many seconds")
    ap.add_argument("--target", choices=("p4sim", "bmv2"), default=os.environ.get("TARGET", "p4sim"))
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "results/bench.json", help="JSON output")
    args = ap.parse_args(argv)
    if any(not 2 <= n <= 8 for n in args.workers) or args.reps < 1:
        ap.error("--workers must be 2..8 and --reps at least 1")
    if os.geteuid() != 0:
        ap.error("Mininet needs root: run as root (sudo make bench)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    plan = Plan(args.workers, args.sizes, args.reps, args.dtype, args.window, args.timeout,
                args.trial_timeout, args.target)
    options = FabricOptions(target=args.target, build_dir=ROOT / "build" / "bench")
    runs: list[dict] = []
    started = time.monotonic()
    try:
        with tqdm(total=len(plan.workers) * len(plan.sizes) * plan.reps * 2, unit="trial") as progress:
            for n in plan.workers:
                runs += bench_workers(n, plan, options, progress)
    except (BenchError, FabricError, PieceError, TopologyError) as err:
        log.error("benchmark stopped: %s", err)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "environment": describe_environment(args.target),
        "config": {"payload_bytes": 4 * INC_K, "elements_per_packet": INC_K, "dtype": plan.dtype,
                   "window": plan.window, "timeout_s": plan.timeout, "reps": plan.reps,
                   "workers": plan.workers, "sizes": plan.sizes,
                   "duration_s": time.monotonic() - started},
        "runs": runs}, indent=2))
    log.info("wrote %s", args.out)
    median = {(r["algorithm"], r["workers"], r["bytes"]): r["median_s"] for r in runs}
    for n in plan.workers:
        log.info("N=%d INC speedup over ring: %s", n, ", ".join(
            f"{s} B x{median[('ring', n, s)] / median[('inc', n, s)]:.2f}" for s in plan.sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
