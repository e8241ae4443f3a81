"""CLI for one worker inside a Mininet host: runs `allreduce` (in the switch, or the host
ring baseline) on a .npy tensor or on a generated one (which every worker can also compute
for the others, so --check verifies the sum against numpy), and prints a JSON line of timings
and, for inc, the transport's counts (packets, retransmissions, RTO, window: CallStats).
With --collective, inc runs one of the switch's other collectives instead (docs/protocol.md);
with --matrix, every collective x op x dtype once, each checked against numpy (hosts/matrix.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from hosts.agent import IncError, JobConfig, Worker
from hosts.args import address, non_negative_float, output_file, port
from hosts.engine import DEFAULT_SPIN, DEFAULT_SPIN_LARGE, ENGINES, POLL_CHUNKS
from hosts.inc import AGG_IP, INC_K, INC_PORT, MAX_ELEMENTS, RING_PORT
from hosts.matrix import COLLECTIVES, call_collective, run_matrix
from hosts.numerics import REDUCE_DTYPES, SUM_DTYPES, SumCheck, check_sum
from hosts.ring import RingConfig, RingWorker
from hosts.transport import UdpPeerTransport, UdpTransport

log = logging.getLogger(__name__)


def generated_tensor(seed: int, worker_id: int, size: int, dtype: str) -> np.ndarray:
    """Worker `worker_id`'s input for a --size run: small ints, or normal floats."""
    rng = np.random.default_rng([seed, worker_id])
    if dtype == "int32":
        return rng.integers(-1000, 1000, size=size, dtype=np.int32)
    return rng.standard_normal(size).astype(np.dtype(dtype))


def check_generated(result: np.ndarray, seed: int, num_workers: int, size: int, dtype: str,
                    summed_on_hosts: bool = False, op: str = "sum", k: int = INC_K) -> SumCheck:
    """`result` against the exact sum (min, max) of every worker's generated input (numerics.check_sum;
    `k` elements per packet share an exponent)."""
    inputs = [generated_tensor(seed, w, size, dtype) for w in range(num_workers)]
    return check_sum(result, inputs, summed_on_hosts, op, k)


def reduce(worker: Worker | RingWorker, tensor: np.ndarray, op: str) -> np.ndarray:
    """One AllReduce; the ring only sums (check_arguments refused anything else)."""
    return worker.allreduce(tensor) if op == "sum" else worker.allreduce(tensor, op)


def run_collective(worker: Worker | RingWorker, tensor: np.ndarray, args: argparse.Namespace) -> np.ndarray:
    """One call of --collective (all but allreduce are inc's: check_arguments); an empty array
    where it gives this worker nothing (reduce at a non-root, barrier)."""
    if args.collective == "allreduce":
        return reduce(worker, tensor, args.op)
    assert isinstance(worker, Worker)
    result = call_collective(worker, args.collective, tensor, args.op, args.root)
    return np.zeros(0, tensor.dtype) if result is None else result


def parse_peers(text: str) -> list[str]:
    peers = [p.strip() for p in text.split(",") if p.strip()]
    if not peers:
        raise argparse.ArgumentTypeError("--peers needs at least one IP")
    return peers


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hosts.worker",
        description="One worker of an in-network AllReduce job. Start one per host, with the same "
                    "--job-id, --workers, --size/--dtype (or same-shaped --input) and --seed; the "
                    "controller must have installed the job. Prints a JSON line of timings and, for inc, "
                    "the last call's transport stats (packets, retransmissions, final RTO and window).")
    p.add_argument("--job-id", type=int, required=True, help="job id the controller installed")
    p.add_argument("--worker-id", type=int, required=True, help="this worker's id, 0..workers-1")
    p.add_argument("--workers", type=int, required=True, help="number of workers in the job")
    p.add_argument("--algorithm", choices=("inc", "ring"), default="inc",
                   help="inc: aggregate in the switch (default); ring: the host ring baseline, "
                        "the switch only forwards")
    p.add_argument("--aggregator", type=address(INC_PORT), default=(AGG_IP, INC_PORT),
                   help=f"inc: the switch's aggregator address IP[:PORT] (default {AGG_IP}:{INC_PORT})")
    p.add_argument("--peers", type=parse_peers,
                   help="ring: every worker's IP in worker-id order, comma separated, e.g. "
                        "10.0.0.1,10.0.0.2 (all on --port)")
    p.add_argument("--port", type=port,
                   help="local UDP port: inc results arrive on it, as in the controller's worker entry "
                        f"(default {INC_PORT}); ring peers listen on it (default {RING_PORT})")
    p.add_argument("--bind", default="0.0.0.0",
                   help="inc: local IP to bind (default any); ring binds to its own --peers entry")
    p.add_argument("--interface", help="bind to this interface (e.g. h1-eth0; needs root)")
    data = p.add_mutually_exclusive_group(required=True)
    data.add_argument("--input", type=Path, help="a .npy file with an int32, float32 or float16 array (bfloat16: --size --dtype bfloat16; .npy stores it as raw bytes)")
    data.add_argument("--size", type=int, help="generate a tensor of this many elements")
    p.add_argument("--dtype", choices=[str(d) for d in SUM_DTYPES], default="float32",
                   help="dtype of the generated tensor (default float32)")
    p.add_argument("--op", choices=list(REDUCE_DTYPES), default="sum",
                   help="inc: sum (every dtype), min or max (int32, float32) of the workers' tensors (default sum)")
    p.add_argument("--collective", choices=COLLECTIVES, default="allreduce",
                   help="inc: which collective the switch runs (default allreduce); reduce-scatter needs a "
                        "length divisible by --workers; broadcast and all-gather take any dtype, bit for bit")
    p.add_argument("--root", type=int, default=0,
                   help="reduce: the worker that gets the result; broadcast: the one whose tensor everyone "
                        "gets (default 0)")
    p.add_argument("--matrix", action="store_true",
                   help="inc: run every collective x op x dtype once (sum for every dtype, min and max for "
                        "int32 and float32 where the collective reduces; roots vary), each on --size elements "
                        "generated from --seed, and check each result against numpy within docs/protocol.md's "
                        "bound; the report lists every combination; --output writes an .npz of the results")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated tensors (default 0)")
    p.add_argument("--check", action="store_true",
                   help="with --size: compare the result against numpy's float64 sum of all workers' "
                        "tensors, within docs/protocol.md's error bound (exact for int32)")
    p.add_argument("--output", type=output_file,
                   help="write the result of the last iteration to this .npy file (its folder is created; "
                        "checked writable before anything runs)")
    p.add_argument("--iterations", type=int, default=1, help="AllReduce calls to time (default 1)")
    p.add_argument("--warmup", type=int, default=0,
                   help="untimed AllReduce calls first, e.g. to let every worker start and the timers learn "
                        "the round trip; not in the times or counts (default 0; same on every worker)")
    p.add_argument("--window", type=int, default=16, help="slots in flight, at most the job's slots (default 16)")
    p.add_argument("--timeout", type=float,
                   help="milliseconds before a chunk is sent again: inc, the first timeout until round trips "
                        "are measured (default 1000; then it adapts); ring, fixed (default 20)")
    p.add_argument("--max-rto", type=float, default=JobConfig.max_rto * 1000, metavar="MS",
                   help="inc: milliseconds the adaptive retransmission timeout may grow to (default "
                        f"{JobConfig.max_rto * 1000:g}); under heavy loss the workers wait for each other's "
                        "retransmissions, their round trips grow, and the timeout sits at this ceiling")
    p.add_argument("--give-up-after", type=float, default=JobConfig.give_up_after, metavar="SECONDS",
                   help="inc: seconds a chunk may wait for its result before the worker fails "
                        f"(default {JobConfig.give_up_after:g})")
    p.add_argument("--max-retries", type=int, default=200,
                   help="ring: retransmissions before giving up (default 200)")
    p.add_argument("--engine", choices=ENGINES, default="c",
                   help="c: the compiled engine (default; where it cannot be built, python, and a log line "
                        "says why); python: the reference path. Both send the same packets")
    p.add_argument("--spin", type=non_negative_float, default=DEFAULT_SPIN, metavar="SECONDS",
                   help=f"seconds a call of at most {POLL_CHUNKS} chunks reads before it sleeps in the compiled engine "
                        f"(default {DEFAULT_SPIN:g}); give 0 where this machine's workers are more than twice its "
                        "cores: they need the cores to run")
    p.add_argument("--spin-large", type=non_negative_float, default=DEFAULT_SPIN_LARGE, metavar="SECONDS",
                   help=f"the same for a larger call (default {DEFAULT_SPIN_LARGE:g}); give 0 where this machine's "
                        "workers outnumber its cores")
    p.add_argument("--elements-per-packet", type=int, default=INC_K, metavar="K",
                   help="the job's elements per packet, as the controller recorded it from the switch program "
                        f"(default {INC_K}); every worker of the job must use the same")
    p.add_argument("--eager-rounds", action=argparse.BooleanOptionalAction, default=JobConfig.eager_rounds,
                   help="inc: Broadcast and AllGather chunks completed by their root's packet alone, once the "
                        "switch says it runs them (docs/protocol.md, \"Eager rounds\"); every worker of the job "
                        f"must use the same (default {'on' if JobConfig.eager_rounds else 'off'})")
    p.add_argument("--window-acks", action=argparse.BooleanOptionalAction, default=JobConfig.window_acks,
                   help="inc: Reduce and ReduceScatter chunks acknowledged to the others by their root, a quarter "
                        "window at a time, once the switch says it takes window ACKs (docs/protocol.md, \"Window "
                        "ACKs\"); every worker of the job must use the same "
                        f"(default {'on' if JobConfig.window_acks else 'off'})")
    p.add_argument("-v", "--verbose", action="store_true", help="log every retransmission")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    check_arguments(parser, args)
    if args.matrix:
        return main_matrix(args)
    try:
        if args.input is not None:
            tensor = np.load(args.input, allow_pickle=False)
        else:
            tensor = generated_tensor(args.seed, args.worker_id, args.size, args.dtype)
        worker = make_worker(args)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    times, started, stats = [], [], []
    try:
        for _ in range(args.warmup):
            run_collective(worker, tensor, args)
        for _ in range(args.iterations):
            started.append(time.time())
            start = time.perf_counter()
            result = run_collective(worker, tensor, args)
            times.append(time.perf_counter() - start)
            if isinstance(worker, Worker):
                stats.append(worker.last_stats)
    except (IncError, TypeError, ValueError) as e:
        print(f"error: worker {args.worker_id}: {e}", file=sys.stderr)
        return 1
    finally:
        worker.close()
    report = {"job_id": args.job_id, "worker_id": args.worker_id, "workers": args.workers,
              "elements": int(tensor.size), "dtype": str(tensor.dtype), "seconds": times,
              # Wall clock (the hosts of one machine share it): when each call began, so a caller
              # can time a collective from its last worker's start, not from the earliest one's.
              "started_at": started}
    if stats:
        report["packets_sent"] = sum(s.packets_sent for s in stats)
        report["retransmits"] = sum(s.retransmits for s in stats)
        report["last_stats"] = stats[-1].to_dict()
    if args.check:
        checked = check_generated(result, args.seed, args.workers, args.size, args.dtype, args.algorithm == "ring",
                                  args.op, args.elements_per_packet)
        report["max_abs_error"] = checked.max_abs_error
        report["correct"] = checked.correct
    if args.output is not None:
        np.save(args.output, result)
    print(json.dumps(report))
    return 0 if report.get("correct", True) else 1


def main_matrix(args: argparse.Namespace) -> int:
    """--matrix: every combination once; the JSON report lists each one's outcome (exit 1 if any failed)."""
    try:
        worker = make_worker(args)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        outcomes = run_matrix(worker, args.size, args.seed)
    except OSError as e:         # the socket itself failed; IncErrors are in the outcomes
        print(f"error: worker {args.worker_id}: {e}", file=sys.stderr)
        return 1
    finally:
        worker.close()
    failed = [o.combination.name for o in outcomes if not o.passed]
    report = {"job_id": args.job_id, "worker_id": args.worker_id, "workers": args.workers, "elements": args.size,
              "seed": args.seed, "seconds": time.perf_counter() - start,
              "packets_sent": sum(o.packets_sent for o in outcomes),
              "retransmits": sum(o.retransmits for o in outcomes),
              "matrix": [o.to_dict() for o in outcomes], "failed": failed}
    if args.output is not None:
        np.savez(args.output, **{o.combination.name: o.result for o in outcomes if o.result is not None})
    print(json.dumps(report))
    return 1 if failed else 0


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations argparse cannot check alone: a usage error (exit 2), never a traceback."""
    if args.matrix and (args.size is None or args.check or args.algorithm == "ring" or args.collective != "allreduce"
                        or args.op != "sum" or args.iterations != 1 or args.warmup):
        parser.error("--matrix needs --size and runs every collective, op and dtype once on inc: without "
                     "--check, --algorithm ring, --collective, --op, --iterations and --warmup")
    if args.matrix and args.size < 1:
        parser.error(f"--matrix needs --size of at least 1, not {args.size}")
    if args.check and args.size is None:
        parser.error("--check needs --size (generated tensors)")
    if args.iterations < 0 or args.warmup < 0:
        parser.error(f"--iterations and --warmup must not be negative, not {args.iterations} and {args.warmup}")
    if args.iterations == 0 and (args.check or args.output is not None):
        parser.error("--check and --output need a result: --iterations must be at least 1")
    if args.size is not None and args.dtype not in map(str, REDUCE_DTYPES[args.op]):
        parser.error(f"--op {args.op} takes {', '.join(map(str, REDUCE_DTYPES[args.op]))}, not --dtype {args.dtype}")
    if args.algorithm == "ring" and args.op != "sum":
        parser.error(f"--algorithm ring only sums; --op {args.op} needs inc")
    if args.collective != "allreduce" and (args.algorithm == "ring" or args.check):
        parser.error(f"--collective {args.collective} runs on inc only, without --check")
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, not {args.workers}")
    if args.size is not None and args.size < 0:
        parser.error(f"--size must not be negative, not {args.size}")
    if not 0 <= args.root < args.workers:
        parser.error(f"--root must be a worker 0..{args.workers - 1}, not {args.root}")
    if args.algorithm == "ring":
        if args.peers is None or len(args.peers) != args.workers:
            parser.error("--algorithm ring needs --peers with one IP per worker")
        if not 0 <= args.worker_id < len(args.peers):
            parser.error(f"--worker-id must be 0..{len(args.peers) - 1} (one per --peers entry), not {args.worker_id}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be positive milliseconds, not {args.timeout:g}")
    if args.max_rto < JobConfig.min_rto * 1000:
        parser.error(f"--max-rto must be at least {JobConfig.min_rto * 1000:g} ms (the RTO's floor), not {args.max_rto:g}")
    if args.give_up_after <= 0:
        parser.error(f"--give-up-after must be positive seconds, not {args.give_up_after:g}")
    if not 1 <= args.elements_per_packet <= MAX_ELEMENTS:
        parser.error(f"--elements-per-packet must be 1..{MAX_ELEMENTS}, not {args.elements_per_packet}")


def make_worker(args: argparse.Namespace) -> Worker | RingWorker:
    """The agent for --algorithm, on a UDP socket bound to --port (and --interface)."""
    if args.algorithm == "ring":
        timeout = 0.02 if args.timeout is None else args.timeout / 1000
        port = RING_PORT if args.port is None else args.port
        transport = UdpPeerTransport([(ip, port) for ip in args.peers], (args.peers[args.worker_id], port),
                                     args.interface)
        try:
            config = RingConfig(args.job_id, args.worker_id, args.workers, window=args.window,
                                timeout=timeout, max_retries=args.max_retries,
                                elements_per_packet=args.elements_per_packet, engine=args.engine, spin=args.spin,
                                spin_large=args.spin_large)
        except ValueError:
            transport.close()
            raise
        return RingWorker(config, transport)
    config = JobConfig(args.job_id, args.worker_id, args.workers, window=args.window,
                       timeout=JobConfig.timeout if args.timeout is None else args.timeout / 1000,
                       max_rto=args.max_rto / 1000, give_up_after=args.give_up_after,
                       elements_per_packet=args.elements_per_packet, engine=args.engine,
                       eager_rounds=args.eager_rounds, window_acks=args.window_acks, spin=args.spin,
                       spin_large=args.spin_large)
    port = INC_PORT if args.port is None else args.port
    return Worker(config, UdpTransport(args.aggregator, (args.bind, port), args.interface))


if __name__ == "__main__":
    sys.exit(main())
