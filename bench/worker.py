"""One host's side of the AllReduce and collectives benchmarks: runs in a Mininet host, keeps
an INC worker and a ring worker open, and runs the trials the coordinator writes on stdin
(JSON lines), answering each with its start and end times and whether the result was right,
or (a "probe") timing one INC packet's round trip through the switch.

Times are CLOCK_MONOTONIC, which every network namespace of the machine shares, so the
coordinator can compare starts and ends across hosts.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time

import numpy as np

from hosts.agent import IncError, JobConfig, Worker
from hosts.engine import DEFAULT_SPIN, DEFAULT_SPIN_LARGE, ENGINES, POLL_CHUNKS
from hosts.inc import INC_K, OP_CONTRIB, OP_RESULT, RING_PORT, IncFormatError, IncHeader, pack, unpack_header
from hosts.ring import RingConfig, RingWorker
from hosts.transport import UdpPeerTransport, UdpTransport
from hosts.worker import check_generated

from bench import calls

log = logging.getLogger("bench.worker")
PROBE_TIMEOUT_S = 1.0        # a probe's answer comes in well under a millisecond; no answer is an error
# After its timed call a worker (an MPI rank too) sleeps this long before the closing barrier.
# The cores are shared: an early finisher's barrier (a send, the switch woken, a wait) would
# otherwise take a core from the workers still waiting for their result, a cost that no host
# with a core per rank pays. Longer than the spread of the ends of a small call at N = 8.
SETTLE_S = 0.002


def run_trial(trial: dict, rank: int, workers: int, inc: Worker, ring: RingWorker) -> dict:
    """Barrier, then one timed call of the trial's collective (default AllReduce, bench.calls);
    the check against numpy is outside the timing. A "probe" trial times one INC packet's
    round trip through the switch instead."""
    if trial["algorithm"] == "probe":
        return probe_round_trip(inc, rank == trial["rank"])
    trial = {"collective": "allreduce", **trial}
    tensor = calls.tensor(trial, rank, workers)
    agent = inc if trial["algorithm"] == "inc" else ring
    try:
        # A one-element INC AllReduce releases all hosts within one multicast of each other.
        inc.allreduce(np.zeros(1, np.int32))
        cpu = time.process_time()        # user + system of every thread (the ring's service thread too)
        start = time.perf_counter()
        result = calls.call(trial["collective"], agent, tensor)
        end = time.perf_counter()
        cpu = time.process_time() - cpu
        # Early finishers wait for the last one here: their check, their reply, even reading
        # their stats (the compiled engine's are built when first read) must not take a core
        # from workers still in the call.
        time.sleep(SETTLE_S)
        stats = getattr(agent, "last_stats", None)       # the timed call's, before the closing barrier's
        inc.allreduce(np.zeros(1, np.int32))
    except IncError as err:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    ok = calls.is_right(result, trial, rank, workers, inc.config.elements_per_packet)
    return {"ok": ok, "start": start, "end": end, "cpu_s": cpu, "error": None if ok else "result differs from numpy",
            "stats": as_dict(stats)}


def probe_round_trip(inc: Worker, probing: bool, timeout: float = PROBE_TIMEOUT_S) -> dict:
    """After a barrier, the prober sends its barrier contribution again: the slot is complete,
    so the switch answers that copy alone with the stored result (a retransmission's path:
    parser, checks, job tables, the slot's registers, egress). Its round trip, user space to
    user space, is one INC packet's round trip through the switch; the others only wait."""
    try:
        inc.allreduce(np.zeros(1, np.int32))
    except IncError as err:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    if not probing:
        return {"ok": True, "rtt": None}
    cfg = inc.config
    seq = inc.next_seq - 1
    payload = pack(IncHeader(OP_CONTRIB, cfg.job_id, cfg.worker_id, 1, seq % cfg.window,
                             (seq // cfg.window) % 2, seq & 0xFFFFFFFF), np.zeros(1, np.int32), cfg.elements_per_packet)
    start = time.perf_counter()
    inc.transport.send(payload)
    deadline = start + timeout
    while (left := deadline - time.perf_counter()) > 0:
        data = inc.transport.recv(left)
        if data is None:
            break
        try:
            header = unpack_header(data, cfg.elements_per_packet)
        except IncFormatError:
            continue
        if header.opcode == OP_RESULT and header.seq == seq & 0xFFFFFFFF:
            return {"ok": True, "rtt": time.perf_counter() - start}
    return {"ok": False, "error": f"no answer to a probe of seq {seq} within {timeout:g} s"}


def as_dict(stats: object) -> dict:
    """What an agent timed and counted in a call (its `last_stats`, a dataclass), if it does."""
    return dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) else {}


def sum_is_right(result: np.ndarray, trial: dict, workers: int) -> bool:
    """The AllReduce of the trial's generated tensors against numpy, within docs/protocol.md's
    bound (hosts.numerics; exact for int32)."""
    return check_generated(result, trial["seed"], workers, max(1, trial["bytes"] // 4), trial["dtype"],
                           summed_on_hosts=trial["algorithm"] != "inc").correct


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.worker",
        description="Benchmark worker for one Mininet host (started by `python -m bench`): reads "
                    "trials as JSON lines on stdin, writes one JSON result line per trial.")
    ap.add_argument("--job-id", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True, help="worker id in the job, 0-based")
    ap.add_argument("--peers", required=True,
                    help="comma-separated IPs of all workers in rank order (the ring's neighbours)")
    ap.add_argument("--window", type=int, default=16, help="slots / unacknowledged chunks in flight")
    ap.add_argument("--timeout", type=float, default=0.05, help="seconds before a chunk is resent")
    ap.add_argument("--elements-per-packet", type=int, default=INC_K, metavar="K",
                    help=f"the job's elements per packet, as the controller recorded it; INC's and the ring's alike "
                         f"(default {INC_K})")
    ap.add_argument("--engine", choices=ENGINES, default="c",
                    help="the agents' engine, INC's and the ring's alike (default c: compiled)")
    ap.add_argument("--eager-rounds", action=argparse.BooleanOptionalAction, default=JobConfig.eager_rounds,
                    help="INC: eager Broadcast and AllGather rounds once the switch says it runs them "
                         f"(default {'on' if JobConfig.eager_rounds else 'off'})")
    ap.add_argument("--window-acks", action=argparse.BooleanOptionalAction, default=JobConfig.window_acks,
                    help="INC: Reduce and ReduceScatter acknowledged by their roots once the switch says it takes "
                         f"window ACKs (default {'on' if JobConfig.window_acks else 'off'})")
    ap.add_argument("--spin", type=float, default=DEFAULT_SPIN, metavar="SECONDS",
                    help=f"seconds a call of at most {POLL_CHUNKS} chunks reads before it sleeps in the compiled engine (INC's "
                         f"and the ring's; default {DEFAULT_SPIN})")
    ap.add_argument("--spin-large", type=float, default=DEFAULT_SPIN_LARGE, metavar="SECONDS",
                    help=f"the same for a larger call (default {DEFAULT_SPIN_LARGE})")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    peers = args.peers.split(",")
    n = len(peers)
    try:
        inc = Worker(JobConfig(args.job_id, args.rank, n, window=args.window, timeout=args.timeout,
                               elements_per_packet=args.elements_per_packet, engine=args.engine, spin=args.spin,
                               spin_large=args.spin_large, eager_rounds=args.eager_rounds, window_acks=args.window_acks), UdpTransport())
        ring = RingWorker(RingConfig(args.job_id, args.rank, n, window=args.window, timeout=args.timeout,
                                     elements_per_packet=args.elements_per_packet, engine=args.engine,
                                     spin=args.spin, spin_large=args.spin_large),
                          UdpPeerTransport([(ip, RING_PORT) for ip in peers]))
    except (ValueError, OSError) as err:
        ap.error(str(err))
    for line in sys.stdin:
        reply = run_trial(json.loads(line), args.rank, n, inc, ring)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    ring.close()
    inc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
