"""`python -m topologies.run`: build a Mininet fabric, start its P4 switches, configure them
with the controller, then open the Mininet CLI (`make run`) or run the AllReduce demo
(`make demo`). Everything started is stopped on the way out, also on Ctrl-C.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
from mininet.cli import CLI
from mininet.log import setLogLevel

from hosts.args import at_least, output_dir, settle_elements_per_packet
from hosts.numerics import check_sum
from p4sim.dataplane import SLOW_PRESETS
from protocol import recommended_elements_per_packet
from topologies.fabric import Fabric, FabricError, FabricOptions, Impairment
from topologies.pieces import (DEFAULT_PROGRAM, PieceError, clear_job_slots, compile_program,
                               job_elements_per_packet, read_counters, run_allreduce, setup_controller)
from topologies.spec import DEFAULT_MTU, Topology, TopologyError, leaf_spine, star, three_tier
from topologies.switches import TARGETS, SwitchError

log = logging.getLogger(__name__)

DEMO_BYTES = 1 << 20


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m topologies.run",
        description="Build a Mininet fabric of P4 switches (p4sim or BMv2) and hosts, write BUILD/topology.json, "
                    "compile and push the program with the controller, run each host's commands, then open "
                    "the Mininet CLI (--cli) or run the AllReduce demo (--demo). Needs root. Everything it "
                    "starts is stopped when it ends, also on Ctrl-C.",
        epilog="examples:\n"
               "  python -m topologies.run --topo star --hosts 4 --cli\n"
               "  python -m topologies.run --hosts 4 --demo --loss 1\n"
               "  python -m topologies.run --hosts 4 --demo --slow bmv2     # p4sim as slow as BMv2\n"
               "  python -m topologies.run --hosts 4 --demo --mtu 9000 --elements-per-packet 1024\n"
               "  python -m topologies.run --topo leaf-spine --leaves 2 --spines 1 --hosts 2 --cli\n"
               "  python -m topologies.run --topo three-tier --pods 2 --leaves 2 --hosts 2 --demo",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topo", choices=("star", "leaf-spine", "three-tier"), default="star",
                   help="fabric shape (default: star); three-tier: leaves, one aggregation switch per pod, one core")
    p.add_argument("--hosts", type=int, default=4,
                   help="hosts of the star (2..8), or hosts per leaf (default: 4)")
    p.add_argument("--leaves", type=int, default=2, help="leaf switches of a leaf-spine, or per pod (default: 2)")
    p.add_argument("--pods", type=int, default=2, help="pods of a three-tier fabric (default: 2)")
    p.add_argument("--spines", type=int, default=1, help="spine switches of a leaf-spine (default: 1)")
    p.add_argument("--flat", action="store_true",
                   help="a leaf-spine's job is summed at the spine alone, the leaves only forward "
                        "(default: each leaf sums its hosts and the spine sums the leaves)")
    p.add_argument("--target", choices=TARGETS, default=os.environ.get("TARGET", "p4sim"),
                   help="switch target (default: $TARGET or p4sim)")
    p.add_argument("--program", type=Path, default=DEFAULT_PROGRAM,
                   help="P4 program the switches run (default: the repository's p4src/allreduce.p4)")
    p.add_argument("--elements-per-packet", "--inc-k", type=int, metavar="K",
                   help="build the program with K elements per packet (INC_K, a multiple of 32 up to what one "
                        "frame of --mtu holds: 352 at 1500, 2208 at 9000; default: the target's recommended K, "
                        f"{recommended_elements_per_packet()}); the controller records it in the job and the workers "
                        "take it from there")
    p.add_argument("--mtu", type=int, default=DEFAULT_MTU,
                   help=f"MTU of every link, host and switch ends (default {DEFAULT_MTU}; 9000: jumbo frames)")
    p.add_argument("--build-dir", type=output_dir, default=Path("build"),
                   help="compiled program, topology.json, logs/, pcaps/ and run/ go here (default: build)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--cli", action="store_true", help="open the Mininet CLI once the fabric is up")
    mode.add_argument("--demo", action="store_true",
                      help="AllReduce a 1 MiB float32 tensor from every host, check it against numpy, "
                           "print the time and the switch counters")
    p.add_argument("--demo-bytes", type=at_least(4), default=DEMO_BYTES,
                   help="tensor size of the demo, at least one float32 (default: 1 MiB)")
    p.add_argument("--loss", type=float, default=0.0, help="random loss on every host link, percent each way")
    p.add_argument("--duplicate", type=float, default=0.0, help="random duplication host -> switch, percent")
    p.add_argument("--reorder", type=float, default=0.0,
                   help="percent of packets host -> switch delayed behind later ones (a slow lane)")
    p.add_argument("--slow", choices=list(SLOW_PRESETS),
                   help="p4sim only: serve packets as slowly as BMv2's default build (bmv2: 8500/s, 100 us "
                        "added, a 1024-packet queue that drops when full) or a tenth of that (bmv2-tenth)")
    p.add_argument("--pcap", action="store_true", help="the switches write pcaps to BUILD/pcaps/")
    p.add_argument("--log-console", action="store_true", help="the switches log every packet to BUILD/logs/")
    p.add_argument("-v", "--verbose", action="store_true", help="log what is started and Mininet's steps")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.slow and args.target != "p4sim":
        parser.error(f"--slow slows p4sim down to BMv2's figures; --target {args.target} runs at its own speed")
    if args.flat and args.topo == "star":
        parser.error("--flat chooses how a leaf-spine sums its job; a star has one switch")
    settle_elements_per_packet(parser, args)
    try:
        topo = build_topology(args)
        impairment = (Impairment(args.loss, args.duplicate, args.reorder)
                      if args.loss or args.duplicate or args.reorder else None)
    except (TopologyError, FabricError) as e:
        parser.error(str(e))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    setLogLevel("info" if args.verbose else "output")
    if os.geteuid() != 0:
        print("error: Mininet needs root (network namespaces and veths); run as root, e.g. sudo make run",
              file=sys.stderr)
        return 2
    try:
        options = FabricOptions(target=args.target, build_dir=args.build_dir, pcap=args.pcap,
                                log_console=args.log_console, impairment=impairment, slow=args.slow)
        program = compile_program(args.target, args.program, args.build_dir, args.elements_per_packet)
        status = 0
        try:
            with Fabric(topo, options) as fabric:
                setup_controller(options.topology_path, args.build_dir, program, args.target)
                fabric.run_host_commands()
                k = job_elements_per_packet(options.topology_path, topo.jobs[0].job_id)
                print(f"fabric up: {len(topo.hosts)} hosts, switches {', '.join(topo.switches)} ({args.target}), "
                      f"{k} elements per packet, MTU {topo.mtu}; topology in {options.topology_path}, "
                      f"logs in {options.log_dir}")
                if args.demo:
                    status = demo(fabric, args)
                elif args.cli:
                    CLI(fabric.net)
        finally:
            if args.slow:       # its final counts, logged as it stopped, also when the demo failed
                for switch in topo.switches:
                    print(f"{switch} {last_slow_stats(options.log_dir / f'{switch}.log')}")
        return status
    except KeyboardInterrupt:
        print("\ninterrupted: fabric stopped", file=sys.stderr)
        return 130
    except (TopologyError, FabricError, SwitchError, PieceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def build_topology(args: argparse.Namespace) -> Topology:
    if args.topo == "leaf-spine":
        return leaf_spine(args.leaves, args.spines, args.hosts, hierarchical=not args.flat, mtu=args.mtu)
    if args.topo == "three-tier":
        return three_tier(args.pods, args.leaves, args.hosts, hierarchical=not args.flat, mtu=args.mtu)
    return star(args.hosts, mtu=args.mtu)


def last_slow_stats(log_path: Path) -> str:
    """The last "slow target: ..." line p4sim logged (its counts when it stopped)."""
    try:
        lines = [line for line in log_path.read_text(errors="replace").splitlines() if "slow target: " in line]
    except OSError:
        lines = []
    return lines[-1].partition("slow target: ")[2] if lines else f"(no slow-target counts in {log_path})"


def demo(fabric: Fabric, args: argparse.Namespace) -> int:
    """Every worker AllReduces its own random float32 tensor; compare with numpy's sum."""
    job = fabric.topo.jobs[0]
    elements = max(1, args.demo_bytes // 4)
    rng = np.random.default_rng(2026)
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in job.workers]
    clear_job_slots(fabric.options.topology_path, job.job_id, args.target)
    print(f"AllReduce of {elements} float32 ({args.demo_bytes / 2**20:.2f} MiB) over {len(job.workers)} workers ...")
    start = time.perf_counter()
    results = run_allreduce(fabric, job, tensors, args.build_dir / "demo")
    wall = time.perf_counter() - start
    checks = [check_sum(r.result, tensors) for r in results]
    worst = max(c.max_abs_error for c in checks)
    slowest = max(max(r.report.get("seconds", [0.0])) for r in results)
    ok = all(c.correct for c in checks)
    print(f"{'OK' if ok else 'WRONG'}: max |result - numpy| = {worst:.3g} (within docs/protocol.md's bound: {ok}); "
          f"allreduce {slowest:.3f} s in the slowest worker, {wall:.3f} s with process start-up")
    if all("packets_sent" in r.report for r in results):
        print(f"the workers sent {sum(r.report['packets_sent'] for r in results)} packets, "
              f"{sum(r.report['retransmits'] for r in results)} of them retransmissions")
    for switch in fabric.topo.switches:
        counters = read_counters(fabric.options.topology_path, switch, args.target)
        packets = {name.rpartition(".")[2]: sum(c["packets"] for c in cells) for name, cells in counters.items()}
        print(f"{switch} counters (packets, zeros left out):",
              " ".join(f"{name}={n}" for name, n in packets.items() if n) or "all zero")
        # One switch delivers each result to every worker; on a leaf-spine the counters above say it.
        delivered = packets.get("results_multicast", 0) * len(job.workers) if len(fabric.topo.switches) == 1 else 0
        if delivered:
            resent = packets.get("results_resent", 0)
            print(f"{switch} re-sent {resent} results, {100 * resent / delivered:.1f}% of the {delivered} "
                  f"it delivered ({packets.get('results_multicast', 0)} slots x {len(job.workers)} workers)")
    return 0 if ok else 1


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C, so the fabric is stopped either way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.exit(main())
