"""A leaf-spine set up by the controller, end to end without Mininet: three in-process
p4sim switches, each behind its own P4Runtime server on loopback, cabled in Python by the
topology's links. Contributions from both leaves are summed at the spine and every
worker gets the sum (numpy is the oracle); routed IPv4 crosses leaf, spine and leaf."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.fabric import setup_switch
from controller.switch import Pipeline, Switch
from hosts.inc import AGG_IP, INC_PORT, OP_RESULT, Inc
from p4sim import Program
from p4sim import Switch as P4simSwitch
from p4sim.server import P4RuntimeService, serve
from topologies.spec import SwitchSpec, Topology, leaf_spine

GATEWAY_MAC = "08:00:00:00:01:00"   # leaf 1's, as topologies.spec.leaf_spine sets on its hosts
MAX_HOPS = 16


@dataclass
class Fabric:
    topo: Topology
    switches: dict[str, P4simSwitch]

    def send(self, host: str, frame: bytes) -> list[tuple[str, bytes]]:
        """Every frame that reaches a host after `host` sends `frame`, as (host, bytes)."""
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
                    step.append(cables[(node, out_port)] + (out,))
            in_flight = step
        pytest.fail(f"frames still in flight after {MAX_HOPS} hops")


@pytest.fixture
def fabric(pipeline: Pipeline) -> Iterator[Fabric]:
    """leaf_spine(2 leaves, 1 spine, 2 hosts per leaf), each switch served on a free port."""
    base = leaf_spine(2, 1, 2)
    switches, servers, specs = {}, [], {}
    try:
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
        yield Fabric(topo, switches)
    finally:
        for server in servers:
            server.stop(0).wait()


def contribution(topo: Topology, host: str, worker: int, elements: np.ndarray) -> bytes:
    h = topo.hosts[host]
    return bytes(Ether(src=h.mac, dst=GATEWAY_MAC) / IP(src=h.address, dst=AGG_IP) /
                 UDP(sport=INC_PORT, dport=INC_PORT) /
                 Inc(job_id=1, worker_id=worker, slot=0, seq=0, elements=elements.tolist()))


def test_contributions_from_both_leaves_are_summed_at_the_spine_and_sent_to_every_worker(fabric):
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
