"""Packets per second through one p4sim switch over veths, and one frame's round trip, for both
backends side by side in one run (root: it makes its own veth pairs and network namespace).
Workloads: `forward` (no program: the packet loop alone, port 1 to port 2), `ipv4_router`
(tests/p4programs/ipv4_router.p4 forwarding) and `allreduce` (p4src/allreduce.p4: four workers'
contributions, each completed round multicast back to the four, as bench/p4sim.py sends them).

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

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from hosts.args import unwritable
from p4sim import P4Error, Switch, compile_file
from p4sim.cbuild import BuildError
from p4sim.dataplane import CDataplane, Dataplane
from p4sim.dataplane.traffic import (Blast, StubPipeline, TrafficSocket, VethLab, blast, lab_tag, replay,
                                     round_trips, veth_lab)

from . import p4sim as in_process
from .environment import describe_environment

log = logging.getLogger("bench.dataplane")
ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("c", "python")
SWITCH_THREADS = ("p4sim-dataplane", "p4sim-dataplane-up", "bench-switch")   # whose CPU time is the switch's
# 64-byte frames (the smallest Ethernet frame without its FCS); the tool numbers them in the last 8 bytes.
FORWARD_FRAME = bytes.fromhex("000000000002" "000000000001" "88b5") + b"p4sim-bench-dataplane" + bytes(64 - 35)
ROUTER_FRAME = bytes(Ether(dst="08:00:00:00:00:fe", src="08:00:00:00:00:01") / IP(src="10.0.1.1", dst="10.0.2.2")
                     / UDP(sport=1000, dport=2000, chksum=0) / bytes(22))
WORKLOADS = ("forward", "ipv4_router", "allreduce")
PAIRS = in_process.AGG_WORKERS       # veth pairs: one per allreduce worker
ALLREDUCE_WINDOW = 32                # contributions in flight: 8 rounds, fewer than the program's 16 slots
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
    ap.add_argument("--workload", choices=WORKLOADS, action="append", help="only this workload (repeatable)")
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
    with veth_lab(lab_tag(), pairs=PAIRS) as lab:
        ceiling = measure_ceiling(lab, args.frames)
        log.info("%-11s %-7s %9.0f packets/s (one veth hop, no switch)", "ceiling", "-", ceiling.pps)
        for workload in args.workload or WORKLOADS:
            for backend in args.backend or BACKENDS:
                frames = args.frames if backend == "c" else args.python_frames
                try:
                    run = MEASURES[workload](lab, backend, frames, args.rtt)
                except (P4Error, BuildError) as err:
                    log.error("%s", err)
                    return 1
                s = run.summary()
                log.info("%-11s %-7s %9.0f packets/s, %d lost; round trip median %s us, p99 %s us", workload,
                         backend, s["packets_per_s"], s["lost"], _us(s["rtt_us"]["median"]), _us(s["rtt_us"]["p99"]))
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


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


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
    dataplane = open_dataplane(lab, backend)
    stub = StubPipeline({1: 2}) if backend == "c" else None
    if stub is not None:
        dataplane.set_pipeline(stub.pipeline)
    with switch_running(dataplane, lambda port, data: dataplane.transmit(2, data)):
        return forward_run("forward", backend, lab, FORWARD_FRAME, FORWARD_FRAME, frames, rtt)


def measure_router(lab: VethLab, backend: str, frames: int, rtt: int) -> Run:
    """ipv4_router.p4 routing port 1's frames to port 2, each checked against what the Python
    backend makes of it."""
    program = compile_file(str(in_process.WORKLOADS["ipv4_router"].program))
    reference = Switch(program, backend="python")
    in_process.WORKLOADS["ipv4_router"].setup(reference)
    (port, expect), = reference.process(1, ROUTER_FRAME)
    assert port == 2, "the route to 10.0.2.0/24 leaves by port 2"
    switch = Switch(program, backend=backend)
    in_process.WORKLOADS["ipv4_router"].setup(switch)
    dataplane = open_dataplane(lab, backend, switch)
    with closing_switch(switch), switch_running(dataplane, pipeline_callback(switch, dataplane)):
        return forward_run("ipv4_router", backend, lab, ROUTER_FRAME, expect, frames, rtt)


def measure_allreduce(lab: VethLab, backend: str, frames: int, rtt: int) -> Run:
    """Contributions from four workers on ports 1-4, ALLREDUCE_WINDOW in flight; every fourth
    completes a round, multicast to all four: as many frames out as in. No round trip (a round
    needs all four)."""
    workload = in_process.WORKLOADS["allreduce"]
    switch = Switch(compile_file(str(workload.program)), backend=backend)
    workload.setup(switch)
    count = frames - frames % PAIRS
    contributions = [(port - 1, data) for port, data in workload.packets(count)]
    dataplane = open_dataplane(lab, backend, switch)
    with closing_switch(switch), switch_running(dataplane, pipeline_callback(switch, dataplane)):
        lab.wait_until_links_pass()
        with contextlib.ExitStack() as stack:
            tx = [stack.enter_context(TrafficSocket(peer, lab.netns, receive=False)) for peer in lab.peer]
            rx = [stack.enter_context(TrafficSocket(peer, lab.netns)) for peer in lab.peer]
            before = switch_cpu_ns()
            result = replay(tx, rx, contributions, count, chunk=ALLREDUCE_WINDOW, window=ALLREDUCE_WINDOW)
            cpu = switch_cpu_ns() - before
    return Run("allreduce", backend, result, cpu, [])


MEASURES: dict[str, Callable[[VethLab, str, int, int], Run]] = {
    "forward": measure_forward, "ipv4_router": measure_router, "allreduce": measure_allreduce}


def open_dataplane(lab: VethLab, backend: str, switch: Any = None) -> Any:
    """The backend's packet loop on the lab's switch sides; the C one runs `switch`'s pipeline."""
    interfaces = {i + 1: side for i, side in enumerate(lab.switch)}
    if backend == "python":
        return Dataplane(interfaces)
    dataplane = CDataplane(interfaces)
    if switch is not None:
        dataplane.follow(switch)
    return dataplane


def pipeline_callback(switch: Any, dataplane: Any) -> Callable[[int, bytes], None]:
    """What run_switch's on_packet does without a controller: process, send every output."""
    def on_packet(port: int, data: bytes) -> None:
        for out_port, out in switch.process(port, data):
            dataplane.transmit(out_port, out)
    return on_packet


def forward_run(workload: str, backend: str, lab: VethLab, frame: bytes, expect: bytes, frames: int,
                rtt: int) -> Run:
    """A burst from port 1's far end, checked at port 2's, then round trips."""
    lab.wait_until_links_pass()
    with TrafficSocket(lab.peer[0], lab.netns, receive=False) as tx, TrafficSocket(lab.peer[1], lab.netns) as rx:
        blast(tx, rx, frame, min(frames, 10_000), expect)         # warm up: caches, page faults
        before = switch_cpu_ns()
        result = blast(tx, rx, frame, frames, expect)
        cpu = switch_cpu_ns() - before
        rtt_s = round_trips(tx, rx, frame, rtt)
    return Run(workload, backend, result, cpu, rtt_s)


@contextlib.contextmanager
def closing_switch(switch: Any) -> Iterator[None]:
    """Close a switch that holds a compiled pipeline (after the loop that ran it stopped)."""
    try:
        yield
    finally:
        if hasattr(switch, "close"):
            switch.close()


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
