"""Fixtures for packet-level tests in Mininet (root): a star fabric whose teardown stops
everything it started and then fails the test if any process or veth is left over.
"""
from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

from topologies.cleanup import leftovers
from topologies.fabric import Fabric, FabricOptions, Impairment
from topologies.spec import Topology, star

StarFactory = Callable[..., Fabric]


def free_port() -> int:
    """A loopback TCP port nobody listens on now, so tests never meet another engineer's switch."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def star_fabric(tmp_path: Path) -> Iterator[StarFactory]:
    """`star_fabric(n, impairment=..., static_arp=...)` starts a star of n hosts on one switch.

    Every fabric started is stopped after the test, even when it fails; then the test
    errors if a switch, node shell, host program or switch veth of it survived.
    """
    started: list[tuple[Fabric, Topology]] = []

    def make(n_hosts: int, *, impairment: Impairment | None = None, static_arp: bool = False,
             target: str = "p4sim") -> Fabric:
        topo = star(n_hosts, grpc_port=free_port(), thrift_port=free_port())
        options = FabricOptions(target=target, build_dir=tmp_path / f"fabric{len(started)}",
                                impairment=impairment, static_arp=static_arp)
        fabric = Fabric(topo, options)
        started.append((fabric, topo))
        fabric.start()
        return fabric

    try:
        yield make
    finally:
        for fabric, _ in started:
            fabric.stop()
    leaked = [what for fabric, topo in started for what in leftovers(fabric.options.build_dir, topo)]
    assert not leaked, f"the fabric left these behind: {leaked}"


@pytest.fixture
def dummy_target(monkeypatch: pytest.MonkeyPatch) -> type:
    """A stand-in switch target: a process that only listens on the gRPC port.

    It lets the fabric's start-up and teardown be tested without p4sim or BMv2.
    """
    from topologies import fabric as fabric_module
    from topologies.switches import P4RuntimeSwitch, TargetArgs

    class DummySwitch(P4RuntimeSwitch):
        target = "dummy"
        marker = "p4inc-dummy-target"

        @staticmethod
        def build_command(args: TargetArgs) -> list[str]:
            host, _, port = args.grpc_addr.rpartition(":")
            listen = (f"import socket, time; s = socket.socket(); s.bind(({host!r}, {port})); s.listen();"
                      " time.sleep(600)")
            return [sys.executable, "-c", listen, DummySwitch.marker, *args.interface_flags()]

    monkeypatch.setattr(fabric_module, "switch_class", lambda target: DummySwitch)
    return DummySwitch

