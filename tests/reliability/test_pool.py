"""Issue 12, item 3, without root: the controller's slot pool (controller/pool.py) on a p4sim
switch serving P4Runtime in this process, its JSON-lines service reached by the hosts' client
(hosts/pool.py), and jobs on InProcessFabrics that fall back to the host ring
(hosts/fallback.py) when the pool is full, when no switch can aggregate for them, and when
the switch is killed mid-call. Every result is compared with numpy's, exactly (int32).
"""
from __future__ import annotations

import dataclasses
import logging
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np
import pytest

from controller.allreduce import INC_JOB, JobTree, candidate_trees
from controller.install import install_forwarding
from controller.control import push_pipeline, read_multicast_groups, read_table_entries
from controller.fabric import watch
from controller.pool import CANNOT_AGGREGATE, NO_ROOM, Grant, JobPool, PoolRefused, PoolServer, SlotPool
from controller.switch import Pipeline, Switch
from hosts import numerics
from hosts import pool as pool_client
from hosts.agent import JobConfig, Worker
from hosts.dist import Options
from hosts.fallback import FallbackAllReduce, FallbackEvent
from hosts.inc import INC_K, INC_PORT
from hosts.inprocess import InProcessFabric
from hosts.ring import RingConfig
from tests.controller.conftest import REPO
from tests.hosts.conftest import host
from tests.hosts.conftest import install_forwarding as install_forwarding_direct
from tests.reliability.conftest import HANG_GUARD_S, HookedTransport, InProcessP4sim
from tests.workloads.test_dist import free_port, on_every_rank
from topologies.spec import Endpoint, HostSpec, LinkSpec, Topology, leaf_spine, star

log = logging.getLogger(__name__)

WINDOW = 8
LENGTH = 40 * INC_K


def test_slot_pool_allocates_first_fit_and_refuses_when_full() -> None:
    pool = SlotPool(capacity=32, first=100)
    assert pool.allocate(1, 8) == 100
    assert pool.allocate(2, 16) == 108
    with pytest.raises(PoolRefused) as info:
        pool.allocate(3, 16)
    assert info.value.reason == NO_ROOM and "8 of 32 free" in str(info.value)
    pool.release(1)
    with pytest.raises(PoolRefused, match="not contiguous"):     # 8 + 8 free, apart
        pool.allocate(3, 16)
    assert pool.allocate(3, 4) == 100          # the first hole that fits
    pool.release(2)
    assert pool.allocate(4, 28) == 104 and pool.free == 0


def test_placement_on_a_leaf_spine_uses_only_the_pools_switches() -> None:
    """Workers on two leaves: the spine sums the leaves' partials (or, flat, sums all and both
    leaves forward to it through port 3, their uplink); without the spine in the pool nothing
    can; workers on one leaf: that leaf alone."""
    topo = leaf_spine(2, 1, 2)
    every = {"s1", "s2", "s3"}
    assert candidate_trees(topo, 7, ["h1", "h3"], every) == [
        JobTree(7, ("h1", "h3"), "s3", ("s1", "s2"), parents=(("s1", "s3"), ("s2", "s3")))]
    assert candidate_trees(topo, 7, ["h1", "h3"], every, hierarchical=False) == [
        JobTree(7, ("h1", "h3"), "s3", (), (("s1", 3), ("s2", 3)))]
    assert candidate_trees(topo, 7, ["h1", "h3"], {"s1", "s2"}) == []
    assert candidate_trees(topo, 7, ["h1", "h3"], {"s1", "s3"}) == []       # s2 would have to sum or forward
    assert candidate_trees(topo, 7, ["h1", "h2"], every) == [JobTree(7, ("h1", "h2"), "s1")]


def test_placement_on_two_spines_offers_both_roots_and_a_tree_out_of_ids_is_summed_flat() -> None:
    """Two spines: either can sum the leaves (the pool picks the emptier one). 32 workers on two
    leaves leave no ids for the leaves at the spine: that job is summed flat, the leaves forward."""
    topo = leaf_spine(2, 2, 2)
    trees = candidate_trees(topo, 7, ["h1", "h3"], set(topo.switches))
    assert [(t.root, t.leaves, t.forwards) for t in trees] == [("s3", ("s1", "s2"), ()), ("s4", ("s1", "s2"), ())]
    big = leaf_spine(2, 2, 16)
    trees = candidate_trees(big, 7, list(big.hosts), set(big.switches))
    assert [(t.root, t.leaves, t.forwards) for t in trees] == [("s3", (), (("s1", 17), ("s2", 17))),
                                                               ("s4", (), (("s1", 18), ("s2", 18)))]


def pool_topology(n_hosts: int, grpc_port: int) -> Topology:
    """A star of n hosts with no jobs of its own: every job comes from the pool."""
    return dataclasses.replace(star(n_hosts, grpc_port=grpc_port), jobs=[])


@pytest.fixture
def controlled(p4sim_server: InProcessP4sim, pipeline: Pipeline) -> Iterator[Switch]:
    """The in-process switch with allreduce.p4 and forwarding for a 6-host star, and the
    controller's session to it."""
    sw = Switch("s1", p4sim_server.addr)
    sw.connect(timeout=10)
    try:
        push_pipeline(sw, pipeline)
        install_forwarding(sw, pool_topology(6, p4sim_server.port), "s1")
        yield sw
    finally:
        sw.close()


def job_ids(sw: Switch) -> set[int]:
    return {e.match["hdr.inc.job_id"] for e in read_table_entries(sw, INC_JOB)}


def test_grant_installs_the_job_over_p4runtime_and_release_removes_it(
        controlled: Switch, p4sim_server: InProcessP4sim) -> None:
    topo = pool_topology(6, p4sim_server.port)
    pool = JobPool(topo, [controlled], slots=32, first_slot=64)
    try:
        a = pool.request([("10.0.0.1", INC_PORT), ("10.0.0.2", 40000)], 16)
        b = pool.request([("10.0.0.3", INC_PORT), ("10.0.0.4", INC_PORT)], 16)
        assert (a.switch, a.slot_base, b.slot_base) == ("s1", 64, 80)
        assert job_ids(controlled) == {a.job_id, b.job_id}
        (entry,) = [e for e in read_table_entries(controlled, INC_JOB) if e.match["hdr.inc.job_id"] == a.job_id]
        assert entry.action_params == {"num_workers": 2, "mcast_grp": a.job.mcast_group, "slot_base": 64,
                                       "num_slots": 16}
        addrs = [e for e in read_table_entries(controlled, "MyEgress.inc_worker_addr")
                 if e.match["hdr.inc.job_id"] == a.job_id]
        assert sorted(e.action_params["udp_port"] for e in addrs) == [40000, INC_PORT]
        with pytest.raises(PoolRefused) as info:
            pool.request([("10.0.0.5", INC_PORT), ("10.0.0.6", INC_PORT)], 1)
        assert info.value.reason == NO_ROOM
        assert job_ids(controlled) == {a.job_id, b.job_id}       # nothing installed for the refused job
        pool.release(a.job_id)
        assert job_ids(controlled) == {b.job_id}
        assert a.job.mcast_group not in read_multicast_groups(controlled)
        c = pool.request([("10.0.0.5", INC_PORT), ("10.0.0.6", INC_PORT)], 16)
        assert c.slot_base == 64                                 # a's range, given back
    finally:
        pool.close()
    assert job_ids(controlled) == set()


def test_workers_under_a_switch_the_pool_does_not_run_cannot_aggregate(
        controlled: Switch, p4sim_server: InProcessP4sim) -> None:
    """h7 hangs off s2, a plain switch that is not the pool's: s1 could aggregate only if s2
    forwarded the job to it, and the pool cannot install that on s2."""
    base = pool_topology(6, p4sim_server.port)
    s2 = dataclasses.replace(base.switches["s1"], name="s2", device_id=1, grpc_addr="127.0.0.1:1")
    topo = Topology({**base.hosts, "h7": HostSpec("h7", "10.0.0.7/24", "08:00:00:00:00:07")},
                    {**base.switches, "s2": s2},
                    [*base.links, LinkSpec(Endpoint("s1", 7), Endpoint("s2", 1)),
                     LinkSpec(Endpoint("h7"), Endpoint("s2", 2))])
    pool = JobPool(topo, [controlled], slots=32)
    try:
        for workers in ([("10.0.0.1", INC_PORT), ("10.0.0.7", INC_PORT)], [("10.0.0.1", INC_PORT), ("10.9.9.9", 1)]):
            with pytest.raises(PoolRefused) as info:
                pool.request(workers, 8)
            assert info.value.reason == CANNOT_AGGREGATE, info.value
        assert "h7 (under s2)" in str(pool_refusal(pool, [("10.0.0.1", INC_PORT), ("10.0.0.7", INC_PORT)]))
        assert job_ids(controlled) == set() and pool.pools["s1"].free == 32
    finally:
        pool.close()


def pool_refusal(pool: JobPool, workers: list[tuple[str, int]]) -> PoolRefused:
    with pytest.raises(PoolRefused) as info:
        pool.request(workers, 8)
    return info.value


def test_service_grants_refuses_and_takes_slots_back_when_the_job_disconnects(
        controlled: Switch, p4sim_server: InProcessP4sim, tmp_path) -> None:
    pool = JobPool(pool_topology(6, p4sim_server.port), [controlled], slots=16)
    try:
        for address in ("127.0.0.1:0", f"unix:{tmp_path / 'pool.sock'}"):
            with PoolServer(pool, address) as server:
                lease = pool_client.request_slots(server.address, [("10.0.0.1", INC_PORT), ("10.0.0.2", INC_PORT)], 16)
                assert lease.num_slots == 16 and job_ids(controlled) == {lease.job_id}
                with pytest.raises(pool_client.PoolRefused) as info:
                    pool_client.request_slots(server.address, [("10.0.0.3", INC_PORT)], 1)
                assert info.value.reason == pool_client.NO_ROOM and "0 of 16 free" in str(info.value)
                with pytest.raises(pool_client.PoolRefused) as info:
                    pool_client.request_slots(server.address, [("10.0.0.3", "not a port")], 1)
                assert info.value.reason == pool_client.BAD_REQUEST
                lease._conn.close()            # the job dies without releasing
                lease._conn = None
                again = wait_for_grant(server.address, [("10.0.0.3", INC_PORT)], 16)
                assert job_ids(controlled) == {again.job_id}
                again.release()
                assert job_ids(controlled) == set()
        with pytest.raises(pool_client.PoolRefused) as info:
            pool_client.request_slots(f"unix:{tmp_path / 'pool.sock'}", [("10.0.0.1", INC_PORT)], 1)
        assert info.value.reason == pool_client.UNREACHABLE
    finally:
        pool.close()


def wait_for_grant(address: str, workers: list[tuple[str, int]], slots: int) -> pool_client.Lease:
    """The service releases a dropped connection's slots as soon as it reads its end."""
    for _ in range(100):
        try:
            return pool_client.request_slots(address, workers, slots)
        except pool_client.PoolRefused as e:
            if e.reason != pool_client.NO_ROOM:
                raise
            threading.Event().wait(0.02)
    pytest.fail("the dropped connection's slots never came back")


@dataclasses.dataclass
class PoolJob:
    """One job of 2+ hosts on its own InProcessFabric (all sharing the test's switch)."""
    hosts: list[int]
    lease: pool_client.Lease | None = None
    refused: str | None = None


def fallback_workers(fabric: InProcessFabric, lease: pool_client.Lease | None, refusal: str | None,
                     ring_job: int, give_up_after: float = 30.0) -> list[FallbackAllReduce]:
    """Every rank of a job: INC through the lease's job, or on the ring from the start."""
    n = len(fabric.hosts)
    out = []
    for r in range(n):
        ring = RingConfig(ring_job, r, n, timeout=0.02)
        inc = None
        if lease is not None:
            config = JobConfig(lease.job_id, r, n, window=min(WINDOW, lease.num_slots), timeout=0.05,
                               give_up_after=give_up_after, max_rto=0.1)
            inc = Worker(config, HookedTransport(fabric.transport(r)))
        agent = FallbackAllReduce(inc, ring, fabric.peer_transport(r))
        if inc is None:
            agent.fall_back(f"the pool refused: {refusal}")
        out.append(agent)
    return out


def close_all(agents: list[FallbackAllReduce]) -> None:
    """`close` is collective (one more call): every rank closes at once, in its own thread."""
    with ThreadPoolExecutor(len(agents)) as threads:
        list(threads.map(FallbackAllReduce.close, agents))


def test_three_jobs_on_a_pool_for_two_the_third_falls_back_and_all_are_exact(
        controlled: Switch, p4sim_server: InProcessP4sim) -> None:
    pool = JobPool(pool_topology(6, p4sim_server.port), [controlled], slots=2 * WINDOW)
    jobs = [PoolJob([1, 2]), PoolJob([3, 4]), PoolJob([5, 6])]
    rng = np.random.default_rng(12)
    inputs = [[[rng.integers(-2**24, 2**24, LENGTH, dtype=np.int32) for _ in job.hosts] for _ in range(3)]
              for job in jobs]
    before = p4sim_server.switch.state.counters["MyIngress.contributions"].packets[0]
    try:
        with PoolServer(pool, "127.0.0.1:0") as server:
            for job in jobs:
                try:
                    job.lease = pool_client.request_slots(
                        server.address, [(f"10.0.0.{h}", INC_PORT) for h in job.hosts], WINDOW)
                except pool_client.PoolRefused as e:
                    job.refused = e.reason
            fabrics = [InProcessFabric(p4sim_server, [host(h) for h in job.hosts]) for job in jobs]
            try:
                agents = [fallback_workers(f, job.lease, job.refused, ring_job=i)
                          for i, (f, job) in enumerate(zip(fabrics, jobs))]
                with ThreadPoolExecutor(6) as threads:
                    futures = [[threads.submit(lambda a=a, j=j, r=r: [a.allreduce(call[r]) for call in inputs[j]])
                                for r, a in enumerate(job_agents)] for j, job_agents in enumerate(agents)]
                    results = [[f.result(timeout=HANG_GUARD_S) for f in fs] for fs in futures]
                close_all([a for job_agents in agents for a in job_agents])
            finally:
                for f in fabrics:
                    f.close()
            for job in jobs:
                if job.lease is not None:
                    job.lease.release()
    finally:
        pool.close()
    contributions = p4sim_server.switch.state.counters["MyIngress.contributions"].packets[0] - before
    log.info("refusals %s; fallbacks %s; %d contributions in the switch", [j.refused for j in jobs],
             [[len(a.events) for a in job_agents] for job_agents in agents], contributions)
    assert [j.refused for j in jobs] == [None, None, NO_ROOM]
    for j, per_rank in enumerate(results):
        for ranked in per_rank:
            for c, call in enumerate(inputs[j]):
                np.testing.assert_array_equal(ranked[c], np.sum(call, axis=0, dtype=np.int32))
    assert [[len(a.events) for a in job_agents] for job_agents in agents] == [[0, 0], [0, 0], [1, 1]]
    assert all(a.on_ring and a.events[0].reason.startswith("the pool refused") for a in agents[2])
    # The two granted jobs summed in the switch; the third never sent it a packet.
    assert contributions == 2 * 2 * (3 * LENGTH // INC_K + 1)      # + 1: the closing call


def run_through_a_switch_loss(agents: list[FallbackAllReduce], calls: list[list[np.ndarray]],
                              died: threading.Event, bring_back: Callable[[], None]) -> list[list[np.ndarray]]:
    """Each rank makes every call, then closes; once `died` is set, `bring_back` restarts the switch."""
    def rank(r: int) -> list[np.ndarray]:
        try:
            return [agents[r].allreduce(call[r]) for call in calls]
        finally:
            agents[r].close()

    with ThreadPoolExecutor(len(agents)) as threads:
        futures = [threads.submit(rank, r) for r in range(len(agents))]
        assert died.wait(HANG_GUARD_S)
        bring_back()
        return [f.result(timeout=HANG_GUARD_S) for f in futures]


def forwarding_only(server: InProcessP4sim, pipeline: Pipeline, topo: Topology) -> Callable[[], None]:
    """Restart the switch with forwarding only, as `controller watch` brings back a topology
    whose controller serves no pool: the pool's jobs are gone."""
    def bring_back() -> None:
        server.restart()
        with Switch("s1", server.addr) as again:
            push_pipeline(again, pipeline)
            install_forwarding(again, topo, "s1")
    return bring_back


def die_when_sent(server: InProcessP4sim, transport: HookedTransport, sends: int) -> threading.Event:
    """An event set when the switch died, at once, from the sending thread, as `transport`
    sent its `sends`-th packet: had the test's thread killed the switch on waking, the switch
    could have finished the call in the meantime (CI saw it)."""
    died = threading.Event()

    def die() -> None:
        if transport.sends == sends:
            server.die()
            died.set()
    transport.after_send = die
    return died


@dataclasses.dataclass
class SwitchLoss:
    """Four ranks of a pool job that made three calls while their switch died half-way through
    the second and was brought back."""
    grant: Grant
    calls: list[list[np.ndarray]]
    results: list[list[np.ndarray]]
    agents: list[FallbackAllReduce]
    events: list[FallbackEvent]

    def assert_exact(self) -> None:
        for ranked in self.results:
            for c, call in enumerate(self.calls):
                np.testing.assert_array_equal(ranked[c], np.sum(call, axis=0, dtype=np.int32))


def lose_the_switch(p4sim_server: InProcessP4sim, pool: JobPool, seed: int, give_up_after: float,
                    bring_back: Callable[[], None]) -> SwitchLoss:
    n = 4
    rng = np.random.default_rng(seed)
    calls = [[rng.integers(-2**24, 2**24, LENGTH, dtype=np.int32) for _ in range(n)] for _ in range(3)]
    events: list[FallbackEvent] = []
    grant = pool.request([(f"10.0.0.{h}", INC_PORT) for h in range(1, n + 1)], WINDOW)
    lease = pool_client.Lease(grant.job_id, grant.switch, grant.slot_base, grant.num_slots)
    with InProcessFabric(p4sim_server, [host(h) for h in range(1, n + 1)]) as fabric:
        agents = fallback_workers(fabric, lease, None, ring_job=1, give_up_after=give_up_after)
        for a in agents:
            a.on_fallback = events.append
        half_way = die_when_sent(p4sim_server, agents[0].inc.transport, LENGTH // INC_K * 3 // 2)
        results = run_through_a_switch_loss(agents, calls, half_way, bring_back)
    return SwitchLoss(grant, calls, results, agents, events)


def test_switch_killed_mid_call_finishes_on_the_ring_with_the_exact_sum(
        controlled: Switch, p4sim_server: InProcessP4sim, pipeline: Pipeline) -> None:
    """The switch dies half-way through the second of three calls and comes back with
    forwarding only: the call in flight is redone whole on the ring, the third runs on the
    ring, all exact."""
    topo = pool_topology(6, p4sim_server.port)
    pool = JobPool(topo, [controlled], slots=32)
    try:
        loss = lose_the_switch(p4sim_server, pool, 13, 0.5, forwarding_only(p4sim_server, pipeline, topo))
    finally:
        pool.close()
    log.info("fallbacks: %s", loss.events)
    loss.assert_exact()
    assert len(loss.events) == 4 and {e.call for e in loss.events} == {1}
    assert all("stopped answering mid-call" in e.reason for e in loss.events)
    assert all(a.on_ring for a in loss.agents)


def test_a_restarted_switch_gets_the_pools_jobs_back_from_watch_and_the_call_ends_on_it(
        controlled: Switch, p4sim_server: InProcessP4sim, pipeline: Pipeline) -> None:
    """The switch dies half-way through the second of three calls and restarts; `watch`
    reconciles it and hands it to the pool, which installs its job again: the workers send
    again what was lost and every call ends in the switch, exact, with no fallback."""
    topo = pool_topology(6, p4sim_server.port)
    pool = JobPool(topo, [controlled], slots=32)
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=([controlled], topo, pipeline, stop, 0.05),
                               kwargs={"reconciled": pool.reinstall}, name="watch")
    watcher.start()
    try:
        loss = lose_the_switch(p4sim_server, pool, 14, 60.0, p4sim_server.restart)
        assert loss.grant.job_id in job_ids(controlled)
    finally:
        stop.set()
        watcher.join()
        pool.close()
    loss.assert_exact()
    assert loss.events == [] and not any(a.on_ring for a in loss.agents)
    assert all(a.inc.last_stats.timeouts == 0 for a in loss.agents)     # the third call: the switch answered at once


def crash_on_the_last_ranks_result(controlled: Switch, p4sim_server: InProcessP4sim, pipeline: Pipeline,
                                   calls: list[list[np.ndarray]]) -> tuple[list, list[tuple[int, FallbackEvent]]]:
    """Four ranks of a pool job run `calls`; the switch dies as it sends call 0's result to the
    last rank. Returns every rank's results and the fallbacks, as (rank, event)."""
    n = len(calls[0])
    topo = pool_topology(6, p4sim_server.port)
    pool = JobPool(topo, [controlled], slots=32)
    events: list[tuple[int, FallbackEvent]] = []
    try:
        grant = pool.request([(f"10.0.0.{h}", INC_PORT) for h in range(1, n + 1)], WINDOW)
        lease = pool_client.Lease(grant.job_id, grant.switch, grant.slot_base, grant.num_slots)
        p4sim_server.crash_on_result_to = host(n).port
        with InProcessFabric(p4sim_server, [host(h) for h in range(1, n + 1)]) as fabric:
            agents = fallback_workers(fabric, lease, None, ring_job=1, give_up_after=0.5)
            for r, a in enumerate(agents):
                a.on_fallback = lambda e, r=r: events.append((r, e))
            results = run_through_a_switch_loss(agents, calls, p4sim_server.crashed,
                                                forwarding_only(p4sim_server, pipeline, topo))
    finally:
        pool.close()
    log.info("fallbacks: %s", events)
    return results, events


def test_rank_a_call_behind_when_the_switch_dies_is_redone_with_the_others(
        controlled: Switch, p4sim_server: InProcessP4sim, pipeline: Pipeline) -> None:
    """The switch dies sending call 0's only result: ranks 0-2 got it and move on to call 1,
    rank 3 did not. Rank 3 falls back at call 0, the others at call 1; they agree over the
    ring, ranks 0-2 redo call 0 with rank 3, then all do calls 1 and 2 on the ring."""
    rng = np.random.default_rng(14)
    calls = [[rng.integers(-2**24, 2**24, size, dtype=np.int32) for _ in range(4)]
             for size in (INC_K, LENGTH, LENGTH)]
    results, events = crash_on_the_last_ranks_result(controlled, p4sim_server, pipeline, calls)
    assert sorted((r, e.call) for r, e in events) == [(0, 1), (1, 1), (2, 1), (3, 0)]
    for ranked in results:
        for c, call in enumerate(calls):
            np.testing.assert_array_equal(ranked[c], np.sum(call, axis=0, dtype=np.int32))


def test_a_switch_gone_at_request_time_is_refused_as_unreachable_and_keeps_no_slots(
        controlled: Switch, p4sim_server: InProcessP4sim) -> None:
    pool = JobPool(pool_topology(6, p4sim_server.port), [controlled], slots=16)
    try:
        p4sim_server.kill()
        refusal = pool_refusal(pool, [("10.0.0.1", INC_PORT), ("10.0.0.2", INC_PORT)])
        assert refusal.reason == "unreachable" and "s1: cannot install job 100" in str(refusal)
        assert pool.grants == {} and pool.pools["s1"].free == 16
    finally:
        pool.close()


def test_pool_cli_refuses_a_topology_with_jobs_of_its_own(tmp_path) -> None:
    path = tmp_path / "topology.json"
    star(2).dump(path)
    done = subprocess.run([sys.executable, "-m", "controller", "pool", "--topo", str(path), "--listen", "127.0.0.1:0",
                           "--build-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "has jobs of its own (1)" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("op, dtype", [("sum", "int32"), ("sum", "float32"), ("sum", "float16"),
                                       ("sum", "bfloat16"), ("min", "int32"), ("min", "float32"),
                                       ("max", "int32"), ("max", "float32")])
def test_on_the_ring_every_op_and_dtype_the_switch_takes_is_right(switch, op: str, dtype: str) -> None:
    """What a job that fell back computes: min and max exactly, sums within the host bound."""
    hosts = [host(h) for h in range(1, 4)]
    install_forwarding_direct(switch, hosts)
    rng = np.random.default_rng(15)
    dt = np.dtype(numerics.BFLOAT16 if dtype == "bfloat16" else dtype)
    inputs = [(rng.integers(-2**20, 2**20, 3 * INC_K + 5) if dt == np.int32
               else rng.standard_normal(3 * INC_K + 5) * 100).astype(dt) for _ in hosts]
    with InProcessFabric(switch, hosts) as fabric:
        agents = [FallbackAllReduce(None, RingConfig(1, r, 3, timeout=0.02), fabric.peer_transport(r))
                  for r in range(3)]
        for a in agents:
            a.fall_back("test: the switch is not used")
        with ThreadPoolExecutor(3) as threads:
            results = list(threads.map(lambda r: agents[r].allreduce(inputs[r], op), range(3)))
        close_all(agents)
    for got in results:
        assert got.dtype == dt and got.shape == inputs[0].shape
        check = numerics.check_sum(got, inputs, summed_on_hosts=True, op=op)
        assert check.correct, check
    assert switch.state.counters["MyIngress.contributions"].packets[0] == 0


def test_a_rank_that_lost_the_last_calls_result_is_brought_through_by_the_others_close(
        controlled: Switch, p4sim_server: InProcessP4sim, pipeline: Pipeline) -> None:
    """The switch dies sending the only call's result: ranks 0-2 return from it, rank 3 has no
    result. The others' close (one more call) times out too, and they redo the call on the
    ring with rank 3: it gets the exact sum instead of an IncTimeoutError."""
    calls = [[np.full(INC_K, 10 * (r + 1), np.int32) for r in range(4)]]
    results, events = crash_on_the_last_ranks_result(controlled, p4sim_server, pipeline, calls)
    for ranked in results:
        np.testing.assert_array_equal(ranked[0], np.full(INC_K, 100, np.int32))
    assert sorted((r, e.call) for r, e in events) == [(0, 1), (1, 1), (2, 1), (3, 0)]


def test_dist_group_whose_hosts_no_pool_switch_serves_runs_on_the_ring(
        controlled: Switch, p4sim_server: InProcessP4sim, caplog: pytest.LogCaptureFixture) -> None:
    """hosts.dist ranks on loopback (no host of the topology) ask the real service: refused as
    cannot_aggregate, they agree on the ring; the exact sum, one fallback counted per rank."""
    pool = JobPool(pool_topology(6, p4sim_server.port), [controlled], slots=16)
    x = [np.arange(70, dtype=np.int32) * (r + 2) for r in range(2)]
    try:
        with PoolServer(pool, "127.0.0.1:0") as server:
            options = Options(aggregator=("127.0.0.1", free_port(socket.SOCK_DGRAM)), pool=server.address)
            results = on_every_rank(2, options, lambda g: g.all_reduce(x[g.rank]))
    finally:
        pool.close()
    for group, got in results:
        assert group.backend == "ring" and group.stats.fallbacks == 1
        np.testing.assert_array_equal(got, x[0] + x[1])
    assert "the slot pool refused the job (cannot_aggregate: no host has IP 127.0.0.1" in caplog.text
    assert job_ids(controlled) == set()
