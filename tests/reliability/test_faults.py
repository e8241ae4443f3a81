"""Issue 5, item 3, without root: p4sim serving P4Runtime on loopback in this process, the
controller's `watch` (or `setup_switch`) configuring it, and 4 workers on an InProcessFabric.
The switch is killed and restarted mid-AllReduce (state gone, then reinstalled by watch); the
controller restarts while the data plane runs; a worker dies. Outcomes as docs/protocol.md's
"Faults" section states them: the right sum, or IncTimeoutError naming the job, never a hang.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pytest

from controller.allreduce import jobs_on_switch
from controller.fabric import setup_switch, watch
from controller.switch import Pipeline, Switch
from hosts.agent import IncTimeoutError
from hosts.inc import INC_K, POOL_SIZE
from hosts.inprocess import Host, InProcessFabric
from tests.hosts.conftest import Job
from tests.reliability.conftest import HANG_GUARD_S, InProcessP4sim, job_workers, run_workers
from topologies.spec import Topology, star

log = logging.getLogger(__name__)

N = 4
WINDOW = 8
LENGTH = 100 * INC_K
GIVE_UP_S, MAX_RTO_S = 0.5, 0.1
# docs/protocol.md, Faults: once progress stops, a worker fails within give_up_after + max_rto
# (the chunk it waits for was sent at most one RTO after the last result); plus this much
# for a thread of this test to be scheduled on a busy machine.
SCHEDULING_S = 1.0
FAILURE_BOUND_S = GIVE_UP_S + MAX_RTO_S


def assert_failed_within_the_documented_bound(errors: list[tuple[float, str]]) -> None:
    """Each (seconds after the fault, message): the message names the time budget it ran out
    of, and the failure came no later than the documented bound."""
    for elapsed, message in errors:
        waited = float(re.search(r"after ([0-9.]+) s and \d+ sends", message).group(1))
        assert GIVE_UP_S <= waited < GIVE_UP_S + SCHEDULING_S, message
        assert elapsed <= FAILURE_BOUND_S + SCHEDULING_S, (elapsed, message)


@dataclass
class Controller:
    """`python -m controller watch`, as a thread of this process."""
    topo: Topology
    pipeline: Pipeline
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    switch: Switch | None = None

    def start(self) -> None:
        self.switch = Switch("s1", self.topo.switches["s1"].grpc_addr)
        self.thread = threading.Thread(target=watch, args=([self.switch], self.topo, self.pipeline, self.stop),
                                       kwargs={"poll_s": 0.05, "connect_timeout_s": 0.5}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=HANG_GUARD_S)
        if self.switch is not None:
            self.switch.close()


@pytest.fixture
def watcher(p4sim_server: InProcessP4sim, pipeline: Pipeline) -> Iterator[Controller]:
    """The controller watching the test's switch, a 4-host star."""
    c = Controller(star(N, grpc_port=p4sim_server.port), pipeline)
    c.start()
    try:
        yield c
    finally:
        c.close()


def wait_until_set_up(server: InProcessP4sim, timeout: float = 60.0) -> float:
    """Seconds until the switch running now has the job admitted (the controller reinstalled it)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        switch = server.switch
        if switch is not None and switch.state is not None and "MyIngress.inc_job" in switch.state.tables \
                and switch.state.tables["MyIngress.inc_job"].entries():
            return time.monotonic() - start
        time.sleep(0.01)
    pytest.fail(f"the controller did not set up the switch within {timeout} s")


def topo_job(topo: Topology) -> Job:
    """The test helpers' view of the topology's job as the controller installs it."""
    (job,), _ = jobs_on_switch(topo, "s1", POOL_SIZE)
    hosts = tuple(Host(port=w.port, mac=w.mac, ip=w.ip) for w in job.workers)
    return Job(job.job_id, hosts, job.slot_base, job.num_slots, job.mcast_group)


def test_switch_restart_mid_allreduce_is_reinstalled_by_watch_and_the_sum_is_right(
        p4sim_server: InProcessP4sim, watcher: Controller) -> None:
    wait_until_set_up(p4sim_server)
    job = topo_job(watcher.topo)
    rng = np.random.default_rng(3)
    calls = [[rng.integers(-2**24, 2**24, LENGTH, dtype=np.int32) for _ in range(N)] for _ in range(3)]
    half_way = threading.Event()
    with InProcessFabric(p4sim_server, list(job.hosts)) as fabric:
        workers = job_workers(fabric, job, window=WINDOW, timeout=0.05)
        sent = workers[0][1]
        sent.after_send = lambda: sent.sends == len(calls) * LENGTH // INC_K // 2 and half_way.set()
        with ThreadPoolExecutor(N) as pool:
            futures = run_workers([w for w, _ in workers], calls, pool)
            assert half_way.wait(HANG_GUARD_S)
            in_progress = sum(1 for c in p4sim_server.slot_count_cells() if 0 < c < N)
            p4sim_server.restart()
            reinstalled = wait_until_set_up(p4sim_server)
            results = [f.result(timeout=HANG_GUARD_S) for f in futures]
    retransmissions = sum(t.sends for _, t in workers) - N * len(calls) * LENGTH // INC_K
    log.info("switch restarted with %d rounds in progress; watch reinstalled it in %.2f s; workers needed "
             "%d retransmissions", in_progress, reinstalled, retransmissions)
    for per_worker in results:
        for c, call in enumerate(calls):
            np.testing.assert_array_equal(per_worker[c], np.sum(call, axis=0, dtype=np.int32))
    assert p4sim_server.switch.stats["errors"] == 0


def test_switch_restart_after_a_lost_result_fails_every_worker_with_a_timeout_naming_the_job(
        p4sim_server: InProcessP4sim, watcher: Controller) -> None:
    """The completed round whose result worker 3 lost is gone with the switch: worker 3's
    retransmission starts a round nobody else joins, so every worker runs out of retries."""
    wait_until_set_up(p4sim_server)
    job = topo_job(watcher.topo)
    inputs = [np.full(LENGTH, w + 1, np.int32) for w in range(N)]
    with InProcessFabric(p4sim_server, list(job.hosts)) as fabric:
        workers = job_workers(fabric, job, window=WINDOW, timeout=0.02, give_up_after=GIVE_UP_S, max_rto=MAX_RTO_S)
        sent = workers[3][1]

        def crash_soon() -> None:
            if sent.sends == 20:
                p4sim_server.crash_on_result_to = job.hosts[3].port
        sent.after_send = crash_soon
        with ThreadPoolExecutor(N) as pool:
            futures = run_workers([w for w, _ in workers], [inputs], pool)
            assert p4sim_server.crashed.wait(HANG_GUARD_S)
            p4sim_server.restart()
            start = time.monotonic()
            errors = []
            for f in futures:
                with pytest.raises(IncTimeoutError) as info:
                    f.result(timeout=HANG_GUARD_S)
                errors.append((time.monotonic() - start, str(info.value)))
    log.info("every worker failed %s s after the restart (bound %.2f s): %s",
             [round(t, 2) for t, _ in errors], FAILURE_BOUND_S, errors[0][1])
    assert all("job 1 " in message for _, message in errors)
    assert_failed_within_the_documented_bound(errors)


def test_controller_restart_while_the_data_plane_runs_changes_nothing(
        p4sim_server: InProcessP4sim, watcher: Controller) -> None:
    wait_until_set_up(p4sim_server)
    job = topo_job(watcher.topo)
    rng = np.random.default_rng(8)
    calls = [[rng.integers(-2**24, 2**24, LENGTH, dtype=np.int32) for _ in range(N)] for _ in range(3)]
    restarted: list = []
    with InProcessFabric(p4sim_server, list(job.hosts)) as fabric:
        workers = job_workers(fabric, job, window=WINDOW, timeout=0.05)
        with ThreadPoolExecutor(N) as pool:
            first = [f.result(timeout=HANG_GUARD_S) for f in run_workers([w for w, _ in workers], calls[:1], pool)]
            state = p4sim_server.switch.state
            registers = {name: list(r.values) for name, r in state.registers.items()}
            watcher.close()           # the controller goes away ...
            with Switch("s1", p4sim_server.addr) as again:   # ... and a new one sets up the same topology
                restarted.append(setup_switch(again, watcher.topo, watcher.pipeline))
            assert p4sim_server.switch.state is state
            assert {name: list(r.values) for name, r in state.registers.items()} == registers
            futures = run_workers([w for w, _ in workers], calls[1:], pool)
            with Switch("s1", p4sim_server.addr) as again:   # and once more while the workers run
                restarted.append(setup_switch(again, watcher.topo, watcher.pipeline))
            rest = [f.result(timeout=HANG_GUARD_S) for f in futures]
    log.info("controller set up twice more: %s", restarted)
    assert [(r.pipeline_pushed, r.forwarding_updates, r.jobs_admitted) for r in restarted] == [(False, 0, ())] * 2
    for w in range(N):
        for c, call in enumerate(calls):
            out = first[w][0] if c == 0 else rest[w][c - 1]
            np.testing.assert_array_equal(out, np.sum(call, axis=0, dtype=np.int32))


class HostDied(Exception):
    """Raised in a worker's thread to stop it mid-call, as if its host went down."""


def test_dead_worker_makes_the_others_fail_with_a_timeout_naming_the_job(
        p4sim_server: InProcessP4sim, watcher: Controller) -> None:
    wait_until_set_up(p4sim_server)
    job = topo_job(watcher.topo)
    inputs = [np.ones(LENGTH, np.int32) for _ in range(N)]
    with InProcessFabric(p4sim_server, list(job.hosts)) as fabric:
        workers = job_workers(fabric, job, window=WINDOW, timeout=0.02, give_up_after=GIVE_UP_S, max_rto=MAX_RTO_S)
        dying = workers[2][1]

        def die() -> None:
            if dying.sends == 30:
                raise HostDied()
        dying.after_send = die
        start = time.monotonic()
        with ThreadPoolExecutor(N) as pool:
            futures = run_workers([w for w, _ in workers], [inputs], pool)
            with pytest.raises(HostDied):
                futures[2].result(timeout=HANG_GUARD_S)
            died = time.monotonic() - start
            errors = []
            for w in (0, 1, 3):
                with pytest.raises(IncTimeoutError) as info:
                    futures[w].result(timeout=HANG_GUARD_S)
                errors.append((round(time.monotonic() - start - died, 2), str(info.value)))
    log.info("worker 2 died after %.2f s; the others failed %s s later (bound %.2f s): %s",
             died, [t for t, _ in errors], FAILURE_BOUND_S, errors[0][1])
    assert all(f"job {job.job_id} " in message for _, message in errors)
    assert_failed_within_the_documented_bound(errors)
