"""Fixtures for packet-level tests in Mininet (root): star and leaf-spine fabrics whose
teardown stops everything they started and then fails if any process or veth is left over;
`inc_star` and `inc_leaf_spine`, fabrics running p4src/allreduce.p4 as the controller sets
them up, each shared by a module's tests.
"""
from __future__ import annotations

import re
import socket
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

from topologies import fabric as fabric_module
from topologies.fabric import Fabric, FabricOptions, Impairment
from topologies.pieces import (DEFAULT_PROGRAM, WorkerResult, clear_job_slots, compile_program,
                               job_elements_per_packet, read_counters, run_allreduce, run_matrix, setup_controller)
from topologies.spec import DEFAULT_MTU, JobSpec, Topology, leaf_spine, star, three_tier
from topologies.switches import P4RuntimeSwitch, TargetArgs

StarFactory = Callable[..., Fabric]


def free_port() -> int:
    """A loopback TCP port nobody listens on now, so tests never meet another engineer's switch."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def fabrics(base_dir: Path) -> Iterator[StarFactory]:
    """A factory of star fabrics; on exit all are stopped, then any leftover is an error."""
    started: list[Fabric] = []

    def make(n_hosts: int, *, impairment: Impairment | None = None, target: str = "p4sim",
             slow: str | None = None, leaves: int = 0, flat: bool = False, job_sizes: tuple[int, ...] = (),
             mtu: int = DEFAULT_MTU, pods: int = 0) -> Fabric:
        topo = shape(n_hosts, leaves, flat, mtu, pods)
        if job_sizes:       # one job per size k, of the first k hosts (its id k), instead of one of all
            topo = Topology(topo.hosts, topo.switches, topo.links,
                            [JobSpec(k, tuple(list(topo.hosts)[:k])) for k in job_sizes], mtu=topo.mtu)
        options = FabricOptions(target=target, build_dir=base_dir / f"fabric{len(started)}",
                                impairment=impairment, slow=slow)
        fabric = Fabric(topo, options)
        started.append(fabric)
        fabric.start()
        return fabric

    try:
        yield make
    finally:
        for fabric in started:
            fabric.stop()
    leaked = [what for fabric in started for what in fabric.left_behind]
    assert not leaked, f"the fabric left these behind: {leaked}"


def shape(n_hosts: int, leaves: int, flat: bool = False, mtu: int = DEFAULT_MTU, pods: int = 0) -> Topology:
    """A star of `n_hosts`, or (`leaves` > 0) a leaf-spine of that many leaves of `n_hosts`
    each under one spine (its job summed by the spine alone if `flat`, else on both levels),
    or (`pods` > 0 too) a three-tier fabric of that many pods of `leaves` leaves (summed on
    three levels unless `flat`); every switch on free gRPC and Thrift ports, every link of `mtu`."""
    if not leaves:
        return star(n_hosts, grpc_port=free_port(), thrift_port=free_port(), mtu=mtu)
    # The builders number their switches' ports up from the base: find a free run of them.
    switches = pods * leaves + pods + 1 if pods else leaves + 1
    base = free_run(switches)
    ports = {"grpc_port": base, "thrift_port": free_run(switches, avoid=base), "hierarchical": not flat, "mtu": mtu}
    if pods:
        return three_tier(pods, leaves, n_hosts, **ports)
    return leaf_spine(leaves, 1, n_hosts, **ports)


def free_run(length: int, avoid: int | None = None) -> int:
    """The first of `length` consecutive free loopback ports (not overlapping `avoid`'s run)."""
    for _ in range(100):
        base = free_port()
        if avoid is not None and abs(base - avoid) < length:
            continue
        try:
            for port in range(base, base + length):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {length} consecutive free loopback ports found")


@pytest.fixture
def star_fabric(tmp_path: Path) -> Iterator[StarFactory]:
    """`star_fabric(n, impairment=...)` starts a star of n hosts on one switch,
    stopped after the test even when it fails."""
    with fabrics(tmp_path) as make:
        yield make


@dataclass
class IncStar:
    """A star (or leaf-spine) running the aggregation program, as the controller sets it up."""
    fabric: Fabric
    work_dir: Path
    job_index: int = 0       # which of the topology's jobs the methods run

    @property
    def job(self):
        return self.fabric.topo.jobs[self.job_index]

    @property
    def n(self) -> int:
        return len(self.job.workers)

    @property
    def k(self) -> int:
        """The job's elements per packet, as the controller recorded it."""
        return job_elements_per_packet(self.fabric.options.topology_path, self.job.job_id)

    def allreduce(self, tensors: list[np.ndarray], *worker_args: str) -> list[np.ndarray]:
        """Each worker w AllReduces tensors[w]; returns every worker's result, in worker order."""
        return [r.result for r in self.run(tensors, *worker_args)]

    def run(self, tensors: list[np.ndarray], *worker_args: str) -> list[WorkerResult]:
        """As `allreduce`, with each worker's JSON report (seconds, packets sent, ...)."""
        clear_job_slots(self.fabric.options.topology_path, self.job.job_id, self.fabric.options.target)
        return run_allreduce(self.fabric, self.job, tensors, self.work_dir, timeout_s=900, worker_args=worker_args)

    def run_matrix(self, size: int, seed: int, *worker_args: str) -> list[WorkerResult]:
        """Every worker runs every collective x op x dtype once (`hosts.worker --matrix`): each
        worker's report (which combinations passed its own check) and results, by name."""
        clear_job_slots(self.fabric.options.topology_path, self.job.job_id, self.fabric.options.target)
        return run_matrix(self.fabric, self.job, self.work_dir, size, seed, timeout_s=900, worker_args=worker_args)

    def counters(self, switch: str = "s1") -> dict[str, int]:
        """Packets per counter of `switch`, summed over its cells."""
        cells = read_counters(self.fabric.options.topology_path, switch, self.fabric.options.target)
        return {name: sum(c["packets"] for c in cell) for name, cell in cells.items()}

    @contextmanager
    def impaired(self, impairment: Impairment) -> Iterator[None]:
        self.fabric.impair(impairment)
        try:
            yield
        finally:
            self.fabric.impair(None)

    def ping(self, src: str, dst: str, count: int = 2) -> tuple[int, list[int]]:
        """Echo replies `src` got from `dst`, and their TTLs."""
        out = self.fabric.host(src).cmd(f"ping -c {count} -i 0.2 -W 2 {self.fabric.topo.hosts[dst].address}")
        return len(re.findall(r"bytes from", out)), [int(t) for t in re.findall(r"ttl=(\d+)", out)]


@contextmanager
def inc_fabric(base: Path, n_hosts: int, target: str, slow: str | None = None, leaves: int = 0,
               flat: bool = False, job_sizes: tuple[int, ...] = (), elements_per_packet: int | None = None,
               mtu: int = DEFAULT_MTU, pods: int = 0) -> Iterator[IncStar]:
    """Compile allreduce.p4 for `target` (with `elements_per_packet` as its K, if given), start
    a star on it (or a leaf-spine of `leaves` leaves of `n_hosts`, or with `pods` a three-tier
    fabric of that many pods of `leaves` leaves; p4sim slowed to the `slow`
    preset, if given; `job_sizes`: a job of the first k hosts for each k, not one of all; links
    of `mtu`), let the controller set it up and run the hosts' commands (a leaf-spine's hosts
    route through their leaf)."""
    program = compile_program(target, DEFAULT_PROGRAM, base / "program", elements_per_packet)
    with fabrics(base) as make:
        fabric = make(n_hosts, target=target, slow=slow, leaves=leaves, flat=flat, job_sizes=job_sizes, mtu=mtu,
                      pods=pods)
        setup_controller(fabric.options.topology_path, base / "program", program, target)
        fabric.run_host_commands()
        yield IncStar(fabric, base / "tensors")


@pytest.fixture(scope="module")
def inc_star(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             switch_target: str) -> Iterator[IncStar]:
    """A star of `request.param` hosts (parametrize it indirectly) running allreduce.p4 on the
    `--target` switch (p4sim unless asked).

    Module-scoped: pytest groups a module's tests by N, so each N starts one fabric.
    """
    n = getattr(request, "param", 4)
    with inc_fabric(tmp_path_factory.mktemp(f"inc_star{n}"), n, switch_target) as star_net:
        yield star_net


@pytest.fixture(scope="module")
def inc_leaf_spine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   switch_target: str) -> Iterator[IncStar]:
    """A leaf-spine on the `--target` switch, 2 leaves of `request.param` hosts (parametrize it indirectly) under
    one spine s3, running allreduce.p4 as the controller sets it up: each leaf sums its hosts,
    the spine the leaves' partials. Module-scoped, like `inc_star`."""
    n = getattr(request, "param", 2)
    with inc_fabric(tmp_path_factory.mktemp(f"inc_leaf_spine{n}"), n, switch_target, leaves=2) as fabric:
        yield fabric


@pytest.fixture(scope="module")
def inc_flat_leaf_spine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                        switch_target: str) -> Iterator[IncStar]:
    """As `inc_leaf_spine`, but the spine sums every worker's packets and the leaves forward."""
    n = getattr(request, "param", 2)
    with inc_fabric(tmp_path_factory.mktemp(f"inc_flat_leaf_spine{n}"), n, switch_target, leaves=2,
                    flat=True) as fabric:
        yield fabric


@pytest.fixture
def bmv2_star(tmp_path: Path) -> Iterator[IncStar]:
    """A star of 2 hosts on BMv2's simple_switch_grpc running allreduce.p4 (mark the test bmv2)."""
    with inc_fabric(tmp_path, 2, "bmv2") as star_net:
        yield star_net


@pytest.fixture
def dummy_target(monkeypatch: pytest.MonkeyPatch) -> type[P4RuntimeSwitch]:
    """A stand-in switch target: a process that only listens on the gRPC port.

    It lets the fabric's start-up and teardown be tested without p4sim or BMv2.
    """
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
