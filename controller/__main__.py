"""`python -m controller`: set up, inspect and watch the switches of a p4inc topology
over P4Runtime (p4sim or BMv2). Errors go to stderr, exit status 1, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Callable

from hosts.args import address, at_least, host_port, port
from topologies.spec import Topology, TopologyError

from .allreduce import Job, jobs_on_switch
from .control import dump_state, install_runtime_config, read_counters
from .entries import RuntimeConfig
from .errors import ControllerError
from .fabric import open_switch, record_elements_per_packet, setup_switch, watch
from .install import clear_slots, program_sizes, remove_job
from .pool import JobPool, PoolServer
from .registers import TARGETS
from .switch import READ_ONLY_ELECTION_ID, Pipeline, Switch

log = logging.getLogger("controller")

EPILOG = """\
examples:
  python -m p4sim compile p4src/allreduce.p4 -o build/     # the pipeline setup pushes
  python -m controller setup                               # every switch of build/topology.json
  python -m controller setup --switch s1 --force-pipeline  # re-push: wipes s1's state
  python -m controller watch                               # re-install after a switch restart
  python -m controller counters --switch s1
  python -m controller registers MyIngress.slot_count --switch s1 --index 0 512
  python -m controller clear-slots 1
  python -m controller install s1-runtime.json --switch s1 # the P4 tutorials' runtime JSON
  python -m controller pool --listen unix:/tmp/p4inc-pool.sock --slots 64   # jobs ask for slots

A second `setup` (a restarted controller) wins arbitration with a newer election id and
only adds what is missing: the pipeline is pushed only to a device that runs none or
another one, so running jobs keep their slots.
"""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.run(args)
    except (ControllerError, TopologyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--topo", type=Path, default=Path("build/topology.json"),
                   help="topology JSON written by the fabric (default: %(default)s)")
    common.add_argument("--target", choices=TARGETS,
                   help="switch target; decides how registers are reached (default: the one the "
                        "topology file names, as a running fabric writes it; else $TARGET, else p4sim)")
    common.add_argument("--election-id", type=at_least(1), default=None,
                   help="P4Runtime election id (default: milliseconds since the epoch, so "
                        "a later controller becomes primary)")
    common.add_argument("--grpc-addr", type=host_port, help="talk to one switch at this address instead of a "
                                       "topology switch (install, entries, counters, registers)")
    common.add_argument("--device-id", type=at_least(0), default=0, help="device id with --grpc-addr (default: 0)")
    common.add_argument("--thrift-port", type=port, default=9090,
                   help="BMv2 Thrift port with --grpc-addr and --target bmv2 (default: 9090)")
    common.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    p = argparse.ArgumentParser(
        prog="python -m controller", description=__doc__, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help, parents=[common])
        c.set_defaults(run=run)
        return c

    def pipeline_args(c: argparse.ArgumentParser) -> None:
        c.add_argument("--build-dir", type=Path, default=Path("build"),
                       help="where the compiled program is (default: %(default)s)")
        c.add_argument("--program", default="allreduce",
                       help="program name: BUILD_DIR/NAME.p4info.txt and BUILD_DIR/NAME.json "
                            "(default: %(default)s)")
        c.add_argument("--p4info", type=Path, help="P4Info text file (overrides --build-dir)")
        c.add_argument("--device-config", type=Path,
                       help="device config: p4sim's or BMv2's JSON (overrides --build-dir)")

    def switches_arg(c: argparse.ArgumentParser, many: bool) -> None:
        if many:
            c.add_argument("--switch", action="append", metavar="NAME",
                           help="a switch of the topology; repeat for several (default: all)")
        else:
            c.add_argument("--switch", metavar="NAME",
                           help="a switch of the topology (default: its only switch)")

    c = command("setup", _setup, "push the pipeline (if the switch lacks it), install "
                "forwarding, jobs and multicast groups from the topology, and record in each job of "
                "the topology file the pipeline's elements per packet (K), which its workers use")
    switches_arg(c, many=True)
    pipeline_args(c)
    c.add_argument("--force-pipeline", action="store_true",
                   help="push the pipeline even if the switch runs it already (wipes its state)")
    c = command("watch", _watch, "set up the switches, then keep them set up: reconnect to a "
                "switch that stopped or restarted and re-install everything")
    switches_arg(c, many=True)
    pipeline_args(c)
    c.add_argument("--poll", type=_poll_seconds, default=1.0, help="seconds between checks (default: 1)")
    c = command("pool", _pool, "set up the switches, keep them set up (as watch), and serve the "
                "slot pool: jobs ask for slots and give them back (docs/protocol.md)")
    switches_arg(c, many=True)
    pipeline_args(c)
    c.add_argument("--listen", required=True, metavar="ADDR", type=_listen_address,
                   help="where hosts reach the service: HOST:PORT, or unix:PATH (a Unix socket, which "
                        "Mininet hosts reach through the shared file system)")
    c.add_argument("--slots", type=_positive, help="slots per switch the pool hands out "
                   "(default: the whole pool from --first-slot)")
    c.add_argument("--first-slot", type=at_least(0), default=0, help="the pool's first slot (default: 0)")
    c.add_argument("--poll", type=_poll_seconds, default=1.0, help="seconds between checks (default: 1)")
    c = command("install", _install, "install a P4 tutorials runtime JSON (table_entries, "
                "multicast_group_entries, clone_session_entries) on one switch")
    c.add_argument("runtime", type=Path, help="the runtime JSON file")
    switches_arg(c, many=False)
    c = command("entries", _entries, "print what one switch holds, as runtime JSON")
    switches_arg(c, many=False)
    c = command("counters", _counters, "print every indirect counter of one switch as JSON")
    switches_arg(c, many=False)
    c = command("registers", _registers, "print a register array of one switch as JSON")
    c.add_argument("name", help="register name, e.g. MyIngress.slot_count (a unique suffix will do)")
    c.add_argument("--index", type=at_least(0), nargs="+", help="only these indices")
    switches_arg(c, many=False)
    c = command("clear-slots", _clear_slots, "zero a job's slot state on the switch that aggregates it")
    c.add_argument("job_id", type=at_least(0), help="the job's id in the topology")
    switches_arg(c, many=True)
    c = command("remove-job", _remove_job, "stop admitting a job and remove its entries and group")
    c.add_argument("job_id", type=at_least(0), help="the job's id in the topology")
    switches_arg(c, many=True)
    return p


def _listen_address(text: str) -> str:
    """unix:PATH, or HOST:PORT with the port checked (0: any free one)."""
    if text.startswith("unix:") and len(text) > len("unix:"):
        return text
    host, number = address(listen=True)(text)
    return f"{host}:{number}"


def _poll_seconds(text: str) -> float:
    """A positive, finite --poll: 0 would check the switches in a busy loop."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds (0 would busy-loop), not {text}")
    return value


def _setup(args: argparse.Namespace) -> int:
    topo, pipeline = Topology.load(args.topo), _pipeline(args)
    for name in _names(args, topo):
        with open_switch(topo, name, _target(args, topo), _election(args)) as sw:
            r = setup_switch(sw, topo, pipeline, args.force_pipeline)
        log.info("%s: pipeline %s (%d elements per packet), %d forwarding updates, jobs admitted: %s, "
                 "passed on: %s", name, "pushed" if r.pipeline_pushed else "kept", r.elements_per_packet,
                 r.forwarding_updates, list(r.jobs_admitted) or "none", list(r.jobs_forwarded) or "none")
    record_elements_per_packet(topo, program_sizes(pipeline.p4info).elements_per_packet, args.topo)
    return 0


def _watch(args: argparse.Namespace) -> int:
    topo, pipeline = Topology.load(args.topo), _pipeline(args)
    switches = [open_switch(topo, name, _target(args, topo), _election(args)) for name in _names(args, topo)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    record_elements_per_packet(topo, program_sizes(pipeline.p4info).elements_per_packet, args.topo)
    log.info("watching %s (Ctrl-C to stop)", ", ".join(sw.name for sw in switches))
    try:
        watch(switches, topo, pipeline, stop, args.poll)
    finally:
        for sw in switches:
            sw.close()
    return 0


def _pool(args: argparse.Namespace) -> int:
    topo = Topology.load(args.topo)
    if topo.jobs:
        raise ControllerError(f"{args.topo} has jobs of its own ({', '.join(str(j.job_id) for j in topo.jobs)}), "
                              f"which hold the whole slot pool: serve the pool on a topology without jobs")
    pipeline = _pipeline(args)
    switches = [open_switch(topo, name, _target(args, topo), _election(args)) for name in _names(args, topo)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        for sw in switches:
            sw.connect()
            setup_switch(sw, topo, pipeline)
        pool = JobPool(topo, switches, args.slots, args.first_slot)
        try:
            with PoolServer(pool, args.listen) as server:
                log.info("serving the slot pool at %s (Ctrl-C to stop)", server.address)
                watch(switches, topo, pipeline, stop, args.poll, reconciled=pool.reinstall)
        finally:
            pool.close()
    finally:
        for sw in switches:
            sw.close()
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _install(args: argparse.Namespace) -> int:
    config = RuntimeConfig.load(args.runtime)
    with _one_switch(args) as sw:
        n = install_runtime_config(sw, config)
    log.info("%s: %d updates written", sw.name, n)
    return 0


def _entries(args: argparse.Namespace) -> int:
    with _one_switch(args, read_only=True) as sw:
        print(json.dumps(dump_state(sw), indent=2))
    return 0


def _counters(args: argparse.Namespace) -> int:
    with _one_switch(args, read_only=True) as sw:
        counters = read_counters(sw)
    print(json.dumps({name: [{"packets": p, "bytes": b} for p, b in cells]
                      for name, cells in counters.items()}, indent=2))
    return 0


def _registers(args: argparse.Namespace) -> int:
    with _one_switch(args, read_only=True) as sw:
        values = sw.registers.read(args.name)
    if args.index:
        bad = [i for i in args.index if not 0 <= i < len(values)]
        if bad:
            raise ControllerError(f"{args.name} has {len(values)} cells: no index {bad[0]}")
        print(json.dumps({str(i): values[i] for i in args.index}, indent=2))
    else:
        print(json.dumps(values))
    return 0


def _clear_slots(args: argparse.Namespace) -> int:
    return _on_job(args, clear_slots, "cleared")


def _remove_job(args: argparse.Namespace) -> int:
    return _on_job(args, remove_job, "removed")


def _on_job(args: argparse.Namespace, action: Callable[[Switch, Job], None], done: str) -> int:
    topo = Topology.load(args.topo)
    if args.job_id not in {j.job_id for j in topo.jobs}:
        raise ControllerError(f"no job {args.job_id} in {args.topo} (jobs: "
                              f"{', '.join(str(j.job_id) for j in topo.jobs) or 'none'})")
    found = False
    for name in _names(args, topo):
        with open_switch(topo, name, _target(args, topo), _election(args)) as sw:
            jobs, _ = jobs_on_switch(topo, name, program_sizes(sw.context.p4info).pool_size)
            for job in jobs:
                if job.job_id == args.job_id:
                    action(sw, job)
                    found = True
    if not found:
        raise ControllerError(f"job {args.job_id} is aggregated on none of the switches chosen")
    log.info("job %d %s", args.job_id, done)
    return 0


def _one_switch(args: argparse.Namespace, read_only: bool = False) -> Switch:
    election = _election(args, read_only)
    if args.grpc_addr:
        return Switch(args.grpc_addr, args.grpc_addr, args.device_id, election,
                      _target(args, None), args.thrift_port)
    topo = Topology.load(args.topo)
    if args.switch is None:
        if not topo.switches:
            raise ControllerError(f"{args.topo} has no switches")
        if len(topo.switches) > 1:
            raise ControllerError(f"{args.topo} has several switches: choose one with --switch "
                                  f"({', '.join(topo.switches)})")
        args.switch = next(iter(topo.switches))
    return open_switch(topo, args.switch, _target(args, topo), election)


def _target(args: argparse.Namespace, topo: Topology | None) -> str:
    """--target, else the topology's (the fabric that wrote it knows), else $TARGET, else p4sim."""
    return args.target or (topo.target if topo else None) or os.environ.get("TARGET") or "p4sim"


def _names(args: argparse.Namespace, topo: Topology) -> list[str]:
    names = args.switch or list(topo.switches)
    if not names:
        raise ControllerError(f"{args.topo} has no switches")
    unknown = [n for n in names if n not in topo.switches]
    if unknown:
        raise ControllerError(f"no switch {unknown[0]!r} in {args.topo} (it has: {', '.join(topo.switches)})")
    return names


def _pipeline(args: argparse.Namespace) -> Pipeline:
    if (args.p4info is None) != (args.device_config is None):
        raise ControllerError("give both --p4info and --device-config, or neither")
    if args.p4info is not None:
        return Pipeline.load(args.p4info, args.device_config)
    return Pipeline.from_build(args.build_dir, args.program)


def _election(args: argparse.Namespace, read_only: bool = False) -> tuple[int, int] | None:
    """--election-id if given; else the lowest id for commands that only read, and for the
    rest None (a fresh, higher id: a restarted controller takes over)."""
    if args.election_id is not None:
        return (0, args.election_id)
    return READ_ONLY_ELECTION_ID if read_only else None


if __name__ == "__main__":
    sys.exit(main())
