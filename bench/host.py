"""How fast one INC worker sends and receives, and what a call costs it, against an aggregator
that answers at once: the Python engine and the compiled one (hosts/engine) side by side.

Set-ups: an in-process echo (the Python engine's own cost per packet: chunking, packing,
windowing, unpacking; the compiled engine needs a kernel socket) and a UDP echo process on
loopback (plus the kernel's socket path), for each engine. A one-worker job's result is its
contribution, so the echo only flips the opcode. Per set-up: packets per second of a large
AllReduce, and for small calls the median call time and the worker's CPU (user + system) per
call, over the echo's round trip (`--small`, default 256 B: the bench's latency point). If the
worker's packet rate is well above the switch's (`python -m bench.p4sim`), the switch is the
bottleneck of the AllReduce benchmark, not the host.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import queue
import socket
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

from hosts.agent import JobConfig, Worker
from hosts.args import unwritable
from hosts.inc import INC_K, MAX_WINDOW, OP_RESULT
from hosts.transport import UdpTransport

from .environment import describe_environment
from .measure import measured

log = logging.getLogger("bench.host")
ROOT = Path(__file__).resolve().parent.parent
OPCODE_RESULT_BYTE = (1 << 4) | OP_RESULT        # version 1, opcode RESULT


def as_result(payload: bytes) -> bytes:
    return bytes([OPCODE_RESULT_BYTE]) + payload[1:]


class EchoTransport:
    """Answers every contribution with its own result, in process."""

    def __init__(self) -> None:
        self._queue: deque[bytes] = deque()

    def send(self, payload: bytes) -> None:
        self._queue.append(as_result(payload))

    def recv(self, timeout: float) -> bytes | None:
        return self._queue.popleft() if self._queue else None

    def close(self) -> None:
        self._queue.clear()


def _udp_echo(port: int, bound: multiprocessing.Queue) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    bound.put(sock.getsockname()[1])
    while True:
        data, peer = sock.recvfrom(2048)
        sock.sendto(as_result(data), peer)


def measure(worker: Worker, elements: int, calls: int, small: int, small_calls: int, profile: bool) -> dict:
    """Packets per second of `calls` AllReduces of `elements` int32, then the time and CPU of
    `small_calls` AllReduces of `small` bytes (medians of the times; CPU per call on average)."""
    tensor = np.arange(elements, dtype=np.int32)
    worker.allreduce(tensor)                        # warm up
    with measured() as m:
        for _ in range(calls):
            result = worker.allreduce(tensor)
    if not np.array_equal(result, tensor):
        raise RuntimeError("the echo returned a different tensor")
    packets = calls * -(-elements // INC_K)
    out = {"engine": worker.engine, "packets": packets, "seconds": m.seconds, "packets_per_s": packets / m.seconds,
           "tensor_MB_per_s": calls * elements * 4 / m.seconds / 1e6}
    little = np.arange(max(1, small // 4), dtype=np.float32)
    worker.allreduce(little)
    times = []
    cpu = time.process_time()
    for _ in range(small_calls):
        start = time.perf_counter()
        worker.allreduce(little)
        times.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    out |= {"small_bytes": little.nbytes, "small_call_s": float(np.median(times)),
            "small_call_p99_s": float(np.percentile(times, 99)), "small_cpu_per_call_s": cpu / small_calls}
    if profile:
        with measured(profile=True, lines=10) as p:
            worker.allreduce(tensor)
        out["profile_top"] = p.profile_top
    return out


def echo_round_trip(port: int, count: int) -> float:
    """The UDP echo's round trip from a plain socket, seconds (median): what no engine can beat."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1.0)
        times = []
        for _ in range(count):
            start = time.perf_counter()
            s.sendto(bytes(16 + 4 * INC_K), ("127.0.0.1", port))
            s.recvfrom(2048)
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.host",
        description="Packets per second one INC worker sends and receives, and the time and CPU of a small "
                    "call, against an aggregator that answers at once (in process, and over loopback UDP), "
                    "for the Python engine and the compiled one, and where the time goes.")
    ap.add_argument("--elements", type=int, default=1 << 18, help="int32 elements per large AllReduce")
    ap.add_argument("--calls", type=int, default=3, help="large AllReduce calls per set-up")
    ap.add_argument("--small", type=int, default=256, help="bytes of float32 per small call (default 256)")
    ap.add_argument("--small-calls", type=int, default=2000, help="small calls per set-up (default 2000)")
    ap.add_argument("--window", type=int, default=16, help="slots in flight")
    ap.add_argument("--port", type=int, default=0, help="loopback UDP port of the echo (default: any free one)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one more large call and record the hottest functions")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "results/host.json", help="JSON output")
    args = ap.parse_args(argv)
    if args.elements < 1 or args.calls < 1 or args.small < 4 or args.small_calls < 1:
        ap.error("--elements, --calls and --small-calls must be at least 1 and --small at least 4")
    if not 1 <= args.window <= MAX_WINDOW:
        ap.error(f"--window must be 1..{MAX_WINDOW} slots, not {args.window}")
    if not 0 <= args.port < 1 << 16:
        ap.error(f"--port must be 0..65535, not {args.port}")
    if (why := unwritable(args.out)) is not None:
        ap.error(why)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    environment = describe_environment("none")
    sizes = (args.elements, args.calls, args.small, args.small_calls, args.profile)
    config = JobConfig(job_id=1, worker_id=0, num_workers=1, window=args.window, timeout=0.2)
    results = {"in_process/python": measure(Worker(config, EchoTransport()), *sizes)}   # no socket: Python

    bound: multiprocessing.Queue = multiprocessing.Queue()
    echo = multiprocessing.Process(target=_udp_echo, args=(args.port, bound), daemon=True)
    echo.start()
    try:
        try:
            port = bound.get(timeout=10)
        except queue.Empty:
            log.error("the UDP echo did not start")
            return 1
        rtt = echo_round_trip(port, 200)
        for engine in ("python", "c"):
            config = JobConfig(job_id=1, worker_id=0, num_workers=1, window=args.window, timeout=0.2, engine=engine)
            worker = Worker(config, UdpTransport(aggregator=("127.0.0.1", port), bind=("127.0.0.1", 0)))
            try:
                results[f"udp_loopback/{worker.engine}"] = res = measure(worker, *sizes)
                res["echo_rtt_s"] = rtt
                res["small_call_over_rtt"] = res["small_call_s"] / rtt
            finally:
                worker.close()
    except OSError as err:
        log.error("loopback UDP: %s", err)
        return 1
    finally:
        echo.terminate()
        echo.join()
    for name, res in results.items():
        log.info("%-20s %8.0f packets/s each way (%.1f MB/s of tensor); %d B call %.1f us, CPU %.1f us",
                 name, res["packets_per_s"], res["tensor_MB_per_s"], res["small_bytes"], 1e6 * res["small_call_s"],
                 1e6 * res["small_cpu_per_call_s"])
    try:
        args.out.write_text(json.dumps({"environment": environment, "config": vars(args) | {"out": str(args.out)},
                                        "results": results}, indent=2))
    except OSError as err:
        log.error("cannot write %s: %s", args.out, err.strerror or err)
        return 1
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
