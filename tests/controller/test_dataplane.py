"""Fabrics set up by the controller, end to end without Mininet: in-process p4sim switches,
each behind its own P4Runtime server on loopback, cabled in Python by the topology's links.
A leaf-spine sums both leaves' workers (on two levels or at the spine) and routes IPv4
across; two jobs on one star stay apart. numpy and Scapy-built packets are the oracles."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.control import read_counters
from controller.fabric import setup_switch
from controller.switch import Pipeline, Switch
from hosts.inc import AGG_IP, COLL_BARRIER, COLL_BROADCAST, COLL_REDUCE, INC_PORT, OP_ACK, OP_JOIN, OP_RESULT, Inc
from p4sim import Program
from p4sim import Switch as P4simSwitch
from p4sim.runtime.p4runtime import P4RuntimeService, serve
from topologies.spec import JobSpec, SwitchSpec, Topology, leaf_spine, star

GATEWAY_MAC = "08:00:00:00:01:00"   # leaf 1's, as topologies.spec.leaf_spine sets on its hosts
MAX_HOPS = 16


@dataclass
class Fabric:
    topo: Topology
    switches: dict[str, P4simSwitch]

    def send(self, host: str, frame: bytes,
             lose: Callable[[str, int, bytes], bool] | None = None) -> list[tuple[str, bytes]]:
        """Every frame that reaches a host after `host` sends `frame`, as (host, bytes); a
        frame a switch sends out of a port is lost where `lose(switch, port, frame)` says so."""
        cables = {}
        for link in self.topo.links:
            cables[(link.a.node, link.a.port)] = (link.b.node, link.b.port)
            cables[(link.b.node, link.b.port)] = (link.a.node, link.a.port)
        arrived, in_flight = [], [cables[(host, None)] + (frame,)]
        for _ in range(MAX_HOPS):
            if not in_flight:
                return arrived
            step = []
            for node, port, data in in_flight:
                if node in self.topo.hosts:
                    arrived.append((node, data))
                    continue
                for out_port, out in self.switches[node].process(port, data):
                    if lose is None or not lose(node, out_port, out):
                        step.append(cables[(node, out_port)] + (out,))
            in_flight = step
        pytest.fail(f"frames still in flight after {MAX_HOPS} hops")


@pytest.fixture
def make_fabric(pipeline: Pipeline) -> Iterator[Callable[[Topology], Fabric]]:
    """Serve each switch of a topology on a free port and let the controller set it up."""
    servers = []

    def make(base: Topology) -> Fabric:
        switches, specs = {}, {}
        for name, spec in base.switches.items():
            switches[name] = P4simSwitch(None)
            server, port = serve(P4RuntimeService(switches[name], Program.from_device_config,
                                                  device_id=spec.device_id), "127.0.0.1:0")
            servers.append(server)
            specs[name] = SwitchSpec(name, spec.device_id, f"127.0.0.1:{port}", spec.thrift_port)
        topo = Topology(base.hosts, specs, base.links, base.jobs)
        for name, spec in specs.items():
            with Switch(name, spec.grpc_addr, spec.device_id) as sw:
                setup_switch(sw, topo, pipeline)
        return Fabric(topo, switches)

    try:
        yield make
    finally:
        for server in servers:
            server.stop(0).wait()


@pytest.fixture(params=[True, False], ids=["hierarchical", "flat"])
def fabric(request: pytest.FixtureRequest, make_fabric: Callable[[Topology], Fabric]) -> Fabric:
    """leaf_spine(2 leaves, 1 spine, 2 hosts per leaf), its job summed on both levels or by the spine."""
    return make_fabric(leaf_spine(2, 1, 2, hierarchical=request.param))


def contribution(topo: Topology, host: str, worker: int, elements: np.ndarray, job_id: int = 1) -> bytes:
    h = topo.hosts[host]
    return bytes(Ether(src=h.mac, dst=GATEWAY_MAC) / IP(src=h.address, dst=AGG_IP) /
                 UDP(sport=INC_PORT, dport=INC_PORT) /
                 Inc(job_id=job_id, worker_id=worker, slot=0, seq=0, elements=elements.tolist()))


def test_contributions_from_both_leaves_are_summed_and_sent_to_every_worker(fabric):
    topo = fabric.topo
    workers = list(topo.jobs[0].workers)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-1000, 1000, 32, dtype=np.int32) for _ in workers]
    for w, host in enumerate(workers[:-1]):
        assert fabric.send(host, contribution(topo, host, w, inputs[w])) == []   # kept in registers
    results = fabric.send(workers[-1], contribution(topo, workers[-1], len(workers) - 1, inputs[-1]))
    assert sorted(host for host, _ in results) == sorted(workers)
    total = np.sum(inputs, axis=0)
    for host, data in results:
        pkt = Ether(data)
        assert (pkt[Ether].dst, pkt[IP].dst) == (topo.hosts[host].mac, topo.hosts[host].address)
        assert pkt[Inc].opcode == OP_RESULT
        assert pkt[Inc].elements == total.tolist()
        assert pkt[Inc].worker_id == workers.index(host)


def test_reduce_broadcast_and_barrier_cross_the_leaves_as_joins_and_acks(fabric):
    """The other collectives across both leaves: each worker gets what it would on one switch
    (flat: the leaves pass JOINs up and ACKs down; hierarchical: partials and results carry data
    between the switches, and each leaf decides what its workers get)."""
    topo = fabric.topo
    workers = list(topo.jobs[0].workers)
    n, root = len(workers), len(workers) - 1            # the root sits under the other leaf than worker 0
    data = np.arange(32, dtype=np.int32) - 7

    def send_all(make: Callable[[int], Inc]) -> dict[str, Inc]:
        arrived = []
        for w, host in enumerate(workers):
            h = topo.hosts[host]
            arrived = fabric.send(host, bytes(Ether(src=h.mac, dst=GATEWAY_MAC) / IP(src=h.address, dst=AGG_IP)
                                              / UDP(sport=INC_PORT, dport=INC_PORT) / make(w)))
            assert w == n - 1 or arrived == []
        assert sorted(host for host, _ in arrived) == sorted(workers)
        return {host: Ether(frame)[Inc] for host, frame in arrived}

    reduced = send_all(lambda w: Inc(job_id=1, worker_id=w, seq=0, collective=COLL_REDUCE, root=root,
                                     elements=(data * (w + 1)).tolist()))
    broadcast = send_all(lambda w: Inc(job_id=1, worker_id=w, seq=1, slot=1, collective=COLL_BROADCAST, root=root,
                                       **({"elements": data.tolist()} if w == root else {"opcode": OP_JOIN})))
    barrier = send_all(lambda w: Inc(job_id=1, worker_id=w, seq=2, slot=2, opcode=OP_JOIN, collective=COLL_BARRIER))
    for w, host in enumerate(workers):
        if w == root:
            assert reduced[host].opcode == OP_RESULT and reduced[host].elements == (data * 10).tolist()
        else:
            assert reduced[host].opcode == OP_ACK and reduced[host].elements is None
        assert broadcast[host].opcode == OP_RESULT and broadcast[host].elements == data.tolist()
        assert barrier[host].opcode == OP_ACK and barrier[host].elements is None


def test_routed_ipv4_crosses_leaf_spine_leaf_to_the_right_host(fabric):
    h1, h3 = fabric.topo.hosts["h1"], fabric.topo.hosts["h3"]
    sent = Ether(src=h1.mac, dst=GATEWAY_MAC) / IP(src=h1.address, dst=h3.address, ttl=64) / UDP(sport=1, dport=2)
    (arrival,) = fabric.send("h1", bytes(sent))
    host, data = arrival
    got = Ether(data)
    assert host == "h3"
    assert (got[Ether].dst, got[IP].dst, got[IP].ttl) == (h3.mac, h3.address, 62)   # two routed hops
    expected = IP(bytes(sent[IP]))
    expected.ttl, expected.chksum = 62, None
    assert bytes(got[IP]) == bytes(IP(bytes(expected)))   # checksum recomputed, rest unchanged


def test_two_jobs_on_disjoint_hosts_sum_apart_and_a_forged_job_id_is_dropped(make_fabric):
    base = star(4)
    fab = make_fabric(Topology(base.hosts, base.switches, base.links,
                               [JobSpec(1, ("h1", "h2")), JobSpec(2, ("h3", "h4"))]))
    inputs = {h: np.full(32, i + 1, dtype=np.int32) for i, h in enumerate(("h1", "h2", "h3", "h4"))}
    # Both jobs use their slot 0 at once; their slot ranges keep the sums apart.
    assert fab.send("h1", contribution(fab.topo, "h1", 0, inputs["h1"], job_id=1)) == []
    assert fab.send("h3", contribution(fab.topo, "h3", 0, inputs["h3"], job_id=2)) == []
    # h4 (job 2) claims to be job 1's worker 1: wrong port for that worker, dropped.
    assert fab.send("h4", contribution(fab.topo, "h4", 1, inputs["h4"], job_id=1)) == []
    job1 = fab.send("h2", contribution(fab.topo, "h2", 1, inputs["h2"], job_id=1))
    job2 = fab.send("h4", contribution(fab.topo, "h4", 1, inputs["h4"], job_id=2))
    assert sorted(h for h, _ in job1) == ["h1", "h2"] and sorted(h for h, _ in job2) == ["h3", "h4"]
    assert all(Ether(d)[Inc].elements == (inputs["h1"] + inputs["h2"]).tolist() for _, d in job1)
    assert all(Ether(d)[Inc].elements == (inputs["h3"] + inputs["h4"]).tolist() for _, d in job2)
    with Switch("s1", fab.topo.switches["s1"].grpc_addr) as sw:
        (packets, _), = read_counters(sw)["MyIngress.spoofed_worker_drops"]
        assert packets == 1
