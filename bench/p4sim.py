"""Packets per second through p4sim's pipeline, in process, on both backends side by side,
and what the C backend's build and cached load cost.

Two workloads: the tutorials-style IPv4 router and the aggregation program's data path
(every frame a fresh contribution: rounds of all workers over a window of slots). The
Python backend runs frames one `Switch.process` call each, as a dataplane loop would; the
C backend runs a prepared batch in a C loop (CSwitch.run_batch), since a cffi call per
frame would measure cffi. Writes JSON (`results/p4sim.json` by default). No sockets: this
measures the switch alone, the number to compare with BMv2's simple_switch.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from hosts.args import unwritable
from hosts.inc import AGG_IP, AGG_MAC, INC_K, INC_PORT, OP_CONTRIB, PAYLOAD_SIZE, IncHeader, pack
from p4sim import P4Error, Switch, compile_file
from p4sim.backends.c import CBackendUnavailable
from p4sim.state import TableEntry

from .environment import describe_environment
from .measure import measured

log = logging.getLogger("bench.p4sim")
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Workload:
    name: str
    program: Path
    setup: Callable[[Switch], None]
    packets: Callable[[int], list[tuple[int, bytes]]]   # n frames as (ingress port, bytes)


def _router_setup(sw: Switch) -> None:
    lpm = sw.state.tables["MyIngress.ipv4_lpm"]
    for i in range(1, 5):
        lpm.insert(TableEntry((("lpm", 0x0A000000 | i << 8, 24),), "MyIngress.ipv4_forward",
                              (0x080000000000 | i, i)))


def _router_packets(count: int) -> list[tuple[int, bytes]]:
    """Four flows to four next hops, round robin."""
    flows = [(1, bytes(Ether(dst="08:00:00:00:00:fe", src="08:00:00:00:00:01")
                       / IP(src="10.0.1.1", dst=f"10.0.{i}.2", ttl=64) / UDP(sport=1000 + i, dport=2000)
                       / bytes(64)))
             for i in range(1, 5)]
    return [flows[i % len(flows)] for i in range(count)]


AGG_WORKERS = 4
AGG_JOB = 1
AGG_GROUP = 10


def _allreduce_setup(sw: Switch) -> None:
    """One job of AGG_WORKERS workers on ports 1..N, as the controller installs it."""
    t = sw.state.tables
    t["MyIngress.inc_job"].insert(TableEntry((("exact", AGG_JOB),), "MyIngress.set_job",
                                             (AGG_WORKERS, AGG_GROUP, 0, 64)))
    for w in range(AGG_WORKERS):
        t["MyIngress.inc_worker"].insert(TableEntry((("exact", AGG_JOB), ("exact", w), ("exact", w + 1)),
                                                    "MyIngress.admit_worker"))
        t["MyEgress.inc_worker_addr"].insert(TableEntry(
            (("exact", AGG_JOB), ("exact", w)), "MyEgress.set_worker_addr",
            (0x080000000001 + w, 0x0A000001 + w, INC_PORT)))
    sw.state.multicast_groups[AGG_GROUP] = [(w + 1, w) for w in range(AGG_WORKERS)]


def _allreduce_packets(count: int) -> list[tuple[int, bytes]]:
    """Rounds over a window of 16 slots, seqs rising: every worker contributes, the last completes."""
    headers = [bytes(Ether(dst=AGG_MAC, src=f"08:00:00:00:00:{w + 1:02x}")
                     / IP(src=f"10.0.0.{w + 1}", dst=AGG_IP)
                     / UDP(sport=INC_PORT, dport=INC_PORT, chksum=0) / bytes(PAYLOAD_SIZE))[:-PAYLOAD_SIZE]
               for w in range(AGG_WORKERS)]
    elements = np.arange(INC_K, dtype=np.int32)
    frames = []
    for i in range(count):
        seq, w = divmod(i, AGG_WORKERS)
        inc = IncHeader(OP_CONTRIB, AGG_JOB, w, INC_K, slot=seq % 16, pool_version=(seq // 16) % 2, seq=seq)
        frames.append((w + 1, headers[w] + pack(inc, elements)))
    return frames


WORKLOADS = {
    "allreduce": Workload("allreduce", ROOT / "p4src/allreduce.p4", _allreduce_setup, _allreduce_packets),
    "ipv4_router": Workload("ipv4_router", ROOT / "tests/p4programs/ipv4_router.p4",
                            _router_setup, _router_packets),
}


def measure(workload: Workload, packets: int, profile: bool) -> dict:
    """Python backend: `packets` frames through a fresh switch, one process() call each;
    rate and (profile) the hottest functions."""
    prog = compile_file(str(workload.program))
    sw = Switch(prog, backend="python")
    workload.setup(sw)
    frames = workload.packets(packets)
    outputs = 0
    with measured(profile) as m:
        for port, frame in frames:
            outputs += len(sw.process(port, frame))
    result = {"workload": workload.name, "backend": "python", "program": str(workload.program.relative_to(ROOT)),
              "packets": packets, "outputs": outputs, "seconds": m.seconds,
              "packets_per_s": packets / m.seconds, "stats": dict(sw.stats)}
    if profile:
        result["profile_top"] = m.profile_top
    return result


def measure_c(workload: Workload, packets: int) -> dict:
    """C backend: the build of the program's object in an empty cache, its load from the
    cache (a fresh Program's switch: C code generation, cache look-up, dlopen, pipeline and
    state), then `packets` frames in one C loop."""
    from p4sim.backends.c import CSwitch
    with tempfile.TemporaryDirectory(prefix="p4sim-bench-cache-") as cache:
        saved = os.environ.get("P4SIM_CACHE")
        os.environ["P4SIM_CACHE"] = cache
        try:
            start = time.perf_counter()
            CSwitch(compile_file(str(workload.program))).close()
            build_s = time.perf_counter() - start
            prog = compile_file(str(workload.program))
            start = time.perf_counter()
            sw = CSwitch(prog)
            load_s = time.perf_counter() - start
        finally:
            if saved is None:
                del os.environ["P4SIM_CACHE"]
            else:
                os.environ["P4SIM_CACHE"] = saved
    try:
        workload.setup(sw)
        frames = workload.packets(packets)
        outputs, seconds = sw.run_batch(frames)
        return {"workload": workload.name, "backend": "c", "program": str(workload.program.relative_to(ROOT)),
                "packets": packets, "outputs": outputs, "seconds": seconds, "packets_per_s": packets / seconds,
                "build_s": build_s, "cached_load_s": load_s, "stats": dict(sw.stats)}
    finally:
        sw.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.p4sim",
        description="Measure packets per second through p4sim's pipeline (in process, one core) "
                    "for a plain IPv4 router and for the aggregation program, and write JSON.")
    ap.add_argument("--packets", type=int, default=20000,
                    help="packets per workload on the Python backend (default 20000)")
    ap.add_argument("--c-packets", type=int, default=400000,
                    help="packets per workload on the C backend, one C loop (default 400000)")
    ap.add_argument("--backend", choices=("python", "c"), action="append",
                    help="measure only this backend (repeatable; default both)")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), action="append",
                    help="run only this workload (repeatable; default all)")
    ap.add_argument("--profile", action="store_true",
                    help="also run under cProfile and record the hottest functions (slower)")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "results/p4sim.json", help="JSON output")
    args = ap.parse_args(argv)
    if args.packets < 1 or args.c_packets < 1:
        ap.error("--packets and --c-packets must be at least 1")
    if (why := unwritable(args.out)) is not None:
        ap.error(why)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    environment = describe_environment("p4sim")
    results = []
    try:
        for name in args.workload or sorted(WORKLOADS):
            rates = {}
            for backend in args.backend or ["python", "c"]:
                if backend == "python":
                    res = measure(WORKLOADS[name], args.packets, profile=False)
                    if args.profile:
                        res["profile_top"] = measure(WORKLOADS[name], min(args.packets, 5000), True)["profile_top"]
                else:
                    res = measure_c(WORKLOADS[name], args.c_packets)
                    log.info("%-12s c: build %.2f s, cached load %.3f s", name, res["build_s"], res["cached_load_s"])
                log.info("%-12s %-6s %10.0f packets/s (%d packets, %.2f s)", name, backend, res["packets_per_s"],
                         res["packets"], res["seconds"])
                rates[backend] = res["packets_per_s"]
                results.append(res)
            if len(rates) == 2:
                log.info("%-12s c/python: %.1fx", name, rates["c"] / rates["python"])
    except (P4Error, CBackendUnavailable) as err:
        log.error("%s", err)
        return 1
    try:
        args.out.write_text(json.dumps({"environment": environment, "results": results}, indent=2))
    except OSError as err:
        log.error("cannot write %s: %s", args.out, err.strerror or err)
        return 1
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
