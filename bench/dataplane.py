"""Packets per second through one p4sim switch over veths, and one frame's round trip, for both
backends side by side in one run (root: it makes its own veth pairs and network namespace).

A batched C traffic tool (p4sim/dataplane/traffic.c: sendmmsg out, a PACKET_MMAP ring in, a
window of frames in flight) drives the switch, so the numbers are the switch's, not the
generator's; the same tool between the two ends of one veth pair gives the ceiling of this
machine in the same run. Writes JSON (`results/dataplane.json` by default).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from p4sim.dataplane import CDataplane, Dataplane
from p4sim.dataplane.traffic import Blast, StubPipeline, TrafficSocket, VethLab, blast, round_trips, veth_lab

from .environment import describe_environment, unwritable

log = logging.getLogger("bench.dataplane")
ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("c", "python")
SWITCH_THREADS = ("p4sim-dataplane", "p4sim-dataplane-up", "bench-switch")   # whose CPU time is the switch's
# 64-byte frames (the smallest Ethernet frame without its FCS); the tool numbers them in the last 8 bytes.
FORWARD_FRAME = bytes.fromhex("000000000002" "000000000001" "88b5") + b"p4sim-bench-dataplane" + bytes(64 - 35)
# The goals for the C backend (issue 20).
GOALS = {"packets_per_s": 300_000, "rtt_median_us": 20.0}


@dataclass(frozen=True)
class Run:
    """What one backend did on one workload."""
    workload: str
    backend: str
    result: Blast
    switch_cpu_ns: int          # CPU time of the switch's threads during the burst
    rtt_s: list[float]

    def summary(self) -> dict[str, Any]:
        r = self.result
        rtt = sorted(self.rtt_s)
        return {"workload": self.workload, "backend": self.backend, "frames": r.sent, "received": r.received,
                "lost": r.sent - r.received, "mismatched": r.mismatched, "reordered": r.reordered,
                "seconds": r.seconds, "packets_per_s": r.pps,
                "switch_cpu_ns_per_packet": self.switch_cpu_ns / r.received if r.received else None,
                "rtt_us": {"samples": len(rtt), "median": statistics.median(rtt) * 1e6 if rtt else None,
                           "p99": rtt[min(len(rtt) - 1, int(len(rtt) * 0.99))] * 1e6 if rtt else None}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.dataplane",
        description="Forward 64-byte frames through one p4sim switch between veth pairs (root) with a "
                    "batched C generator and sink, on the C and the Python backend, measure one frame's "
                    "round trip, and write JSON. The ceiling (the same tool over one veth, no switch) is "
                    "measured in the same run.")
    ap.add_argument("--frames", type=int, default=300_000, help="frames per C-backend burst (default 300000)")
    ap.add_argument("--python-frames", type=int, default=30_000,
                    help="frames per Python-backend burst (default 30000; it is ten times slower)")
    ap.add_argument("--rtt", type=int, default=2000, help="round trips timed per run (default 2000)")
    ap.add_argument("--backend", choices=BACKENDS, action="append", help="only this backend (repeatable)")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "results/dataplane.json", help="JSON output")
    args = ap.parse_args(argv)
    if min(args.frames, args.python_frames, args.rtt) < 1:
        ap.error("--frames, --python-frames and --rtt must be at least 1")
    if os.geteuid() != 0:
        ap.error("needs root: it makes veth pairs and a network namespace")
    if (why := unwritable(args.out)) is not None:
        ap.error(why)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("p4sim").setLevel(logging.WARNING)
    environment = describe_environment("p4sim")
    runs = []
    with veth_lab(str(os.getpid() % 100000)) as lab:
        ceiling = measure_ceiling(lab, args.frames)
        log.info("%-8s %-7s %9.0f packets/s (one veth hop, no switch)", "ceiling", "-", ceiling.pps)
        for backend in args.backend or BACKENDS:
            frames = args.frames if backend == "c" else args.python_frames
            run = measure_forward(lab, backend, frames, args.rtt)
            s = run.summary()
            log.info("%-8s %-7s %9.0f packets/s, %d lost; round trip median %.1f us, p99 %.1f us",
                     run.workload, backend, s["packets_per_s"], s["lost"], s["rtt_us"]["median"] or 0,
                     s["rtt_us"]["p99"] or 0)
            runs.append(s)
    report = {"environment": environment, "goals_c_backend": GOALS,
              "ceiling": {"frames": ceiling.sent, "received": ceiling.received, "packets_per_s": ceiling.pps},
              "results": runs}
    try:
        args.out.write_text(json.dumps(report, indent=2))
    except OSError as err:
        log.error("cannot write %s: %s", args.out, err.strerror or err)
        return 1
    log.info("wrote %s", args.out)
    return 0


def measure_ceiling(lab: VethLab, frames: int) -> Blast:
    """The tool alone over one veth pair: from the far end of port 1 to its switch side."""
    for side in lab.switch:
        subprocess.run(["ip", "link", "set", "dev", side, "up"], check=True)
    try:
        lab.wait_until_links_pass()
        with TrafficSocket(lab.peer[0], lab.netns, receive=False) as tx, TrafficSocket(lab.switch[0]) as rx:
            return blast(tx, rx, FORWARD_FRAME, frames)
    finally:
        for side in lab.switch:         # as a switch finds them
            subprocess.run(["ip", "link", "set", "dev", side, "down"], check=True)


def measure_forward(lab: VethLab, backend: str, frames: int, rtt: int) -> Run:
    """Port 1 to port 2 with no program: on the C backend a compiled stub pipeline, on the
    Python backend a Python callback; the packet loop is what is measured."""
    interfaces = {1: lab.switch[0], 2: lab.switch[1]}
    if backend == "c":
        stub = StubPipeline({1: 2})
        dataplane: Any = CDataplane(interfaces)
        dataplane.set_pipeline(stub.pipeline)
    else:
        dataplane = Dataplane(interfaces)

    def on_packet(port: int, data: bytes) -> None:
        dataplane.transmit(2, data)

    with switch_running(dataplane, on_packet):
        lab.wait_until_links_pass()
        with TrafficSocket(lab.peer[0], lab.netns, receive=False) as tx, TrafficSocket(lab.peer[1], lab.netns) as rx:
            blast(tx, rx, FORWARD_FRAME, min(frames, 10_000))         # warm up: caches, page faults
            before = switch_cpu_ns()
            result = blast(tx, rx, FORWARD_FRAME, frames)
            cpu = switch_cpu_ns() - before
            rtt_s = round_trips(tx, rx, FORWARD_FRAME, rtt)
    return Run("forward", backend, result, cpu, rtt_s)


@contextlib.contextmanager
def switch_running(dataplane: Any, on_packet: Callable[[int, bytes], None]) -> Iterator[None]:
    """The data plane's loop in a thread, stopped and closed on exit."""
    stop = threading.Event()
    thread = threading.Thread(target=dataplane.run, args=(on_packet, stop), name="bench-switch")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        dataplane.close()


def switch_cpu_ns() -> int:
    """CPU time the switch's threads have used, from the kernel's per-thread accounting."""
    total = 0
    for thread in threading.enumerate():
        if thread.name in SWITCH_THREADS and thread.native_id is not None:
            with contextlib.suppress(OSError):
                total += int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0])
    return total


if __name__ == "__main__":
    sys.exit(main())
