"""Shared pieces of the reliability tests: the host tests' compiled allreduce.p4 and switch
fixtures, a switch wrapper that records what one port's packets produced, transports that
count sends or run a hook after each one, and `run_workers`, N worker threads of one job.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from hosts.agent import JobConfig, Worker
from hosts.inprocess import InProcessFabric, PacketSwitch
from hosts.transport import Transport
from tests.hosts.conftest import Job, program, switch  # noqa: F401 - fixtures reused as they are

log = logging.getLogger(__name__)

# No test here waits on a worker longer than this; far above any retry budget they use.
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


def job_workers(fabric: InProcessFabric, job: Job, *, first_host: int = 0, window: int = 8,
                timeout: float = 0.1, max_retries: int = 1000) -> list[tuple[Worker, HookedTransport]]:
    """One Worker per host of `job`; hosts[first_host + w] of the fabric is worker w."""
    n = len(job.hosts)
    out = []
    for w in range(n):
        transport = HookedTransport(fabric.transport(first_host + w))
        config = JobConfig(job.job_id, w, n, window=window, timeout=timeout, max_retries=max_retries)
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
