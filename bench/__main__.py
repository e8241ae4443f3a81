"""In-network AllReduce vs a host ring and vs Open MPI's MPI_Allreduce on the same Mininet
star, every one through the same switch.

For each worker count a fresh fabric is built (p4sim or BMv2 running p4src/allreduce.p4),
one benchmark worker starts in every host (INC and ring) and `mpirun` starts one MPI rank
per host; trials rotate the order of the algorithms so that a noisy machine biases none.
Every sum is checked against numpy. Writes JSON. `--budget` instead times where one small
INC call spends its time.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hosts.agent import JobConfig
from hosts.args import settle_elements_per_packet, unwritable
from hosts.engine import DEFAULT_SPIN, DEFAULT_SPIN_LARGE, ENGINES, POLL_CHUNKS, Spin, spin_for
from hosts.inc import MAX_WINDOW, STAR_WINDOW
from protocol import RECOMMENDED_ELEMENTS_PER_PACKET, recommended_elements_per_packet
from topologies.fabric import Fabric, FabricError, FabricOptions
from topologies.pieces import (DEFAULT_PROGRAM, PieceError, compile_program, job_elements_per_packet,
                               setup_controller)
from topologies.spec import DEFAULT_MTU, Topology, TopologyError, leaf_spine, star

from .budget import budget_table, call_budget, call_cpu, call_time, numeric_stats
from .environment import describe_environment
from .mpi import ROOT_ENV, mpi_missing, mpirun_command, write_launcher

P4SIM_K = RECOMMENDED_ELEMENTS_PER_PACKET["p4sim"]
log = logging.getLogger("bench")
ROOT = Path(__file__).resolve().parent.parent
ALGORITHMS = ("inc", "ring", "mpi")
DEFAULT_SIZES = [64 << (2 * i) for i in range(9)]        # 64 B, 256 B, 1 KiB, ... 4 MiB
SMALL_BYTES = 64 << 10        # up to this size a point gets --reps, above it --reps-large


class BenchError(RuntimeError):
    """A trial that failed or did not finish; the benchmark stops rather than report it."""


@dataclass(frozen=True)
class Plan:
    workers: list[int]
    sizes: list[int]
    reps: int
    reps_large: int
    algorithms: tuple[str, ...]
    dtype: str
    window: int
    timeout: float
    trial_timeout: float
    target: str
    engine: str = "c"                        # the INC and ring agents' engine (hosts/engine), the same for both
    mtu: int = DEFAULT_MTU                   # of every link: INC, ring and MPI share it
    elements_per_packet: int | None = None   # to build the program with (None: its default)
    eager_rounds: bool = JobConfig.eager_rounds   # INC workers' eager Broadcast/AllGather rounds
    leaves: int = 0                          # > 0: a leaf-spine of this many leaves under one spine, not a star
    spin: float | None = None                # engines' read-before-sleep seconds, any call (None: engine.spin_for)
    window_acks: bool = JobConfig.window_acks     # INC workers' window ACKs in Reduce/ReduceScatter

    def topology(self, n: int) -> Topology:
        """The fabric of n workers: a star, or n / leaves hosts on each leaf of a leaf-spine
        (its job summed by the leaves and the spine)."""
        if self.leaves:
            return leaf_spine(self.leaves, 1, n // self.leaves, mtu=self.mtu)
        return star(n, mtu=self.mtu)

    def spin_for(self, n: int) -> Spin:
        """The engines' spin with n workers on this machine's cores."""
        return spin_for(n) if self.spin is None else Spin(self.spin, self.spin)

    def reps_for(self, size: int) -> int:
        return self.reps if size <= SMALL_BYTES else self.reps_large


class Trials:
    """The benchmark processes of one fabric, driven over their stdin/stdout with JSON lines:
    one bench.worker per host (INC and ring), and one mpirun whose rank 0 answers for all."""

    def __init__(self, fabric: Fabric, plan: Plan) -> None:
        job = fabric.topo.jobs[0]
        peers = ",".join(fabric.topo.hosts[h].address for h in job.workers)
        self.plan = plan
        self.k = job_elements_per_packet(fabric.options.topology_path, job.job_id)   # ring chunks follow it
        self.logs: dict[int, Path] = {}      # by pid: where each process's stderr goes
        spin = plan.spin_for(len(job.workers))
        self.procs = [
            self._start(fabric, host, f"bench-{host}", [
                sys.executable, "-m", "bench.worker", "--job-id", str(job.job_id), "--rank", str(rank),
                "--peers", peers, "--window", str(plan.window), "--timeout", str(plan.timeout),
                "--elements-per-packet", str(self.k), "--engine", plan.engine,
                "--spin", str(spin.small), "--spin-large", str(spin.large),
                "--eager-rounds" if plan.eager_rounds else "--no-eager-rounds",
                "--window-acks" if plan.window_acks else "--no-window-acks"])
            for rank, host in enumerate(job.workers)]
        self.mpi: list[subprocess.Popen] = []
        if "mpi" in plan.algorithms:
            launcher = write_launcher(fabric, list(job.workers), fabric.options.run_dir / "mpi-launcher.sh")
            self.mpi = [self._start(fabric, job.workers[0], "bench-mpirun",
                                    mpirun_command(fabric, list(job.workers), launcher, ROOT),
                                    env=os.environ | ROOT_ENV)]

    def _start(self, fabric: Fabric, host: str, name: str, args: list[str], **kwargs) -> subprocess.Popen:
        log_path = fabric.options.log_dir / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as stderr:
            proc = fabric.popen(host, args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                text=True, cwd=ROOT, **kwargs)
        self.logs[proc.pid] = log_path
        return proc

    def run(self, algorithm: str, nbytes: int, seed: int, collective: str = "allreduce") -> tuple[float, list[dict]]:
        """One collective (bench.calls) on every host: seconds from the last host's start (all
        are in the call) to the last one's end, and the replies."""
        replies = self._ask(self.mpi if algorithm == "mpi" else self.procs,
                            {"algorithm": algorithm, "collective": collective, "bytes": nbytes,
                             "dtype": self.plan.dtype, "seed": seed})
        bad = [r["error"] for r in replies if not r["ok"]]
        if bad:
            raise BenchError(f"{algorithm} {collective} of {nbytes} B failed: {bad[0]}")
        return call_time(replies)[0], replies

    def probe(self, rank: int = 0) -> float:
        """One INC packet's round trip through the switch, seconds, as worker `rank` measures it
        (bench.worker's probe: a retransmission of a complete slot, answered to it alone)."""
        replies = self._ask(self.procs, {"algorithm": "probe", "rank": rank})
        bad = [r["error"] for r in replies if not r["ok"]]
        if bad:
            raise BenchError(f"the round-trip probe failed: {bad[0]}")
        return replies[rank]["rtt"]

    def _ask(self, procs: list[subprocess.Popen], trial: dict) -> list[dict]:
        """Write one trial to every process and read their answers."""
        line = json.dumps(trial) + "\n"
        for proc in procs:
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
            except BrokenPipeError:
                raise BenchError(f"a benchmark process has exited: {self._why(proc)}") from None
        return [self._reply(proc) for proc in procs]

    def close(self) -> None:
        """End of input: each worker acknowledges its last ring chunks and exits, and so does MPI."""
        for proc in self.procs + self.mpi:
            proc.stdin.close()
        for proc in self.procs + self.mpi:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log.warning("a benchmark process did not exit; the fabric will stop it")

    def _reply(self, proc: subprocess.Popen) -> dict:
        ready, _, _ = select.select([proc.stdout], [], [], self.plan.trial_timeout)
        text = proc.stdout.readline() if ready else ""
        if not text:
            raise BenchError(f"a benchmark process gave no answer within {self.plan.trial_timeout:g} s: "
                             f"{self._why(proc)}")
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise BenchError(f"a benchmark process wrote {text.strip()[:200]!r}, not a result") from None

    def _why(self, proc: subprocess.Popen) -> str:
        """Its exit code and the last line of its stderr log."""
        path = self.logs[proc.pid]
        lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
        return f"exit code {proc.poll()}, {path}: {lines[-1] if lines else '(empty)'}"


def summarise(times: list[float], skews: list[float], cpus: list[float | None]) -> dict:
    """Median, p99 and quartiles of one point's times, the times themselves, the median
    spread of the ranks' starts (not part of the times), and the host CPU per call: seconds
    of user + system time all workers' processes spent in it, summed over workers (each call's,
    and their median)."""
    out = {"times_s": times, "median_s": float(np.median(times)), "p99_s": float(np.percentile(times, 99)),
           "q25_s": float(np.percentile(times, 25)), "q75_s": float(np.percentile(times, 75)),
           "start_skew_median_s": float(np.median(skews))}
    if cpus and all(c is not None for c in cpus):
        out |= {"cpu_s": cpus, "cpu_per_call_s": float(np.median(cpus))}
    return out


def set_up(fabric: Fabric, plan: Plan, options: FabricOptions) -> Trials:
    program = compile_program(plan.target, DEFAULT_PROGRAM, options.build_dir, plan.elements_per_packet)
    setup_controller(options.topology_path, options.build_dir, program, plan.target)
    fabric.run_host_commands()              # a leaf-spine's hosts route through their leaf
    trials = Trials(fabric, plan)
    for algorithm in plan.algorithms:          # warm up sockets, ARP, connections and code paths
        trials.run(algorithm, plan.sizes[0], seed=0)
    return trials


def bench_workers(n: int, plan: Plan, options: FabricOptions, progress: tqdm) -> list[dict]:
    """All sizes and repetitions for one worker count, on a fresh star of n hosts (or leaf-spine)."""
    times: dict[tuple[str, int], list[float]] = {}
    skews: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[float | None]] = {}
    totals: dict[tuple[str, int], dict[str, float]] = {}
    k = len(plan.algorithms)
    with Fabric(plan.topology(n), options) as fabric:
        trials = set_up(fabric, plan, options)
        for size in plan.sizes:
            for rep in range(plan.reps_for(size)):
                # Rotate which algorithm goes first, so drift hits all alike.
                for algorithm in plan.algorithms[rep % k:] + plan.algorithms[:rep % k]:
                    progress.set_postfix_str(f"N={n} {algorithm} {size} B")
                    seconds, replies = trials.run(algorithm, size, seed=rep + 1)
                    times.setdefault((algorithm, size), []).append(seconds)
                    skews.setdefault((algorithm, size), []).append(call_time(replies)[1])
                    cpus.setdefault((algorithm, size), []).append(call_cpu(replies))
                    add_counts(totals.setdefault((algorithm, size), {}), replies)
                    progress.update()
        trials.close()
    return [{"algorithm": alg, "workers": n, "bytes": size, "elements_per_packet": trials.k, "leaves": plan.leaves,
             **summarise(ts, skews[(alg, size)], cpus[(alg, size)]), "agent_totals": totals[(alg, size)]}
            for (alg, size), ts in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][0]))]


def program_elements_per_packet(records: list[dict]) -> int:
    """The K every fabric of the run had (one program): from the records that carry it."""
    ks = {r["elements_per_packet"] for r in records}
    if len(ks) != 1:
        raise BenchError(f"the fabrics ran programs of different elements per packet: {sorted(ks)}")
    return ks.pop()


def add_counts(totals: dict[str, float], replies: list[dict]) -> None:
    """Sum the agents' per-call counts and times (packets, acks, retransmissions) over workers
    and repetitions, so a point shows e.g. whether the lossless ring ever retransmitted."""
    for reply in replies:
        for name, value in numeric_stats(reply).items():
            totals[name] = totals.get(name, 0) + value


def budget_workers(n: int, plan: Plan, options: FabricOptions, progress: tqdm) -> dict:
    """Where one INC call of the first size spends its time, per worker, over `reps` calls;
    then `reps` round trips of one INC packet through the same switch."""
    with Fabric(star(n, mtu=plan.mtu), options) as fabric:
        trials = set_up(fabric, plan, options)
        calls = []
        for rep in range(plan.reps):
            progress.set_postfix_str(f"N={n} budget {plan.sizes[0]} B")
            calls.append(trials.run("inc", plan.sizes[0], seed=rep + 1)[1])
            progress.update()
        probes = [trials.probe() for _ in range(plan.reps)]
        trials.close()
    return call_budget(n, plan.sizes[0], calls, probes) | {"elements_per_packet": trials.k}


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes are comma-separated byte counts, not {text!r}") from None
    if any(s < 4 for s in sizes):
        raise argparse.ArgumentTypeError("each size must be at least 4 bytes (one element)")
    return sizes


def add_trial_options(ap: argparse.ArgumentParser) -> None:
    """The options of how a trial runs, shared with bench.collectives."""
    ap.add_argument("--dtype", choices=("float32", "int32"), default="float32")
    ap.add_argument("--window", type=int, default=STAR_WINDOW,
                    help=f"slots (INC) / unacked chunks (ring) in flight (default {STAR_WINDOW}: at p4sim's "
                         f"K = {P4SIM_K}, {STAR_WINDOW * P4SIM_K * 4 >> 10} KiB)")
    ap.add_argument("--timeout", type=float, default=0.05, help="retransmission timeout, seconds")
    ap.add_argument("--trial-timeout", type=float, default=600.0,
                    help="give up on a trial after this many seconds")
    ap.add_argument("--target", choices=("p4sim", "bmv2"), default=os.environ.get("TARGET", "p4sim"))
    ap.add_argument("--engine", choices=ENGINES, default="c",
                    help="the INC and ring agents' engine: c, compiled (default), or python, the reference")
    ap.add_argument("--eager-rounds", action=argparse.BooleanOptionalAction, default=JobConfig.eager_rounds,
                    help="INC workers use eager Broadcast and AllGather rounds (docs/protocol.md; default "
                         f"{'on' if JobConfig.eager_rounds else 'off'}, as JobConfig.eager_rounds)")
    ap.add_argument("--spin", type=float, metavar="SECONDS",
                    help="seconds every call reads before it sleeps in the compiled engine (INC's and the ring's), "
                         "as Open MPI's ranks poll; 0: sleep at once (default hosts.engine.spin_for: a call of at "
                         f"most {POLL_CHUNKS} chunks {DEFAULT_SPIN} while the workers are at most twice the "
                         f"machine's cores, a larger one {DEFAULT_SPIN_LARGE} while they are at most its cores, "
                         "else 0: they need the cores to run)")
    ap.add_argument("--mtu", type=int, default=DEFAULT_MTU,
                    help=f"MTU of every link, for INC, the ring and MPI alike (default {DEFAULT_MTU}; 9000: jumbo)")
    ap.add_argument("--elements-per-packet", type=int, metavar="K",
                    help="build the switch program with K elements per packet (INC_K; default: the target's "
                         f"recommended K, {recommended_elements_per_packet()}); INC packets and ring chunks carry K")


def check_trial_options(ap: argparse.ArgumentParser, args: argparse.Namespace, workers: list[int]) -> None:
    """Worker counts, repetitions and add_trial_options' values, or argparse's one-line error."""
    if any(not 2 <= n <= 8 for n in workers) or args.reps < 1 or args.reps_large < 1:
        ap.error("--workers must be 2..8 and --reps and --reps-large at least 1")
    if not 1 <= args.window <= MAX_WINDOW or not 0 < args.timeout < math.inf or not 0 < args.trial_timeout < math.inf:
        ap.error(f"--window must be 1..{MAX_WINDOW} and --timeout and --trial-timeout positive")
    if args.spin is not None and not 0 <= args.spin < 1:
        ap.error("--spin must be 0 or more seconds, under one")
    settle_elements_per_packet(ap, args)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="Measure in-network AllReduce (the switch aggregates) against a host ring "
                    "AllReduce (the switch only forwards; same packets, windowed with cumulative "
                    "and selective acks) and against Open MPI's MPI_Allreduce (TCP), on the same "
                    "Mininet star. Needs root. Writes JSON with the machine, target, commit and "
                    "versions; `python -m analysis` fits the model and plots.")
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8], help="worker counts (2..8)")
    ap.add_argument("--sizes", type=_sizes,
                    help="comma-separated message sizes in bytes per worker (default 64 B to 4 MiB, x4; "
                         "256 with --budget)")
    ap.add_argument("--reps", type=int, default=20,
                    help=f"repetitions per algorithm and size up to {SMALL_BYTES // 1024} KiB (default 20)")
    ap.add_argument("--reps-large", type=int, default=15,
                    help=f"repetitions per algorithm and size above {SMALL_BYTES // 1024} KiB (default 15: MPI's "
                         "1 MiB calls at N=8 are bimodal, 30-41 or 54-71 ms in one run, and a median of 7 "
                         "flipped between runs)")
    ap.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS),
                    help="what to measure (default all: inc ring mpi)")
    ap.add_argument("--leaves", type=int, default=0,
                    help="measure on a leaf-spine of this many leaves under one spine, each worker count split "
                         "evenly over them (the job summed by the leaves and the spine), not on a star")
    add_trial_options(ap)
    ap.add_argument("--budget", action="store_true",
                    help="instead: time --reps INC calls of the first --sizes (default 256 B) per worker "
                         "count and print where each call's time goes (a Markdown table; JSON to -o)")
    ap.add_argument("-o", "--out", type=Path, default=None,
                    help="JSON output (default results/bench.json, or results/budget.json with --budget)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    check_trial_options(ap, args, args.workers)
    if args.leaves and (args.leaves < 2 or any(n % args.leaves for n in args.workers) or args.budget):
        ap.error(f"--leaves: at least 2, dividing every worker count ({' '.join(map(str, args.workers))}); "
                 f"not with --budget")
    if args.budget:
        args.algorithms = ["inc"]
    args.sizes = args.sizes or ([256] if args.budget else DEFAULT_SIZES)
    out = args.out or ROOT / "results" / ("budget.json" if args.budget else "bench.json")
    if (why := unwritable(out)) is not None:
        ap.error(why)
    if "mpi" in args.algorithms and (why := mpi_missing()) is not None:
        ap.error(f"cannot run the MPI baseline: {why}; or leave it out with --algorithms inc ring")
    if os.geteuid() != 0:
        ap.error("Mininet needs root: run as root (sudo make bench)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    environment = describe_environment(args.target)
    plan = Plan(args.workers, args.sizes, args.reps, args.reps_large, tuple(args.algorithms), args.dtype,
                args.window, args.timeout, args.trial_timeout, args.target, args.engine, args.mtu,
                args.elements_per_packet, args.eager_rounds, args.leaves, args.spin)
    options = FabricOptions(target=args.target, build_dir=ROOT / "build" / "bench")
    started = time.monotonic()
    total = (len(plan.workers) * plan.reps if args.budget
             else len(plan.workers) * len(plan.algorithms) * sum(plan.reps_for(s) for s in plan.sizes))
    try:
        with tqdm(total=total, unit="trial") as progress:
            results = [budget_workers(n, plan, options, progress) if args.budget
                       else bench_workers(n, plan, options, progress) for n in plan.workers]
    except (BenchError, FabricError, PieceError, TopologyError) as err:
        log.error("benchmark stopped: %s", err)
        return 1
    k = program_elements_per_packet(results if args.budget else [r for rs in results for r in rs])
    config = {"payload_bytes": 4 * k, "elements_per_packet": k, "mtu": plan.mtu, "dtype": plan.dtype,
              "window": plan.window, "timeout_s": plan.timeout, "reps": plan.reps, "reps_large": plan.reps_large,
              "engine": plan.engine, "spin_s": {n: plan.spin_for(n)._asdict() for n in plan.workers},
              "algorithms": list(plan.algorithms), "workers": plan.workers, "leaves": plan.leaves, "sizes": plan.sizes,
              "duration_s": time.monotonic() - started,
              "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])}
    if args.budget:
        document = {"environment": environment, "config": config, "budget": results}
    else:
        document = {"environment": environment, "config": config, "runs": [r for rs in results for r in rs]}
    try:
        out.write_text(json.dumps(document, indent=2))
    except OSError as err:
        log.error("cannot write %s: %s", out, err.strerror or err)
        return 1
    log.info("wrote %s", out)
    if args.budget:
        print(budget_table(results))
        return 0
    median = {(r["algorithm"], r["workers"], r["bytes"]): r["median_s"] for r in document["runs"]}
    for baseline in [a for a in plan.algorithms if a != "inc"] if "inc" in plan.algorithms else []:
        for n in plan.workers:
            log.info("N=%d INC speedup over %s: %s", n, baseline, ", ".join(
                f"{s} B x{median[(baseline, n, s)] / median[('inc', n, s)]:.2f}" for s in plan.sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
