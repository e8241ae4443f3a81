"""Mininet switch nodes that run a P4Runtime target in the root namespace on their ports:
p4sim (`python -m p4sim`, the default) or BMv2's `simple_switch_grpc`, chosen by TARGET.
Both start with no pipeline (`--no-p4`); the controller pushes it over P4Runtime.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mininet.node import Switch

from p4sim.backends import ENV_VAR as BACKEND_ENV
from topologies.nodes import BoundedShell
from topologies.procs import Recorded, end_child, record
from topologies.spec import CPU_PORT

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("p4sim", "bmv2")
BMV2_BINARY = "simple_switch_grpc"
START_TIMEOUT_S = 60.0
_LOG_TAIL_LINES = 15


class SwitchError(RuntimeError):
    """A switch target that is missing, or that did not come up."""


@dataclass(frozen=True)
class TargetArgs:
    """What a target's command line says: ports, device id, gRPC address, debugging aids."""
    ports: tuple[tuple[int, str], ...]      # (port number, interface)
    device_id: int
    grpc_addr: str
    thrift_port: int
    cpu_port: int = CPU_PORT
    pcap_dir: Path | None = None
    log_console: bool = False
    slow: str | None = None                 # p4sim's --slow preset (bmv2, bmv2-tenth)

    def interface_flags(self) -> list[str]:
        return [flag for port, intf in self.ports for flag in ("-i", f"{port}@{intf}")]

    def debug_flags(self) -> list[str]:
        return (["--pcap", str(self.pcap_dir)] if self.pcap_dir else []) + (
            ["--log-console"] if self.log_console else [])


def p4sim_command(args: TargetArgs) -> list[str]:
    """`python -m p4sim` takes simple_switch_grpc's flags, target options inline; its backend is
    $P4SIM_BACKEND's (`make ... P4SIM_BACKEND=python`), else p4sim's default."""
    backend = os.environ.get(BACKEND_ENV, "").strip()
    return [sys.executable, "-m", "p4sim", *args.interface_flags(), "--device-id", str(args.device_id),
            "--grpc-server-addr", args.grpc_addr, "--cpu-port", str(args.cpu_port),
            *args.debug_flags(), *(["--slow", args.slow] if args.slow else []),
            *(["--backend", backend] if backend else []), "--no-p4"]


def bmv2_command(args: TargetArgs) -> list[str]:
    """simple_switch_grpc: gRPC address and CPU port are target options, after `--`."""
    if args.slow:
        raise SwitchError("a slow target (SLOW=, --slow) is p4sim's imitation of BMv2; BMv2 is that slow "
                          "by itself: leave SLOW unset with TARGET=bmv2")
    path = shutil.which(BMV2_BINARY)
    if path is None:
        raise SwitchError(f"{BMV2_BINARY} is not installed (not on PATH): install BMv2, "
                          "or use the embedded target with TARGET=p4sim")
    return [path, *args.interface_flags(), "--device-id", str(args.device_id),
            "--thrift-port", str(args.thrift_port), *args.debug_flags(), "--no-p4",
            "--", "--grpc-server-addr", args.grpc_addr, "--cpu-port", str(args.cpu_port)]


class P4RuntimeSwitch(BoundedShell, Switch):
    """A switch whose data plane is a target process serving P4Runtime on `grpc_addr`; its
    shell's commands end even when the shell is killed (BoundedShell)."""

    target = ""
    marker = ""          # in the target's command line: guards `make stop` against pid reuse

    def __init__(self, name: str, *, grpc_addr: str, device_id: int, thrift_port: int,
                 log_dir: Path, run_dir: Path, cpu_port: int = CPU_PORT, pcap_dir: Path | None = None,
                 log_console: bool = False, slow: str | None = None, **params) -> None:
        super().__init__(name, **params)
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.thrift_port = thrift_port
        self.cpu_port = cpu_port
        self.log_path = Path(log_dir) / f"{name}.log"
        self.run_dir = Path(run_dir)
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.log_console = log_console
        self.slow = slow
        self.proc: subprocess.Popen | None = None
        self._log_file: IO[bytes] | None = None
        self._pidfile: Recorded | None = None

    def data_ports(self) -> list[tuple[int, str]]:
        """Data-plane ports as (port number, interface name); the control `lo` is not one."""
        return sorted((port, intf.name) for port, intf in self.intfs.items() if intf.name != "lo")

    def command(self) -> list[str]:
        return self.build_command(TargetArgs(tuple(self.data_ports()), self.device_id, self.grpc_addr,
                                             self.thrift_port, self.cpu_port, self.pcap_dir, self.log_console,
                                             self.slow))

    @staticmethod
    def build_command(args: TargetArgs) -> list[str]:
        raise NotImplementedError

    def start(self, controllers: list) -> None:
        cmd = self.command()
        if self._grpc_open():
            raise SwitchError(f"{self.name}: something already listens on {self.grpc_addr}; "
                              "stop it (make stop) or choose another gRPC port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.pcap_dir:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)
        log.info("%s: starting %s", self.name, " ".join(cmd))
        self._log_file = self.log_path.open("wb")
        # A new session keeps Ctrl-C in the terminal away from the switch: the runner stops it.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log_file,
                                     stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True)
        self._pidfile = record(self.run_dir, self.name, self.proc.pid, self.marker)
        self._wait_ready()

    def stop(self, deleteIntfs: bool = True) -> None:
        if self.proc is not None:
            log.info("%s: stopping %s (pid %d)", self.name, self.target, self.proc.pid)
            end_child(self.proc)
            self.proc = None
        if self._pidfile is not None:
            self._pidfile.path.unlink(missing_ok=True)
            self._pidfile = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        super().stop(deleteIntfs)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise SwitchError(f"{self.name}: {self.target} exited with code {rc} while starting; "
                                  f"last lines of {self.log_path}:\n{self.log_tail()}")
            if self._grpc_open():
                log.info("%s: %s serves P4Runtime on %s", self.name, self.target, self.grpc_addr)
                return
            if time.monotonic() > deadline:
                raise SwitchError(f"{self.name}: {self.target} did not open {self.grpc_addr} within "
                                  f"{START_TIMEOUT_S:.0f} s; see {self.log_path}")
            time.sleep(0.1)

    def _grpc_open(self) -> bool:
        host, _, port = self.grpc_addr.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return True
        except OSError:
            return False

    def log_tail(self) -> str:
        if self._log_file is not None:
            self._log_file.flush()
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:])
        except OSError:
            return "(no log)"


class P4SimSwitch(P4RuntimeSwitch):
    """p4sim, our embedded v1model target: `python -m p4sim` with simple_switch_grpc's flags."""

    target = "p4sim"
    marker = "-m p4sim"

    build_command = staticmethod(p4sim_command)


class BMv2Switch(P4RuntimeSwitch):
    """BMv2's simple_switch_grpc, the reference target, where it is installed."""

    target = "bmv2"
    marker = BMV2_BINARY

    build_command = staticmethod(bmv2_command)


def switch_class(target: str) -> type[P4RuntimeSwitch]:
    classes = {"p4sim": P4SimSwitch, "bmv2": BMv2Switch}
    if target not in classes:
        raise SwitchError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    return classes[target]
