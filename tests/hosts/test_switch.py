"""allreduce.p4 on p4sim, packet by packet: sums against numpy, results addressed to each
worker, stored results for retransmissions, and every bad packet dropped, counted and
leaving the registers as they were."""
from __future__ import annotations

import numpy as np
import pytest
from p4sim import Switch
from p4sim.state import TableEntry
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether

from hosts.inc import (AGG_IP, AGG_MAC, FLAG_OVERFLOW, FLAG_RESENT, FLAG_RETRANSMIT, INC_K, INC_PORT, INC_VERSION, OP_CONTRIB,
                       OP_RESULT, POOL_SIZE, REDUCE_MAX, REDUCE_MIN, Inc, IncHeader, pack, unpack)
from tests.hosts.conftest import Job, counter, host, install_forwarding, install_job, registers

HOSTS = [host(i) for i in range(1, 5)]
JOB = Job(job_id=7, hosts=tuple(HOSTS[:3]), slot_base=10, num_slots=4)


@pytest.fixture
def sw(switch: Switch) -> Switch:
    install_forwarding(switch, HOSTS)
    install_job(switch, JOB)
    return switch


def contribution(worker: int, elements, *, slot: int = 0, seq: int = 0, pool_version: int = 0, job: Job = JOB,
                 port_host=None, **fields) -> tuple[int, bytes]:
    """(ingress port, frame) of worker `worker`'s contribution, built with Scapy."""
    h = port_host or job.hosts[worker]
    inc = Inc(job_id=job.job_id, worker_id=worker, slot=slot, pool_version=pool_version, seq=seq,
              elements=[int(e) for e in elements], **fields)
    frame = Ether(src=h.mac, dst=AGG_MAC) / IP(src=h.ip, dst=AGG_IP) / UDP(sport=INC_PORT, dport=INC_PORT) / inc
    return h.port, bytes(frame)


def send(sw: Switch, packet: tuple[int, bytes]) -> list[tuple[int, bytes]]:
    return sw.process(*packet)


def check_result(out: tuple[int, bytes], worker: int, expected: np.ndarray, job: Job = JOB) -> IncHeader:
    """The frame is a result for `worker`, from the aggregator, with correct checksums and sums."""
    port, frame = out
    h = job.hosts[worker]
    assert port == h.port
    pkt = Ether(frame)
    assert (pkt.src, pkt.dst) == (AGG_MAC, h.mac)
    assert (pkt[IP].src, pkt[IP].dst, pkt[UDP].sport, pkt[UDP].dport) == (AGG_IP, h.ip, INC_PORT, h.udp_port)
    rebuilt = pkt[IP].copy()
    del rebuilt.chksum
    assert IP(bytes(rebuilt)).chksum == pkt[IP].chksum
    header, elements = unpack(bytes(pkt[UDP].payload))
    assert header.opcode == OP_RESULT and header.worker_id == worker and header.job_id == job.job_id
    np.testing.assert_array_equal(elements[:len(expected)], expected)
    return header


def test_last_contribution_multicasts_the_sum_to_every_worker(sw: Switch) -> None:
    rng = np.random.default_rng(1)
    data = [rng.integers(-10**6, 10**6, INC_K, dtype=np.int32) for _ in range(3)]
    assert send(sw, contribution(0, data[0], slot=2, seq=2)) == []
    assert send(sw, contribution(1, data[1], slot=2, seq=2)) == []
    outs = send(sw, contribution(2, data[2], slot=2, seq=2))
    assert sorted(p for p, _ in outs) == [1, 2, 3]
    for out in outs:
        header = check_result(out, out[0] - 1, np.sum(data, axis=0, dtype=np.int32))
        assert (header.slot, header.seq, header.flags) == (2, 2, 0)
    assert counter(sw, "MyIngress.contributions") == 3
    assert counter(sw, "MyIngress.results_multicast") == 1


@pytest.mark.parametrize("retransmitted", [0, 1, 2])
def test_a_round_completed_by_or_including_a_retransmission_says_so_in_its_result(sw: Switch,
                                                                                  retransmitted: int) -> None:
    """The worker marks a contribution it sends again; the round's result carries the mark to
    every worker, so none takes the round's time for a round trip (docs/protocol.md, Timers)."""
    data = [np.full(INC_K, w + 1, dtype=np.int32) for w in range(3)]
    outs = []
    for w in range(3):
        outs = send(sw, contribution(w, data[w], flags=FLAG_RETRANSMIT if w == retransmitted else 0))
    assert len(outs) == 3
    for out in outs:
        assert check_result(out, out[0] - 1, np.full(INC_K, 6, np.int32)).flags == FLAG_RETRANSMIT


def test_retransmitted_contribution_gets_stored_result_alone(sw: Switch) -> None:
    data = [np.arange(INC_K, dtype=np.int32) * (w + 1) for w in range(3)]
    for w in range(3):
        send(sw, contribution(w, data[w]))
    outs = send(sw, contribution(1, data[1]))
    assert len(outs) == 1
    header = check_result(outs[0], 1, np.sum(data, axis=0, dtype=np.int32))
    assert header.flags == FLAG_RESENT
    assert counter(sw, "MyIngress.results_resent") == 1


def test_duplicate_before_completion_is_dropped_and_not_added(sw: Switch) -> None:
    send(sw, contribution(0, [5] * INC_K))
    before = registers(sw)
    assert send(sw, contribution(0, [5] * INC_K)) == []
    assert registers(sw) == before
    assert counter(sw, "MyIngress.duplicate_drops") == 1
    send(sw, contribution(1, [1] * INC_K))
    outs = send(sw, contribution(2, [1] * INC_K))
    check_result(outs[0], 0, np.full(INC_K, 7, np.int32))


def test_signed_overflow_sets_the_flag_in_the_result(sw: Switch) -> None:
    big = np.full(INC_K, 0, np.int32)
    big[5] = 2**31 - 1
    send(sw, contribution(0, big))
    send(sw, contribution(1, [0] * INC_K))
    header = check_result(send(sw, contribution(2, [0] * 5 + [1] + [0] * 26))[0], 0,
                          np.where(np.arange(INC_K) == 5, -2**31, 0).astype(np.int32))
    assert header.flags & FLAG_OVERFLOW


def test_negative_sums_without_overflow_keep_the_flag_clear(sw: Switch) -> None:
    send(sw, contribution(0, [-2**30] * INC_K))
    send(sw, contribution(1, [-2**30 + 1] * INC_K))
    header = check_result(send(sw, contribution(2, [-1] * INC_K))[0], 0, np.full(INC_K, -2**31, np.int32))
    assert header.flags == 0


@pytest.mark.parametrize("reduce_op, reduce", [(REDUCE_MIN, np.min), (REDUCE_MAX, np.max)], ids=["min", "max"])
def test_min_and_max_keep_the_signed_extreme_and_never_flag_overflow(sw: Switch, reduce_op: int, reduce) -> None:
    rng = np.random.default_rng(reduce_op)
    data = [rng.integers(-2**31, 2**31, INC_K, dtype=np.int64).astype(np.int32) for _ in range(3)]
    data[0][:4] = [-2**31, 2**31 - 1, -1, 0]          # the edges: a sum would wrap here
    data[1][:4] = [2**31 - 1, -2**31, 0, -1]
    send(sw, contribution(0, data[0], reduce_op=reduce_op))
    send(sw, contribution(1, data[1], reduce_op=reduce_op))
    outs = send(sw, contribution(2, data[2], reduce_op=reduce_op))
    assert len(outs) == 3
    for out in outs:
        header = check_result(out, out[0] - 1, reduce(data, axis=0))
        assert header.flags == 0 and header.reduce_op == reduce_op


def test_result_carries_the_max_need_and_the_or_of_worker_flags(sw: Switch) -> None:
    send(sw, contribution(0, [0] * INC_K, need=-3))
    send(sw, contribution(1, [0] * INC_K, need=5, flags=FLAG_OVERFLOW))
    header = check_result(send(sw, contribution(2, [0] * INC_K, need=-100))[0], 0, np.zeros(INC_K, np.int32))
    assert header.need == 5 and header.flags == FLAG_OVERFLOW


def test_versions_keep_the_previous_result_for_stragglers(sw: Switch) -> None:
    for w in range(3):
        send(sw, contribution(w, [w + 1] * INC_K, seq=0, pool_version=0))
    # workers 0 and 1 move on to the next use of slot 0 (other version) ...
    send(sw, contribution(0, [10] * INC_K, seq=4, pool_version=1))
    send(sw, contribution(1, [20] * INC_K, seq=4, pool_version=1))
    # ... while worker 2, which lost the first result, still gets it.
    check_result(send(sw, contribution(2, [3] * INC_K, seq=0, pool_version=0))[0], 2, np.full(INC_K, 6, np.int32))
    outs = send(sw, contribution(2, [30] * INC_K, seq=4, pool_version=1))
    check_result(outs[0], 0, np.full(INC_K, 60, np.int32))


def test_late_duplicate_of_an_old_round_changes_nothing(sw: Switch) -> None:
    for seq, value in ((0, 1), (8, 2)):        # two rounds of slot 0, version 0
        for w in range(3):
            send(sw, contribution(w, [value] * INC_K, seq=seq))
    before = registers(sw)
    assert send(sw, contribution(1, [1] * INC_K, seq=0)) == []
    assert registers(sw) == before
    assert counter(sw, "MyIngress.stale_drops") == 1


def test_single_worker_job_answers_at_once(switch: Switch) -> None:
    job = Job(job_id=9, hosts=(HOSTS[3],), slot_base=100, num_slots=1, mcast_grp=109)
    install_job(switch, job)
    outs = send(switch, contribution(0, [4] * 3, job=job))
    check_result(outs[0], 0, np.array([4, 4, 4], np.int32), job=job)


def _bad(frame_edit) -> tuple[int, bytes]:
    port, frame = contribution(0, [1] * INC_K)
    return port, frame_edit(frame)


def _with_inc(**fields) -> tuple[int, bytes]:
    return contribution(0, [1] * INC_K, **fields)


OTHER_JOB = Job(job_id=8, hosts=(HOSTS[3],), slot_base=20, num_slots=4, mcast_grp=108)

BAD_PACKETS = {
    "unknown job": ("MyIngress.unknown_job_drops", lambda: contribution(0, [1] * INC_K, job=Job(5, JOB.hosts))),
    "worker on the wrong port": ("MyIngress.spoofed_worker_drops",
                                 lambda: contribution(1, [1] * INC_K, port_host=HOSTS[0])),
    "another job's id from this port": ("MyIngress.spoofed_worker_drops",
                                        lambda: contribution(0, [1] * INC_K, job=OTHER_JOB, port_host=HOSTS[0])),
    "worker id not in the job": ("MyIngress.spoofed_worker_drops", lambda: contribution(3, [1] * INC_K, port_host=HOSTS[0])),
    "slot out of the job's range": ("MyIngress.slot_range_drops", lambda: _with_inc(slot=JOB.num_slots)),
    "truncated elements": ("MyIngress.malformed_drops", lambda: _bad(lambda f: f[:-1])),
    "truncated header": ("MyIngress.malformed_drops", lambda: _bad(lambda f: f[:42 + 10])),
    "no INC header at all": ("MyIngress.malformed_drops", lambda: _bad(lambda f: f[:42])),
    "count above K": ("MyIngress.malformed_drops", lambda: _with_inc(count=INC_K + 1)),
    "count zero": ("MyIngress.malformed_drops", lambda: _with_inc(count=0)),
    "result opcode from a host": ("MyIngress.malformed_drops", lambda: _with_inc(opcode=OP_RESULT)),
    "unknown reduce_op": ("MyIngress.malformed_drops", lambda: _with_inc(reduce_op=REDUCE_MAX + 1)),
    "bad IPv4 checksum": ("MyIngress.malformed_drops", lambda: _bad(lambda f: f[:24] + bytes([f[24] ^ 1]) + f[25:])),
    "unknown protocol version": ("MyIngress.bad_version_drops", lambda: _with_inc(version=INC_VERSION + 1)),
    "ping to the aggregator": ("MyIngress.malformed_drops", lambda: (1, bytes(
        Ether(src=HOSTS[0].mac, dst=AGG_MAC) / IP(src=HOSTS[0].ip, dst=AGG_IP) / ICMP()))),
}


@pytest.mark.parametrize("case", list(BAD_PACKETS))
def test_bad_packet_is_dropped_counted_and_changes_no_register(sw: Switch, case: str) -> None:
    install_job(sw, OTHER_JOB)
    counter_name, make = BAD_PACKETS[case]
    send(sw, contribution(1, [2] * INC_K))     # a round in progress, so there is state to protect
    before = registers(sw)
    assert send(sw, make()) == []
    assert registers(sw) == before
    assert counter(sw, counter_name) == 1
    drops = [n for n in sw.state.counters if n.endswith("_drops") and n != counter_name]
    assert all(counter(sw, n) == 0 for n in drops)


def test_fast_packer_frames_are_aggregated_like_scapy_ones(sw: Switch) -> None:
    outs = []
    for w in range(3):
        port, frame = contribution(w, [w] * INC_K)
        header = IncHeader(opcode=OP_CONTRIB, job_id=JOB.job_id, worker_id=w, count=INC_K, slot=0,
                           pool_version=0, seq=0)
        outs = sw.process(port, frame[:42] + pack(header, np.full(INC_K, w, np.int32)))
    check_result(outs[0], 0, np.full(INC_K, 3, np.int32))


def test_arp_for_the_aggregator_is_answered_by_the_switch(sw: Switch) -> None:
    h = HOSTS[1]
    request = Ether(src=h.mac, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=h.mac, psrc=h.ip, pdst=AGG_IP)
    outs = sw.process(h.port, bytes(request))
    assert len(outs) == 1 and outs[0][0] == h.port
    expected = Ether(src=AGG_MAC, dst=h.mac) / ARP(op=2, hwsrc=AGG_MAC, psrc=AGG_IP, hwdst=h.mac, pdst=h.ip)
    assert outs[0][1] == bytes(expected)


def test_broadcast_floods_to_every_other_port(sw: Switch) -> None:
    request = bytes(Ether(src=HOSTS[0].mac, dst="ff:ff:ff:ff:ff:ff")
                    / ARP(op=1, hwsrc=HOSTS[0].mac, psrc=HOSTS[0].ip, pdst=HOSTS[2].ip))
    outs = sw.process(1, request)
    assert sorted(p for p, _ in outs) == [2, 3, 4]
    assert all(frame == request for _, frame in outs)


def test_ping_between_hosts_is_forwarded_unchanged(sw: Switch) -> None:
    ping = bytes(Ether(src=HOSTS[0].mac, dst=HOSTS[3].mac) / IP(src=HOSTS[0].ip, dst=HOSTS[3].ip) / ICMP())
    assert sw.process(1, ping) == [(4, ping)]


def test_inc_traffic_between_hosts_is_not_aggregated(sw: Switch) -> None:
    """A result travelling to a host (e.g. through a leaf) is only forwarded."""
    frame = bytes(Ether(src=AGG_MAC, dst=HOSTS[1].mac) / IP(src=AGG_IP, dst=HOSTS[1].ip)
                  / UDP(sport=INC_PORT, dport=INC_PORT) / Inc(opcode=OP_RESULT, job_id=JOB.job_id))
    before = registers(sw)
    assert sw.process(3, frame) == [(2, frame)]
    assert registers(sw) == before


def test_slot_ranges_of_two_jobs_use_disjoint_registers(sw: Switch) -> None:
    install_job(sw, OTHER_JOB)
    send(sw, contribution(0, [1] * INC_K, slot=1, pool_version=1, job=OTHER_JOB))
    send(sw, contribution(0, [1] * INC_K, slot=1, pool_version=1))
    seen = sw.state.registers["MyIngress.slot_seen"].values
    used = {i for i, v in enumerate(seen) if v}
    assert used == {POOL_SIZE + OTHER_JOB.slot_base + 1, POOL_SIZE + JOB.slot_base + 1}


def test_job_aggregated_elsewhere_is_passed_on_unchanged(switch: Switch) -> None:
    install_forwarding(switch, HOSTS)
    switch.state.tables["MyIngress.inc_job"].insert(
        TableEntry((("exact", JOB.job_id),), "MyIngress.forward_to_aggregator", (4,)))
    port, frame = contribution(0, [1] * INC_K)
    before = registers(switch)
    assert switch.process(port, frame) == [(4, frame)]
    assert registers(switch) == before
    assert counter(switch, "MyIngress.forwarded_to_aggregator") == 1
