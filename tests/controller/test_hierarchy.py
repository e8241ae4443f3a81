"""Hierarchical aggregation on a leaf-spine, packet by packet (docs/protocol.md, "Two levels"):
in-process p4sim switches set up by the controller over P4Runtime, as test_dataplane.py does.
Leaf s1 has h1, h2 (workers 0, 1), leaf s2 has h3, h4 (workers 2, 3), spine s3 sums the
leaves, which it knows as members 4 and 5. Each leaf sends one partial per slot up; a
partial, a result or a packet to a worker lost anywhere is recovered by the workers'
retransmissions alone; a worker cannot pose as the spine.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.allreduce import JOB_GROUP_BASE
from hosts.inc import (AGG_IP, COLL_REDUCE, FLAG_PARTIAL, FLAG_RESENT, FLAG_WINDOW_ACKS, INC_K, INC_PORT, OP_ACK,
                       OP_CONTRIB, OP_RESULT, OP_WINDOW_ACK, REDUCE_MAX, Inc)
from protocol import UP_GROUP
from tests.controller.test_dataplane import GATEWAY_MAC, Fabric, make_fabric  # noqa: F401 - a fixture
from topologies.spec import Topology, leaf_spine, three_tier

WORKERS = ("h1", "h2", "h3", "h4")
LEAF_OF = {"h1": "s1", "h2": "s1", "h3": "s2", "h4": "s2"}
SPINE, UPLINK, LEAF_MEMBER = "s3", 3, {"s1": 4, "s2": 5}
Arrivals = list[tuple[str, bytes]]
HOSTS = leaf_spine(2, 1, 2).hosts    # the fabric's hosts: each test's switches differ, its hosts do not


@pytest.fixture
def fabric(make_fabric: Callable[[Topology], Fabric]) -> Fabric:
    return make_fabric(leaf_spine(2, 1, 2))


def frame(fabric: Fabric, host: str, inc: Inc) -> bytes:
    h = fabric.topo.hosts[host]
    return bytes(Ether(src=h.mac, dst=GATEWAY_MAC) / IP(src=h.address, dst=AGG_IP) /
                 UDP(sport=INC_PORT, dport=INC_PORT) / inc)


def contribution(fabric: Fabric, host: str, elements: np.ndarray, seq: int = 0, **fields) -> bytes:
    return frame(fabric, host, Inc(job_id=1, worker_id=WORKERS.index(host), slot=seq % 4, seq=seq,
                                   elements=elements.tolist(), **fields))


def counter(fabric: Fabric, switch: str, name: str) -> int:
    return fabric.switches[switch].state.counters[f"MyIngress.{name}"].packets[0]


def inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {h: rng.integers(-2**20, 2**20, INC_K, dtype=np.int32) for h in WORKERS}


def check_results(arrivals: Arrivals, hosts: set[str], expected: np.ndarray, flags: int = 0) -> None:
    """Exactly `hosts` got the result, addressed to them, with these flags."""
    assert sorted(h for h, _ in arrivals) == sorted(hosts)
    for host, data in arrivals:
        pkt = Ether(data)
        assert (pkt[IP].src, pkt[IP].dst) == (AGG_IP, HOSTS[host].address) and pkt[Inc].opcode == OP_RESULT
        assert pkt[Inc].worker_id == WORKERS.index(host) and int(pkt[Inc].flags) == flags
        assert pkt[Inc].elements == expected.tolist()


def send_round(fabric: Fabric, data: dict[str, np.ndarray], seq: int = 0,
               lose: Callable[[str, int, bytes], bool] | None = None, **fields) -> Arrivals:
    """Every worker contributes, in worker order; what reached the hosts after the last."""
    for host in WORKERS[:-1]:
        assert fabric.send(host, contribution(fabric, host, data[host], seq, **fields), lose) == []
    return fabric.send(WORKERS[-1], contribution(fabric, WORKERS[-1], data[WORKERS[-1]], seq, **fields), lose)


def total(data: dict[str, np.ndarray]) -> np.ndarray:
    return np.sum(list(data.values()), axis=0, dtype=np.int32)


def test_each_leaf_sends_one_partial_per_slot_and_the_spine_counts_the_leaves_not_the_workers(fabric):
    rounds = 3
    for seq in range(rounds):
        data = inputs(seq)
        check_results(send_round(fabric, data, seq), set(WORKERS), total(data))
    assert counter(fabric, SPINE, "contributions") == 2 * rounds          # N_leaves per slot
    assert counter(fabric, SPINE, "results_multicast") == rounds
    for leaf in ("s1", "s2"):
        assert counter(fabric, leaf, "contributions") == 2 * rounds       # its own workers
        assert counter(fabric, leaf, "results_multicast") == 2 * rounds   # a partial up, a result down
        assert counter(fabric, leaf, "forwarded_to_aggregator") == 0


def test_a_leaf_replicates_each_way_through_its_own_group_so_no_copy_is_made_to_be_dropped(fabric):
    """A leaf's job group holds its workers only (results down), the group | UP_GROUP its uplink
    only (partials up): a round costs the leaf one egress pass per packet it sends, none that
    egress would drop. What the switch holds, and what a round then sends each way."""
    for k, leaf in enumerate(("s1", "s2")):
        groups = fabric.switches[leaf].state.multicast_groups
        assert sorted(groups[JOB_GROUP_BASE + 1]) == [(1, 2 * k), (2, 2 * k + 1)]
        assert list(groups[(JOB_GROUP_BASE + 1) | UP_GROUP]) == [(UPLINK, LEAF_MEMBER[leaf])]
    ups: Arrivals = []

    def catch_partials(switch: str, port: int, out: bytes) -> bool:
        if switch in LEAF_MEMBER and port == UPLINK:
            ups.append((switch, out))
            return True
        return False
    data = inputs(4)
    assert send_round(fabric, data, lose=catch_partials) == []
    # Each leaf sent exactly one partial up, its workers' sum, and nothing else went anywhere.
    assert sorted(s for s, _ in ups) == ["s1", "s2"]
    for leaf, out in ups:
        pkt = Ether(out)[Inc]
        mine = [h for h in WORKERS if LEAF_OF[h] == leaf]
        assert (pkt.opcode, pkt.worker_id, int(pkt.flags) & FLAG_PARTIAL) == (OP_CONTRIB, LEAF_MEMBER[leaf],
                                                                              FLAG_PARTIAL)
        assert pkt.elements == np.sum([data[h] for h in mine], axis=0, dtype=np.int32).tolist()


def test_the_partial_goes_up_as_the_leafs_contribution_and_the_result_comes_down_to_the_leaf(fabric):
    data = inputs(1)
    seen: dict[tuple[str, int], list[bytes]] = {}

    def tap(switch: str, port: int, out: bytes) -> bool:
        seen.setdefault((switch, port), []).append(out)
        return False

    send_round(fabric, data, lose=tap)
    (up,) = seen[("s1", UPLINK)]
    (down,) = seen[(SPINE, 1)]
    for raw, opcode, elements in ((up, OP_CONTRIB, data["h1"] + data["h2"]), (down, OP_RESULT, total(data))):
        pkt = Ether(raw)
        assert (pkt[IP].src, pkt[IP].dst, pkt[UDP].dport, pkt[IP].len) == (AGG_IP, AGG_IP, INC_PORT, 172)
        rebuilt = pkt[IP].copy()
        del rebuilt.chksum
        assert IP(bytes(rebuilt)).chksum == pkt[IP].chksum
        assert (pkt[Inc].opcode, pkt[Inc].worker_id, int(pkt[Inc].flags)) == (opcode, LEAF_MEMBER["s1"], FLAG_PARTIAL)
        assert pkt[Inc].elements == elements.tolist()


def test_a_lost_partial_goes_up_again_when_a_worker_of_that_leaf_retransmits(fabric):
    data = inputs(2)
    lost = []
    assert send_round(fabric, data, lose=lambda sw, port, out: (sw, port) == ("s1", UPLINK) and not lost.append(out)) == []
    assert len(lost) == 1
    check_results(fabric.send("h2", contribution(fabric, "h2", data["h2"])), set(WORKERS), total(data))
    assert counter(fabric, "s1", "results_resent") == 1
    assert counter(fabric, SPINE, "contributions") == 2


@pytest.mark.parametrize("where", ["spine to leaf", "leaf to worker"])
def test_a_result_lost_below_the_spine_is_asked_for_again_by_the_leaf(fabric, where):
    data = inputs(3)
    link = (SPINE, 2) if where == "spine to leaf" else ("s2", 2)    # towards s2, or s2 to h4
    arrived = send_round(fabric, data, lose=lambda sw, port, out: (sw, port) == link)
    missing = {"h3", "h4"} if where == "spine to leaf" else {"h4"}
    check_results(arrived, set(WORKERS) - missing, total(data))
    # h4 times out and sends its chunk again: s2 asks the spine, which answers from its stored
    # result (no new round), and s2 gives it to both its workers.
    again = fabric.send("h4", contribution(fabric, "h4", data["h4"]))
    check_results(again, {"h3", "h4"}, total(data), flags=FLAG_RESENT)
    assert (counter(fabric, "s2", "results_resent"), counter(fabric, SPINE, "results_resent")) == (1, 1)
    assert counter(fabric, SPINE, "contributions") == 2


def test_a_duplicate_below_a_leaf_is_dropped_there_and_never_reaches_the_spine(fabric):
    data = inputs(4)
    assert fabric.send("h1", contribution(fabric, "h1", data["h1"])) == []
    assert fabric.send("h1", contribution(fabric, "h1", data["h1"])) == []
    assert counter(fabric, "s1", "duplicate_drops") == 1
    check_results(send_round(fabric, data), set(WORKERS), total(data))
    assert counter(fabric, SPINE, "contributions") == 2


def test_min_and_max_combine_across_both_levels(fabric):
    data = inputs(5)
    expected = np.max(list(data.values()), axis=0)
    check_results(send_round(fabric, data, reduce_op=REDUCE_MAX), set(WORKERS), expected)


def test_a_worker_cannot_pose_as_the_spine(fabric):
    data = inputs(6)

    def from_above(host: str, worker: int) -> Arrivals:
        forged = Inc(job_id=1, worker_id=worker, slot=0, seq=0, opcode=OP_RESULT, flags=FLAG_PARTIAL,
                     elements=[7] * INC_K)
        return fabric.send(host, frame(fabric, host, forged))

    # Before s1's round is complete there is nothing to hand down (h2 has not contributed).
    assert fabric.send("h1", contribution(fabric, "h1", data["h1"])) == []
    assert from_above("h2", 1) == []
    assert counter(fabric, "s1", "stale_drops") == 1
    # Complete (its partial lost on the way up): h1 is in the round, so it is not the spine,
    # and the spine's id is admitted on the uplink alone.
    assert fabric.send("h2", contribution(fabric, "h2", data["h2"]), lose=lambda sw, port, out: sw == "s1") == []
    assert from_above("h1", 0) == [] and from_above("h1", LEAF_MEMBER["s1"]) == []
    assert counter(fabric, "s1", "spoofed_worker_drops") == 2
    # A switch that sums workers, not leaves, takes no result from anyone.
    spine_result = frame(fabric, "h1", Inc(job_id=1, worker_id=LEAF_MEMBER["s1"], opcode=OP_RESULT,
                                           flags=FLAG_PARTIAL, elements=[7] * INC_K))
    assert fabric.switches[SPINE].process(1, spine_result) == []
    assert counter(fabric, SPINE, "malformed_drops") == 1
    # The round still ends with the workers' sum alone.
    assert fabric.send("h3", contribution(fabric, "h3", data["h3"])) == []
    assert fabric.send("h4", contribution(fabric, "h4", data["h4"])) == []
    check_results(fabric.send("h1", contribution(fabric, "h1", data["h1"])), set(WORKERS), total(data))


def test_a_two_level_reduce_keeps_its_acks_and_refuses_window_acks(fabric):
    """Window ACKs are a flat job's (docs/protocol.md): a two-level Reduce's answers do not offer
    them, its per-chunk ACKs come down even to workers that asked for window ACKs, and a window
    ACK sent to a leaf is dropped as malformed."""
    data = inputs(8)
    arrivals = send_round(fabric, data, collective=COLL_REDUCE, root=1, flags=FLAG_WINDOW_ACKS)
    assert sorted(h for h, _ in arrivals) == sorted(WORKERS)
    for host, raw in arrivals:
        inc = Ether(raw)[Inc]
        assert inc.opcode == (OP_RESULT if host == "h2" else OP_ACK) and not int(inc.flags) & FLAG_WINDOW_ACKS
    ack = Inc(job_id=1, worker_id=1, opcode=OP_WINDOW_ACK, seq=1, count=1, collective=COLL_REDUCE, root=1,
              flags=FLAG_WINDOW_ACKS, elements=[0] * INC_K)
    assert fabric.send("h2", frame(fabric, "h2", ack)) == []
    assert counter(fabric, "s1", "malformed_drops") == 1


# Three tiers: leaves s1, s2 (pod 1, under s5) and s3, s4 (pod 2, under s6), core s7; workers
# h1..h8, two per leaf. The switches below the core are its members 8..13 in name order.
TIERS = three_tier(2, 2, 2)
TIER_WORKERS = tuple(TIERS.hosts)


def tier_contribution(host: str, elements: np.ndarray, seq: int = 0) -> bytes:
    h = TIERS.hosts[host]
    return bytes(Ether(src=h.mac, dst=GATEWAY_MAC) / IP(src=h.address, dst=AGG_IP) / UDP(sport=INC_PORT, dport=INC_PORT)
                 / Inc(job_id=1, worker_id=TIER_WORKERS.index(host), slot=seq % 4, seq=seq, elements=elements.tolist()))


def tier_round(fabric: Fabric, data: dict[str, np.ndarray], lose: Callable[[str, int, bytes], bool] | None = None
               ) -> Arrivals:
    for host in TIER_WORKERS[:-1]:
        assert fabric.send(host, tier_contribution(host, data[host]), lose) == []
    return fabric.send(TIER_WORKERS[-1], tier_contribution(TIER_WORKERS[-1], data[TIER_WORKERS[-1]]), lose)


def check_tier_results(arrivals: Arrivals, hosts: set[str], expected: np.ndarray, flags: int = 0) -> None:
    assert sorted(h for h, _ in arrivals) == sorted(hosts)
    for host, data in arrivals:
        pkt = Ether(data)
        assert (pkt[IP].dst, pkt[Inc].opcode, pkt[Inc].worker_id) == (TIERS.hosts[host].address, OP_RESULT,
                                                                      TIER_WORKERS.index(host))
        assert int(pkt[Inc].flags) == flags and pkt[Inc].elements == expected.tolist()


@pytest.fixture
def tiers(make_fabric: Callable[[Topology], Fabric]) -> Fabric:
    return make_fabric(TIERS)


def test_three_tiers_each_switch_sums_what_is_below_it_and_every_worker_gets_the_total(tiers):
    rng = np.random.default_rng(8)
    data = {h: rng.integers(-2**20, 2**20, INC_K, dtype=np.int32) for h in TIER_WORKERS}
    check_tier_results(tier_round(tiers, data), set(TIER_WORKERS), total(data))
    # Per slot each switch counts its two children: workers on a leaf, partials above.
    assert {s: counter(tiers, s, "contributions") for s in TIERS.switches} == dict.fromkeys(TIERS.switches, 2)


def test_three_tiers_a_result_lost_below_the_core_is_asked_for_again_through_the_middle_tier(tiers):
    rng = np.random.default_rng(9)
    data = {h: rng.integers(-2**20, 2**20, INC_K, dtype=np.int32) for h in TIER_WORKERS}
    arrived = tier_round(tiers, data, lose=lambda sw, port, out: (sw, port) == ("s7", 1))     # core to pod 1
    pod1 = {"h1", "h2", "h3", "h4"}
    check_tier_results(arrived, set(TIER_WORKERS) - pod1, total(data))
    # h1 sends its chunk again: s1 sends its partial up again, s5 asks the core, the core answers
    # from its stored result, and s5 and the leaves below it hand it down to all of pod 1.
    check_tier_results(tiers.send("h1", tier_contribution("h1", data["h1"])), pod1, total(data), flags=FLAG_RESENT)
    assert [counter(tiers, s, "results_resent") for s in ("s1", "s5", "s7")] == [1, 1, 1]
    assert counter(tiers, "s7", "contributions") == 2
