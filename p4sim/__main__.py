"""`python -m p4sim`: a drop-in for simple_switch_grpc (same flags, P4_16 source or p4sim's
device-config JSON), and `python -m p4sim compile PROG.p4 -o DIR` for P4Info + device config.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Callable

from . import P4Error, Program, Switch, compile_file
from .backends import default_backend
from .cbuild import BuildError
from .dataplane import SLOW_PRESETS, CDataplane, Dataplane, DataplaneError, SlowMode, parse_interface
from .p4info import build_p4info, to_text
from .runtime.p4runtime import P4RuntimeService, serve
from .runtime.thrift import DEFAULT_THRIFT_PORT, serve_thrift

log = logging.getLogger("p4sim")

DEFAULT_GRPC_ADDR = "127.0.0.1:9559"
SWITCH_PORTS = 511          # v1model's egress_spec is 9 bits and port 511 drops: ports are 0..510
LOG_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
              "warn": logging.WARNING, "error": logging.ERROR, "off": logging.CRITICAL + 1}

SWITCH_EPILOG = f"""\
Target options may also follow `--`, as simple_switch_grpc takes them:
  python -m p4sim -i 1@veth1 --no-p4 -- --grpc-server-addr 127.0.0.1:50051 --cpu-port 255

The P4Runtime server listens on {DEFAULT_GRPC_ADDR} unless --grpc-server-addr says otherwise
(simple_switch_grpc binds 0.0.0.0:9559; p4sim stays on loopback unless told).
The switch is ready when it logs "p4sim ready" and its gRPC port accepts connections.

Slow target (p4sim only, off by default): --slow bmv2 serves 8500 packets/s with 100 us added
latency and a 1024-packet queue, like BMv2's default build; --slow bmv2-tenth is a tenth of that
speed. --slow-pps, --slow-queue and --slow-latency-us set or override each figure. Queue drops
and counts are logged ("slow target: ...") every second and when the switch stops.

Backends: --backend c compiles the program to C and moves packets in C (batched, no GIL);
--backend python runs today's generated Python and packet loop. The default is c where a C
compiler is present (else python, and a log line says why); P4SIM_BACKEND sets it too.
A program the C backend cannot compile yet runs on the Python pipeline (a log line says so).

Subcommand: python -m p4sim compile PROG.p4 -o DIR  (see `python -m p4sim compile --help`)
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["compile"]:
            return compile_main(argv[1:])
        return switch_main(argv)
    except KeyboardInterrupt:       # Ctrl-C before the switch's own handler is installed
        return 130


# --- the switch ------------------------------------------------------------------

def switch_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m p4sim", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="p4sim: a v1model switch in Python serving P4Runtime, a drop-in for simple_switch_grpc.",
        epilog=SWITCH_EPILOG)
    p.add_argument("program", nargs="?", metavar="PROG.p4|CONFIG.json",
                   help="P4_16 source, or a device config written by `p4sim compile`")
    p.add_argument("--no-p4", action="store_true",
                   help="start without a program; the controller pushes one with SetForwardingPipelineConfig")
    p.add_argument("-i", "--interface", action="append", default=[], metavar="PORT@IFACE",
                   help="attach switch port PORT to network interface IFACE (repeatable)")
    p.add_argument("--device-id", type=_number(0, 2**64 - 1), default=0, help="P4Runtime device id (default 0)")
    p.add_argument("--pcap", nargs="?", const=".", metavar="DIR",
                   help="write IFACE_in.pcap and IFACE_out.pcap for every port into DIR (default: .)")
    p.add_argument("--log-console", action="store_true",
                   help="log every packet's path through the pipeline (tables, actions, drops) to stderr")
    p.add_argument("-L", "--log-level", choices=list(LOG_LEVELS), default="info",
                   help="log level (default info; trace also turns on packet tracing)")
    p.add_argument("-I", "--include", action="append", default=[], metavar="DIR",
                   help="extra include directory for a .p4 program")
    p.add_argument("--backend", choices=("c", "python"),
                   help="c: compiled pipeline and C packet loop; python: generated Python and the Python "
                        "loop (default: c where a C compiler is present, else python; or $P4SIM_BACKEND)")
    p.add_argument("--thrift-port", type=_number(0, 65535, "port"), nargs="?", const=DEFAULT_THRIFT_PORT, metavar="PORT",
                   help="also serve BMv2's Thrift runtime (simple_switch_CLI) on 127.0.0.1:PORT "
                        f"(default {DEFAULT_THRIFT_PORT}); off unless given")
    slow = p.add_argument_group("slow target (p4sim only; off by default)")
    slow.add_argument("--slow", choices=list(SLOW_PRESETS),
                      help="act as slow as BMv2's default build (bmv2) or a tenth of it (bmv2-tenth)")
    slow.add_argument("--slow-pps", type=float, metavar="PPS",
                      help="packets per second the pipeline serves (service time 1/PPS per received packet)")
    slow.add_argument("--slow-queue", type=int, metavar="N",
                      help="packets that may wait for the pipeline; more are dropped and counted")
    slow.add_argument("--slow-latency-us", type=float, metavar="US",
                      help="microseconds added to every packet the switch sends")
    _target_options(p)
    return p


def slow_mode(args: argparse.Namespace) -> SlowMode | None:
    """The slow target the flags ask for: a preset, each figure overridable; None if no flag."""
    if args.slow is None and args.slow_pps is None:
        if args.slow_queue is not None or args.slow_latency_us is not None:
            raise ValueError("--slow-queue and --slow-latency-us need --slow or --slow-pps")
        return None
    base = SLOW_PRESETS[args.slow] if args.slow else SlowMode(pps=args.slow_pps, queue_depth=1024)
    return SlowMode(pps=base.pps if args.slow_pps is None else args.slow_pps,
                    queue_depth=base.queue_depth if args.slow_queue is None else args.slow_queue,
                    latency_s=base.latency_s if args.slow_latency_us is None else args.slow_latency_us * 1e-6)


def _target_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--grpc-server-addr", metavar="HOST:PORT", type=_listen_address,
                   help=f"P4Runtime listen address (default {DEFAULT_GRPC_ADDR})")
    p.add_argument("--cpu-port", type=_number(0, SWITCH_PORTS - 1, "switch port"), metavar="PORT",
                   help="port whose packets go to / come from the controller (PacketIn/PacketOut)")


def _number(low: int, high: int, what: str = "value") -> Callable[[str], int]:
    """An argparse type: a whole number in low..high."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} {value} is not in {low}..{high}")
        return value
    return parse


def _listen_address(text: str) -> str:
    """HOST:PORT to listen on (port 0: any free one)."""
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    _number(0, 65535, "port")(port)
    return text


def switch_main(argv: list[str]) -> int:
    parser = switch_parser()
    if "--" in argv:
        cut = argv.index("--")
        argv, target_argv = argv[:cut], argv[cut + 1:]
    else:
        target_argv = []
    args = parser.parse_args(argv)
    target = argparse.ArgumentParser(prog="python -m p4sim ... --", add_help=False)
    _target_options(target)
    for key, value in vars(target.parse_args(target_argv)).items():
        if value is not None:
            setattr(args, key, value)
    if bool(args.program) == args.no_p4:
        parser.error("give either a program (PROG.p4 or CONFIG.json) or --no-p4")
    try:
        interfaces = dict(parse_interface(spec) for spec in args.interface)
    except ValueError as err:
        parser.error(f"-i: {err}")
    if bad := [n for n in interfaces if n >= SWITCH_PORTS]:
        parser.error(f"-i: switch port {bad[0]} is not in 0..{SWITCH_PORTS - 1}")
    try:
        args.slow_mode = slow_mode(args)
    except ValueError as err:
        parser.error(str(err))

    logging.basicConfig(level=LOG_LEVELS[args.log_level], stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    trace = args.log_console or args.log_level == "trace"
    if trace:
        logging.getLogger("p4sim.trace").setLevel(logging.DEBUG)
    try:
        program = None if args.no_p4 else load_program_file(args.program, tuple(args.include))
    except P4Error as err:
        print(err, file=sys.stderr)
        return 1
    except OSError as err:
        print(f"{args.program}: {err.strerror or err}", file=sys.stderr)
        return 1
    return run_switch(args, program, interfaces, trace)


def load_program_file(path: str, include_dirs: tuple[str, ...] = (), defines: tuple[str, ...] = ()) -> Program:
    """A .json file is a device config; anything else is P4_16 source. Raises P4Error."""
    if path.endswith(".json"):
        return Program.from_device_config(Path(path).read_bytes())
    if not os.path.exists(path):
        raise OSError(2, "no such file", path)
    program = compile_file(path, include_dirs, defines)
    program.info                 # parse and check now, so errors show before the switch starts
    return program


def run_switch(args: argparse.Namespace, program: Program | None, interfaces: dict[int, str],
               trace: bool) -> int:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        backend = args.backend or default_backend()
        dataplane = (CDataplane(interfaces, args.pcap, args.slow_mode, args.cpu_port) if backend == "c"
                     else Dataplane(interfaces, args.pcap, args.slow_mode))
    except (DataplaneError, ValueError) as err:
        print(f"p4sim: {err}", file=sys.stderr)
        return 1
    except BuildError as err:
        log.debug("%s", err.details)
        print(f"p4sim: cannot build the C data plane: {err}", file=sys.stderr)
        return 1
    server = service = thrift = switch = None
    try:
        switch = Switch(program, cpu_port=args.cpu_port, trace=trace, backend=backend)
        service = P4RuntimeService(switch, Program.from_device_config, device_id=args.device_id,
                                   cpu_port=args.cpu_port, transmit=dataplane.transmit,
                                   program=program)
        switch.on_digest = service.digest
        server, port = serve(service, args.grpc_server_addr or DEFAULT_GRPC_ADDR)
        if args.slow_mode is not None:
            log.info("slow target: %.0f packets/s, queue of %d, %.0f us added latency", args.slow_mode.pps,
                     args.slow_mode.queue_depth, args.slow_mode.latency_s * 1e6)
        if args.thrift_port is not None:
            thrift = serve_thrift(switch, args.thrift_port, device_id=args.device_id, ports=interfaces)
        log.info("p4sim ready: device %d, P4Runtime on port %d, %s, %s backend and data path, ports %s",
                 args.device_id, port, program.info.source_file if program else "no program (--no-p4)", backend,
                 ", ".join(f"{n}@{i}" for n, i in sorted(interfaces.items())) or "none")

        def on_packet(port_number: int, data: bytes) -> None:
            service.handle_outputs(switch.process(port_number, data))

        if isinstance(dataplane, CDataplane):
            dataplane.follow(switch)
            dataplane.run(on_packet, stop, packet_in=service.packet_in)
        else:
            dataplane.run(on_packet, stop)
    except P4Error as err:      # the traced variant is compiled when the switch loads it
        print(err, file=sys.stderr)
        return 1
    except OSError as err:
        print(f"p4sim: {err}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop(grace=1).wait()
        if thrift is not None:
            thrift.stop()
        if service is not None:
            service.close()
        dataplane.close()
        if hasattr(switch, "close"):      # a compiled pipeline, freed once no loop runs it
            switch.close()
    log.info("p4sim stopped")
    return 0


# --- compile -----------------------------------------------------------------------

def compile_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m p4sim compile",
        description="Check a P4_16 program and write DIR/<prog>.p4info.txt (P4Info text, as p4c's "
                    "--p4runtime-files writes it) and DIR/<prog>.json (the device config that "
                    "SetForwardingPipelineConfig carries).")
    p.add_argument("program", metavar="PROG.p4")
    p.add_argument("-o", "--output-dir", required=True, metavar="DIR", help="where to write the two files")
    p.add_argument("-I", "--include", action="append", default=[], metavar="DIR",
                   help="extra include directory (repeatable)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="NAME[=VALUE]",
                   help="define a preprocessor macro, as p4c's -D does (repeatable)")
    return p


def compile_main(argv: list[str]) -> int:
    args = compile_parser().parse_args(argv)
    try:
        program = load_program_file(args.program, tuple(args.include), tuple(args.define))
        p4info = build_p4info(program.info)
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = Path(args.program).stem
        (out / f"{stem}.p4info.txt").write_text(to_text(p4info))
        (out / f"{stem}.json").write_bytes(program.device_config())
    except P4Error as err:
        print(err, file=sys.stderr)
        return 1
    except ValueError as err:      # P4Info-level problems, e.g. a bad @id
        print(f"{args.program}: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"{err.filename or args.program}: {err.strerror or err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
