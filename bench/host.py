"""How fast one INC worker sends and receives, against an aggregator that answers at once.

Two set-ups: an in-process echo (the agent's own cost per packet: chunking, packing,
windowing, unpacking) and a UDP echo process on loopback (plus the kernel's socket path).
A one-worker job's result is its contribution, so the echo only flips the opcode. If the
worker's packet rate is well above the switch's (`python -m bench.p4sim`), the switch is
the bottleneck of the AllReduce benchmark, not the host.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import queue
import socket
import sys
from collections import deque
from pathlib import Path

import numpy as np

from hosts.agent import JobConfig, Worker
from hosts.inc import INC_K, OP_RESULT
from hosts.transport import UdpTransport

from .environment import describe_environment, unwritable
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


def measure(worker: Worker, elements: int, calls: int, profile: bool) -> dict:
    tensor = np.arange(elements, dtype=np.int32)
    worker.allreduce(tensor)                        # warm up
    with measured() as m:
        for _ in range(calls):
            result = worker.allreduce(tensor)
    if not np.array_equal(result, tensor):
        raise RuntimeError("the echo returned a different tensor")
    packets = calls * -(-elements // INC_K)
    out = {"packets": packets, "seconds": m.seconds, "packets_per_s": packets / m.seconds,
           "tensor_MB_per_s": calls * elements * 4 / m.seconds / 1e6}
    if profile:
        with measured(profile=True, lines=10) as p:
            worker.allreduce(tensor)
        out["profile_top"] = p.profile_top
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.host",
        description="Packets per second one INC worker sends and receives against an aggregator "
                    "that answers at once (in process, and over loopback UDP), and where its time goes.")
    ap.add_argument("--elements", type=int, default=1 << 18, help="int32 elements per AllReduce")
    ap.add_argument("--calls", type=int, default=3, help="AllReduce calls per set-up")
    ap.add_argument("--window", type=int, default=16, help="slots in flight")
    ap.add_argument("--port", type=int, default=0, help="loopback UDP port of the echo (default: any free one)")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one more call and record the hottest functions")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "results/host.json", help="JSON output")
    args = ap.parse_args(argv)
    if args.elements < 1 or args.calls < 1:
        ap.error("--elements and --calls must be at least 1")
    if not 1 <= args.window < 1 << 11:
        ap.error(f"--window must be 1..2047 slots, not {args.window}")
    if (why := unwritable(args.out)) is not None:
        ap.error(why)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    environment = describe_environment("none")
    config = JobConfig(job_id=1, worker_id=0, num_workers=1, window=args.window, timeout=0.2)
    results = {"in_process": measure(Worker(config, EchoTransport()), args.elements, args.calls, args.profile)}

    bound: multiprocessing.Queue = multiprocessing.Queue()
    echo = multiprocessing.Process(target=_udp_echo, args=(args.port, bound), daemon=True)
    echo.start()
    try:
        try:
            port = bound.get(timeout=10)
        except queue.Empty:
            log.error("the UDP echo did not start")
            return 1
        transport = UdpTransport(aggregator=("127.0.0.1", port), bind=("127.0.0.1", 0))
        worker = Worker(config, transport)
        try:
            results["udp_loopback"] = measure(worker, args.elements, args.calls, args.profile)
        finally:
            worker.close()
    except OSError as err:
        log.error("loopback UDP: %s", err)
        return 1
    finally:
        echo.terminate()
        echo.join()
    for name, res in results.items():
        log.info("%-12s %8.0f packets/s each way (%.1f MB/s of tensor)", name, res["packets_per_s"],
                 res["tensor_MB_per_s"])
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
