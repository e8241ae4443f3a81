"""Shared pieces of the reliability tests: the host tests' compiled allreduce.p4 and switch
fixtures, a switch wrapper that records what one port's packets produced, transports that
count sends or run a hook after each one, `run_workers` (N worker threads of one job), and
`p4sim_server`, a restartable p4sim with a P4Runtime server on loopback, in this process,
and `star`, a Mininet star of 4 hosts running allreduce.p4 for a module's tests.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import grpc
import numpy as np
import pytest
from p4sim import Program
from p4sim import Switch as P4simSwitch
from p4sim.runtime.p4runtime import P4RuntimeService, serve

from hosts.agent import JobConfig, Worker
from hosts.inprocess import InProcessFabric, PacketSwitch
from hosts.transport import Transport
from tests.controller.conftest import build_dir, pipeline  # noqa: F401 - fixtures reused as they are
from tests.hosts.conftest import Job, program, switch  # noqa: F401 - fixtures reused as they are

log = logging.getLogger(__name__)

# No test here waits on a worker longer than this; far above any time budget they use.
HANG_GUARD_S = 600.0


@dataclass
class TappedSwitch:
    """A PacketSwitch that keeps, in order, what the switch emitted for each packet that
    arrived on `tap_port` (only one thread may send on that port)."""
    switch: PacketSwitch
    tap_port: int
    outputs: list[list[tuple[int, bytes]]] = field(default_factory=list)

    def process(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        out = self.switch.process(port, data)
        if port == self.tap_port:
            self.outputs.append(out)
        return out


@dataclass
class HookedTransport:
    """A Transport that counts its sends and calls `after_send()` after each one."""
    inner: Transport
    after_send: Callable[[], None] = lambda: None
    sends: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def send(self, payload: bytes) -> None:
        self.inner.send(payload)
        with self._lock:
            self.sends += 1
        self.after_send()

    def recv(self, timeout: float) -> bytes | None:
        return self.inner.recv(timeout)

    def close(self) -> None:
        self.inner.close()


@dataclass
class InProcessP4sim:
    """What `python -m p4sim --no-p4` is, in this process: a p4sim switch with a P4Runtime
    server on a loopback port. `kill()` loses the switch and all its state (packets sent
    meanwhile are lost); `start()` brings up a fresh one, without a pipeline, on the same port.
    With `crash_on_result_to` set, the switch dies just as it sends a result to that port:
    the copies to the other ports go out, that one is lost, and `crashed` is set."""
    port: int = 0
    switch: P4simSwitch | None = None
    crash_on_result_to: int | None = None
    crashed: threading.Event = field(default_factory=threading.Event)
    _server: grpc.Server | None = field(default=None, repr=False)
    _service: P4RuntimeService | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        switch = P4simSwitch(None)
        self._service = P4RuntimeService(switch, Program.from_device_config, device_id=0)
        self._server, self.port = serve(self._service, self.addr)
        with self._lock:
            self.switch = switch

    def die(self) -> None:
        """The switch is gone from this instant: packets sent to it from now on are lost
        (`kill` or `restart` then also stops its P4Runtime server)."""
        with self._lock:
            self.switch = None

    def kill(self) -> None:
        self.die()
        if self._server is not None:
            self._server.stop(None).wait()
            self._service.close()
            self._server = self._service = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def process(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        with self._lock:
            switch = self.switch
        if switch is None:
            return []
        out = switch.process(port, data)
        if self.crash_on_result_to is not None and any(p == self.crash_on_result_to for p, _ in out):
            out = [(p, d) for p, d in out if p != self.crash_on_result_to]
            with self._lock:
                self.switch, self.crash_on_result_to = None, None
            self.crashed.set()
        return out

    def slot_count_cells(self) -> list[int]:
        return list(self.switch.state.registers["MyIngress.slot_count"].values) if self.switch else []


@pytest.fixture
def p4sim_server() -> Iterator[InProcessP4sim]:
    server = InProcessP4sim()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def star(tmp_path_factory: pytest.TempPathFactory, switch_target: str):  # noqa: ANN201 - an IncStar; Mininet imported only here
    """A star of 4 hosts on the `--target` switch set up by the controller (tests/mininet/conftest.py's inc_fabric)."""
    from tests.mininet.conftest import inc_fabric
    with inc_fabric(tmp_path_factory.mktemp("star"), 4, switch_target) as net:
        yield net


def job_workers(fabric: InProcessFabric, job: Job, *, first_host: int = 0, window: int = 8,
                timeout: float = 0.1, give_up_after: float = 60.0,
                max_rto: float = 2.0) -> list[tuple[Worker, HookedTransport]]:
    """One Worker per host of `job`; hosts[first_host + w] of the fabric is worker w."""
    n = len(job.hosts)
    out = []
    for w in range(n):
        transport = HookedTransport(fabric.transport(first_host + w))
        config = JobConfig(job.job_id, w, n, window=window, timeout=timeout, give_up_after=give_up_after,
                           max_rto=max_rto)
        out.append((Worker(config, transport), transport))
    return out


def run_workers(workers: Sequence[Worker], calls: Sequence[Sequence[np.ndarray]],
                pool: ThreadPoolExecutor) -> list[Future]:
    """Worker w AllReduces calls[c][w] for each call c in turn, in its own thread; each future
    gives that worker's list of results (or raises the worker's error)."""
    def run(w: int) -> list[np.ndarray]:
        return [workers[w].allreduce(call[w]) for call in calls]
    return [pool.submit(run, w) for w in range(len(workers))]


def counters(sw) -> dict[str, int]:  # noqa: ANN001 - a p4sim.Switch
    """Every counter of the switch by its short name (cell 0, packets)."""
    return {name.split(".")[-1]: c.packets[0] for name, c in sw.state.counters.items()}


def counter_deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in after if after[name] != before[name]}
