"""`make demo-tp`: the tensor-parallel decoder on N Mininet hosts, once with the switch summing
(INC), once with the host ring and once with Open MPI's MPI_Allreduce (TCP through the same
switch), each checked against the single-process reference (with --impl torch: the PyTorch
decoder on torch.distributed's "p4inc" backend and on gloo); prints per-token latency (median,
p99), tokens/s, the share of time in collectives and INC's tokens/s over each baseline's, and
writes JSON and a PNG. A last row runs the same ranks with no collectives at all (each computes
its shard alone, unchecked): the floor that free collectives would reach on these cores, which
says how much of each backend's time its collectives cost. Every worker is `python -m workloads.tp_worker`, started with
torchrun-style environment variables as a launcher would start it (INC, ring, gloo), or by
mpirun (MPI).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import os
import select
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.environment import describe_environment
from bench.mpi import ROOT_ENV, mpi_missing, mpirun_command, write_launcher
from hosts.args import settle_elements_per_packet, unwritable
from hosts.engine import spin_for
from hosts.inc import STAR_WINDOW
from protocol import recommended_elements_per_packet
from topologies.fabric import Fabric, FabricError, FabricOptions
from topologies.pieces import (DEFAULT_PROGRAM, PieceError, clear_job_slots, compile_program, job_elements_per_packet,
                               setup_controller)
from topologies.procs import end_child
from topologies.spec import DEFAULT_MTU, TopologyError, star
from topologies.switches import REPO_ROOT
from workloads.decoder import Comparison, compare, prompt_tokens, reference_generate
from workloads.tp_worker import add_model_arguments, model_config

log = logging.getLogger("workloads.demo")
# What INC is measured against, per decoder: hosts.dist's ring and Open MPI, or torch's gloo,
# all through the same switch.
BASELINES = {"numpy": ("ring", "mpi"), "torch": ("gloo",)}
FLOORS = {"numpy": ("none",), "torch": ()}      # tp_worker --backend none: the numpy decoder only
BACKENDS = ("inc", "ring", "mpi", "gloo", "none")
LABELS = {"inc": "INC", "ring": "host ring", "mpi": "MPI_Allreduce", "gloo": "gloo", "none": "no collectives (floor)"}
SHORT = {"ring": "ring", "mpi": "MPI", "gloo": "gloo"}      # the table's INC/... columns
MASTER_PORT = 29500
# One BLAS thread per rank, as torchrun sets OMP_NUM_THREADS=1: N ranks share the cores,
# and OpenBLAS's spinning helper threads would slow every rank several-fold.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class DemoError(RuntimeError):
    """A run that failed or did not finish; the message carries the workers' stderr."""


@dataclass(frozen=True)
class Run:
    """One generation on every host: rank 0's per-token step and collective seconds, and the
    check; for backend "none" the slowest rank's times and no check (the ranks never combine
    their shards)."""
    backend: str
    workers: int
    step_s: list[float]
    comm_s: list[float]
    comparison: Comparison | None


@dataclass(frozen=True)
class Summary:
    backend: str
    workers: int
    tokens: int
    median_ms: float
    p99_ms: float
    tokens_per_s: float
    comm_share: float
    correct: bool | None            # None: not checked (backend "none")
    max_logit_error: float | None
    tolerance: float | None

    @classmethod
    def of(cls, runs: list[Run]) -> Summary:
        steps = np.concatenate([r.step_s for r in runs])
        comm = np.concatenate([r.comm_s for r in runs])
        checks = [r.comparison for r in runs if r.comparison is not None]
        return cls(runs[0].backend, runs[0].workers, len(steps), 1e3 * float(np.median(steps)),
                   1e3 * float(np.percentile(steps, 99)), len(steps) / float(steps.sum()),
                   float(comm.sum() / steps.sum()), all(c.ok for c in checks) if checks else None,
                   max(c.max_error for c in checks) if checks else None, checks[0].tolerance if checks else None)


def rank_envs(fabric: Fabric) -> list[dict[str, str]]:
    """The launcher's variables (torchrun's, and hosts.dist's P4INC_*) of each rank of the job,
    one rank per Mininet host; every host shares this machine's cores, which sets the spin."""
    job = fabric.topo.jobs[0]
    hosts = [fabric.topo.hosts[h] for h in job.workers]
    k = job_elements_per_packet(fabric.options.topology_path, job.job_id)
    spin = spin_for(len(hosts))
    return [{**ONE_THREAD, "RANK": str(rank), "WORLD_SIZE": str(len(hosts)), "LOCAL_RANK": "0",
             "MASTER_ADDR": hosts[0].address, "MASTER_PORT": str(MASTER_PORT), "GLOO_SOCKET_IFNAME": host.intf,
             "P4INC_INTERFACE": host.intf, "P4INC_JOB_ID": str(job.job_id), "P4INC_ELEMENTS_PER_PACKET": str(k),
             "P4INC_WINDOW": str(STAR_WINDOW), "P4INC_SPIN_US": f"{1e6 * spin.small:g}",
             "P4INC_SPIN_LARGE_US": f"{1e6 * spin.large:g}"}
            for rank, host in enumerate(hosts)]


def run_decoder(fabric: Fabric, backend: str, worker_args: list[str], work_dir: Path,
                progress: tqdm | None, reference, timeout_s: float, retransmit_ms: float = 50.0) -> Run:
    """Start the tp_workers (one per host, with launcher variables; for MPI, mpirun starts them),
    follow rank 0's progress (on the bar, if given), check."""
    job = fabric.topo.jobs[0]
    hosts = [fabric.topo.hosts[h] for h in job.workers]
    out_dir = work_dir / f"{backend}-n{len(hosts)}"
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("rank*.npz"):
        old.unlink()
    clear_job_slots(fabric.options.topology_path, job.job_id, fabric.options.target)
    worker = ["-m", "workloads.tp_worker", "--backend", backend, "-o", str(out_dir), *worker_args]
    started: list[tuple[str, subprocess.Popen, Path]] = []     # (what, process, its stderr)

    def start(what: str, host: str, args: list[str], env: dict[str, str], progress_out: bool) -> None:
        err = out_dir / f"{what.replace(' ', '')}.err"
        with err.open("w") as stderr:
            started.append((what, fabric.popen(host, args, cwd=REPO_ROOT, env={**os.environ, **env}, text=True,
                                               stderr=stderr,
                                               stdout=subprocess.PIPE if progress_out else subprocess.DEVNULL), err))
    try:
        if backend == "mpi":
            launcher = write_launcher(fabric, list(job.workers), fabric.options.run_dir / "tp-mpi-launcher.sh")
            start("mpirun", hosts[0].name, mpirun_command(fabric, list(job.workers), launcher, REPO_ROOT,
                                                          tuple(worker), ONE_THREAD), ROOT_ENV, True)
        else:
            for rank, (host, env) in enumerate(zip(hosts, rank_envs(fabric))):
                start(f"rank {rank}", host.name, [sys.executable, *worker],
                      {**env, "P4INC_TIMEOUT_MS": str(retransmit_ms)}, rank == 0)
        _follow(started[0][1], progress, f"N={len(hosts)} {backend}", timeout_s)
        deadline = time.monotonic() + 30
        for _, proc, _ in started:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        failed = [f"{what} (exit {proc.returncode}): {err.read_text().strip()[-400:]}"
                  for what, proc, err in started if proc.returncode != 0]
        if failed:
            raise DemoError(f"N={len(hosts)} {backend}: " + "; ".join(failed))
    finally:
        for _, proc, _ in started:
            end_child(proc)
    shards = [np.load(out_dir / f"rank{r}.npz") for r in range(len(hosts))]
    if backend == "none":   # no check (each rank chose from its own slice); the slowest rank's times
        slowest = max(shards, key=lambda s: float(s["step_s"].sum()))
        return Run(backend, len(hosts), slowest["step_s"].tolist(), slowest["comm_s"].tolist(), None)
    tokens = shards[0]["tokens"].tolist()
    if any(s["tokens"].tolist() != tokens for s in shards):
        raise DemoError(f"N={len(hosts)} {backend}: the ranks generated different tokens")
    logits = np.concatenate([s["logits"] for s in shards], axis=1)
    return Run(backend, len(hosts), shards[0]["step_s"].tolist(), shards[0]["comm_s"].tolist(),
               compare(tokens, logits, reference))


def _follow(proc: subprocess.Popen, progress: tqdm | None, label: str, timeout_s: float) -> None:
    """Advance the progress bar on each token rank 0 reports, until it is done or stalls."""
    if progress is not None:
        progress.set_postfix_str(label)
    deadline = time.monotonic() + timeout_s
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stdout.readline() if ready else ""
        if not line:
            if not ready:
                raise DemoError(f"{label}: rank 0 reported nothing for {timeout_s:.0f} s")
            return                                # rank 0 ended; its exit code says how
        message = json.loads(line)
        if message.get("done"):
            return
        if progress is not None:
            progress.update()


def inc_ratios(summaries: list[Summary]) -> dict[int, dict[str, float]]:
    """Per N, INC's tokens/s over each baseline's that ran at that N."""
    by = {(s.workers, s.backend): s for s in summaries}
    return {n: {base: inc.tokens_per_s / by[(n, base)].tokens_per_s for base in BACKENDS[1:] if (n, base) in by}
            for (n, backend), inc in by.items() if backend == "inc"}


def print_table(summaries: list[Summary], baselines: tuple[str, ...] = ("ring", "mpi")) -> None:
    ratios = inc_ratios(summaries)
    heads = " ".join(f"{'INC/' + SHORT[b]:>8}" for b in baselines)
    print(f"{'N':>2} {'backend':7} {'median ms':>10} {'p99 ms':>8} {'tokens/s':>9} {'in collectives':>15} "
          f"{heads}  check")
    for s in summaries:
        mine = ratios.get(s.workers, {}) if s.backend == "inc" else {}
        cells = [f"{mine[base]:.2f}x" if base in mine else "" for base in baselines]
        check = ("not checked: each rank computed its shard alone" if s.correct is None else
                 f"{'OK' if s.correct else 'WRONG'} (max logit error {s.max_logit_error:.2g}, "
                 f"tolerance {s.tolerance:.2g})")
        print(f"{s.workers:>2} {s.backend:7} {s.median_ms:>10.1f} {s.p99_ms:>8.1f} {s.tokens_per_s:>9.2f} "
              f"{100 * s.comm_share:>14.0f}% {' '.join(f'{c:>8}' for c in cells)}  {check}")
    by = {(s.workers, s.backend): s for s in summaries}
    for n in sorted({s.workers for s in summaries}):
        if (floor := by.get((n, "none"))) is not None:
            shares = ", ".join(f"{LABELS[b]} {100 * by[(n, b)].tokens_per_s / floor.tokens_per_s:.0f}%"
                               for b in BACKENDS if b != "none" and (n, b) in by)
            print(f"N={n}: with no collectives the ranks make {floor.tokens_per_s:.1f} tokens/s on these cores; "
                  f"of that, {shares}")


def plot(summaries: list[Summary], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted({s.workers for s in summaries})
    by = {(s.workers, s.backend): s for s in summaries}
    backends = [b for b in BACKENDS if any(s.backend == b for s in summaries)]
    fig, (rate, latency) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / len(backends)
    for i, backend in enumerate(backends):
        xs = [j + (i - (len(backends) - 1) / 2) * width for j in range(len(ns))]
        got = [by.get((n, backend)) for n in ns]
        rate.bar(xs, [s.tokens_per_s if s else 0 for s in got], width, label=LABELS[backend])
        med = [s.median_ms if s else 0 for s in got]
        p99 = [s.p99_ms - s.median_ms if s else 0 for s in got]
        latency.bar(xs, med, width, yerr=[np.zeros(len(ns)), p99], capsize=3,
                    label=LABELS[backend] + " (bar median, whisker p99)")
    for ax, ylabel in ((rate, "tokens/s"), (latency, "per-token latency, ms")):
        ax.set_xticks(range(len(ns)), [f"N={n}" for n in ns])
        ax.set_ylabel(ylabel)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m workloads.demo",
        description="Tensor-parallel decoding on a Mininet star: INC AllReduce against the host ring and "
                    "Open MPI's MPI_Allreduce through the same switch, all checked against the single-process "
                    "reference. Needs root. Prints a table; writes JSON and a PNG.",
        epilog="example (the numbers in docs/results):\n"
               "  python -m workloads.demo --workers 2 4 8 --tokens 64 --reps 3 -o docs/results/tp.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8], help="world sizes, each dividing 8 "
                   "(default 2 4 8)")
    p.add_argument("--impl", choices=tuple(BASELINES), default="numpy",
                   help="numpy: the numpy decoder on hosts.dist, INC against the host ring; torch: the PyTorch "
                        "decoder on torch.distributed, p4inc against gloo (needs make setup TORCH=1) (default numpy)")
    add_model_arguments(p)
    p.add_argument("--reps", type=int, default=1, help="generations per backend and N, alternating which "
                   "backend goes first (default 1)")
    p.add_argument("--backends", nargs="+", choices=BACKENDS,
                   help="what the decoder's collectives run on (default all that --impl runs: numpy, inc ring mpi "
                        "none; torch, inc gloo); none: no collectives, the floor")
    p.add_argument("--target", choices=("p4sim", "bmv2"), default=os.environ.get("TARGET", "p4sim"))
    p.add_argument("--mtu", type=int, default=DEFAULT_MTU,
                   help=f"MTU of every link, for all backends (default {DEFAULT_MTU}; 9000: jumbo frames)")
    p.add_argument("--elements-per-packet", type=int, metavar="K",
                   help="build the switch program with K elements per packet (default: the target's recommended "
                        f"K, {recommended_elements_per_packet()})")
    p.add_argument("--retransmit-ms", type=float, default=50.0,
                   help="the ring: milliseconds before a packet is sent again (default 50, as make bench; INC adapts its own)")
    p.add_argument("--run-timeout", type=float, default=300.0, help="give up on a run that reports no token "
                   "for this many seconds (default 300)")
    p.add_argument("-o", "--out", type=Path, default=REPO_ROOT / "results" / "tp.json",
                   help="JSON results; the plot goes next to it as .png (default results/tp.json; its folder is "
                        "created, both checked writable before anything runs)")
    args = p.parse_args(argv)
    try:
        config = model_config(args)
        for n in args.workers:
            config.check_world(n)
    except ValueError as e:
        p.error(str(e))
    if args.reps < 1 or args.tokens < 1 or args.prompt_length < 1:
        p.error("--reps, --tokens and --prompt-length must be at least 1")
    if not 0 < args.retransmit_ms < math.inf or not 0 < args.run_timeout < math.inf:
        p.error("--retransmit-ms and --run-timeout must be positive")
    for path in (args.out, args.out.with_suffix(".png")):
        if (why := unwritable(path)) is not None:
            p.error(why)
    settle_elements_per_packet(p, args)
    runnable = ("inc", *BASELINES[args.impl], *FLOORS[args.impl])
    backends = tuple(b for b in runnable if b in (args.backends or BACKENDS))
    if (wrong := sorted(set(args.backends or ()) - set(backends))):
        p.error(f"--impl {args.impl} runs {', '.join(runnable)}, not {', '.join(wrong)}")
    if "mpi" in backends and (why := mpi_missing()) is not None:
        p.error(f"cannot run the MPI row: {why}; or leave it out with --backends inc ring")
    if os.geteuid() != 0:
        p.error("Mininet needs root: run as root (sudo make demo-tp)")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.impl == "torch" and importlib.util.find_spec("torch") is None:
        p.error("--impl torch needs PyTorch: make setup TORCH=1")
    worker_args = [*_model_flags(args), "--impl", args.impl]
    print(f"reference: {config.layers} layers, hidden {config.hidden}, {config.heads} heads, ffn {config.ffn}, "
          f"vocab {config.vocab}, float32; {args.tokens} tokens after a {args.prompt_length}-token prompt ...")
    build = REPO_ROOT / "build" / "tp"
    options = FabricOptions(target=args.target, build_dir=build)
    runs: list[Run] = []
    started = time.monotonic()
    try:
        program = compile_program(args.target, DEFAULT_PROGRAM, build, args.elements_per_packet)
        reference = reference_generate(config, prompt_tokens(config, args.prompt_length), args.tokens)
        print(f"reference tokens: {reference.tokens}")
        with tqdm(total=len(args.workers) * len(backends) * args.reps * args.tokens, unit="token") as progress:
            for n in args.workers:
                progress.write(f"N={n}: starting a star of {n} hosts on {args.target} ...")
                with Fabric(star(n, mtu=args.mtu), options) as fabric:
                    setup_controller(options.topology_path, build, program, args.target)
                    k = job_elements_per_packet(options.topology_path, fabric.topo.jobs[0].job_id)
                    for rep in range(args.reps):
                        # Rotate which backend goes first, so drift hits all alike.
                        for backend in backends[rep % len(backends):] + backends[:rep % len(backends)]:
                            runs.append(run_decoder(fabric, backend, worker_args, build / "runs", progress,
                                                    reference, args.run_timeout, args.retransmit_ms))
    except (DemoError, FabricError, PieceError, TopologyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: fabric stopped", file=sys.stderr)
        return 130
    summaries = [Summary.of([r for r in runs if (r.workers, r.backend) == key])
                 for key in sorted({(r.workers, r.backend) for r in runs}, key=lambda k: (k[0], BACKENDS.index(k[1])))]
    print_table(summaries, BASELINES[args.impl])
    checked = [r.comparison for r in runs if r.comparison is not None]
    if checked:
        margin = min(c.min_margin for c in checked)
        tolerance = max(c.tolerance for c in checked)
        print(f"logits within {tolerance:.2g} of the reference pass (LOGIT_RTOL x max |logit|); the reference's "
              f"smallest top-1 minus top-2 logit is {margin:.3g}, so {'no' if margin > tolerance else 'a'} greedy "
              f"choice is a near-tie that rounding could flip")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "environment": describe_environment(args.target),
        "config": {**asdict(config), "impl": args.impl, "prompt_length": args.prompt_length, "tokens": args.tokens,
                   "reps": args.reps, "mtu": args.mtu, "elements_per_packet": k,
                   "duration_s": time.monotonic() - started},
        "reference_tokens": reference.tokens,
        "summaries": [asdict(s) for s in summaries],
        "inc_tokens_per_s_over": {str(n): r for n, r in inc_ratios(summaries).items()},
        "runs": [{**asdict(r), "comparison": r.comparison and {**asdict(r.comparison), "ok": r.comparison.ok}}
                 for r in runs]},
        indent=2))
    png = args.out.with_suffix(".png")
    plot(summaries, png, f"{config.layers}-layer {args.impl} decoder, hidden {config.hidden}, float32, {args.target}")
    print(f"wrote {args.out} and {png}")
    return 0 if all(s.correct is not False for s in summaries) else 1


def _model_flags(args: argparse.Namespace) -> list[str]:
    return ["--layers", str(args.layers), "--hidden", str(args.hidden), "--heads", str(args.heads),
            "--ffn", str(args.ffn), "--vocab", str(args.vocab), "--seed", str(args.seed),
            "--prompt-length", str(args.prompt_length), "--tokens", str(args.tokens)]


if __name__ == "__main__":
    sys.exit(main())
