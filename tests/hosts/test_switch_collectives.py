"""allreduce.p4's other collectives on p4sim, packet by packet (docs/protocol.md, "The other
collectives"): Reduce delivers the data to its root and a header-only ACK to the others (or,
where the root acknowledges its chunks, nothing, and the root's window ACK to them),
Broadcast turns the root's chunk and the others' header-only JOINs into the root's chunk for
everyone, Barrier turns JOINs into ACKs; retransmissions get the same answer again; packets
that break the collective's rules are dropped as malformed and change no register."""
from __future__ import annotations

import numpy as np
import pytest
from p4sim import Switch
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from hosts.inc import (AGG_IP, AGG_MAC, COLL_ALLREDUCE, COLL_BARRIER, COLL_BROADCAST, COLL_REDUCE, FLAG_EAGER,
                       FLAG_OVERFLOW, FLAG_PARTIAL, FLAG_RESENT, FLAG_WINDOW_ACKS, INC_K,
                       INC_PORT, OP_ACK, OP_CONTRIB, OP_JOIN, OP_WINDOW_ACK, REDUCE_MAX, REDUCE_MIN, Inc, IncHeader,
                       unpack, unpack_header)
from tests.hosts.conftest import counter, registers
from tests.hosts.test_switch import JOB, check_result, contribution, send, sw  # noqa: F401 - sw is a fixture

N = len(JOB.hosts)


def join(worker: int, **fields) -> tuple[int, bytes]:
    """(ingress port, frame) of a header-only JOIN: 58 bytes, IPv4 length 44, UDP length 24."""
    return contribution(worker, [], opcode=OP_JOIN, **fields)


def check_ack(out: tuple[int, bytes], worker: int) -> IncHeader:
    """The frame is an ACK for `worker`: the INC header alone, lengths and checksum right."""
    port, frame = out
    h = JOB.hosts[worker]
    assert port == h.port and len(frame) == 14 + 20 + 8 + 16
    pkt = Ether(frame)
    assert (pkt.src, pkt.dst, pkt[IP].src, pkt[IP].dst) == (AGG_MAC, h.mac, AGG_IP, h.ip)
    assert (pkt[IP].len, pkt[UDP].len, pkt[UDP].sport) == (44, 24, INC_PORT)
    rebuilt = pkt[IP].copy()
    del rebuilt.chksum
    assert IP(bytes(rebuilt)).chksum == pkt[IP].chksum
    header = unpack_header(bytes(pkt[UDP].payload))
    assert header.opcode == OP_ACK and header.worker_id == worker and header.job_id == JOB.job_id
    return header


def test_a_join_is_the_header_alone() -> None:
    _, frame = join(0, collective=COLL_BARRIER)
    assert len(frame) == 58
    assert (Ether(frame)[IP].len, Ether(frame)[UDP].len) == (44, 24)


@pytest.mark.parametrize("root", range(N))
@pytest.mark.parametrize("reduce_op, reduce", [(0, np.sum), (REDUCE_MIN, np.min), (REDUCE_MAX, np.max)],
                         ids=["sum", "min", "max"])
def test_reduce_sends_the_result_to_the_root_and_acks_to_the_others(sw: Switch, root: int, reduce_op: int,
                                                                    reduce) -> None:
    rng = np.random.default_rng(root)
    data = [rng.integers(-10**6, 10**6, INC_K, dtype=np.int32) for _ in range(N)]
    for w in range(N - 1):
        assert send(sw, contribution(w, data[w], collective=COLL_REDUCE, root=root, reduce_op=reduce_op, seq=3,
                                     slot=3)) == []
    outs = send(sw, contribution(N - 1, data[N - 1], collective=COLL_REDUCE, root=root, reduce_op=reduce_op,
                                 seq=3, slot=3))
    assert sorted(p for p, _ in outs) == [h.port for h in JOB.hosts]
    for out in outs:
        worker = out[0] - 1
        if worker == root:
            header = check_result(out, worker, reduce(data, axis=0).astype(np.int32))
        else:
            header = check_ack(out, worker)
        # The results of a flat job's Reduce say that this switch takes window ACKs.
        assert (header.collective, header.root, header.seq, header.slot, header.flags) == \
            (COLL_REDUCE, root, 3, 3, FLAG_WINDOW_ACKS)
    assert counter(sw, "MyIngress.results_multicast") == 1


def test_reduce_acks_carry_overflow_and_need_so_every_worker_sees_them(sw: Switch) -> None:
    send(sw, contribution(0, [2**31 - 1] * INC_K, collective=COLL_REDUCE, root=2, need=4))
    send(sw, contribution(1, [1] * INC_K, collective=COLL_REDUCE, root=2, need=-2))
    outs = dict(send(sw, contribution(2, [0] * INC_K, collective=COLL_REDUCE, root=2, need=1)))
    for worker in (0, 1):
        header = check_ack((JOB.hosts[worker].port, outs[JOB.hosts[worker].port]), worker)
        assert header.flags == FLAG_OVERFLOW | FLAG_WINDOW_ACKS and header.need == 4
    header = check_result((JOB.hosts[2].port, outs[JOB.hosts[2].port]), 2, np.full(INC_K, -2**31, np.int32))
    assert header.flags == FLAG_OVERFLOW | FLAG_WINDOW_ACKS and header.need == 4


def test_reduce_retransmissions_get_an_ack_or_the_result_again(sw: Switch) -> None:
    data = [np.arange(INC_K, dtype=np.int32) * (w + 1) for w in range(N)]
    for w in range(N):
        send(sw, contribution(w, data[w], collective=COLL_REDUCE, root=1))
    ack = send(sw, contribution(0, data[0], collective=COLL_REDUCE, root=1))
    assert len(ack) == 1 and check_ack(ack[0], 0).flags == FLAG_RESENT | FLAG_WINDOW_ACKS
    again = send(sw, contribution(1, data[1], collective=COLL_REDUCE, root=1))
    assert len(again) == 1
    assert check_result(again[0], 1, np.sum(data, axis=0, dtype=np.int32)).flags == FLAG_RESENT | FLAG_WINDOW_ACKS
    assert counter(sw, "MyIngress.results_resent") == 2


def window_ack(sender: int, codes: list[int], seq: int, **fields) -> tuple[int, bytes]:
    """(ingress port, frame) of `sender`'s window ACK, as the root, for the len(codes) items before seq."""
    fields = {"collective": COLL_REDUCE, "root": sender, "flags": FLAG_WINDOW_ACKS, **fields}
    return contribution(sender, codes, opcode=OP_WINDOW_ACK, seq=seq, count=len(codes), **fields)


def test_a_round_its_root_acknowledges_goes_to_the_root_alone(sw: Switch) -> None:
    """FLAG_WINDOW_ACKS on the contributions: the result to the root, no ACK to the others; a
    retransmission is still answered, to its sender alone."""
    data = [np.full(INC_K, w + 1, np.int32) for w in range(N)]
    outs = []
    for w in range(N):
        outs = send(sw, contribution(w, data[w], collective=COLL_REDUCE, root=2, flags=FLAG_WINDOW_ACKS, seq=5,
                                     slot=1))
    assert len(outs) == 1
    header = check_result(outs[0], 2, np.sum(data, axis=0, dtype=np.int32))
    assert (header.seq, header.flags) == (5, FLAG_WINDOW_ACKS)
    assert counter(sw, "MyIngress.results_multicast") == 1
    again = send(sw, contribution(0, data[0], collective=COLL_REDUCE, root=2, flags=FLAG_WINDOW_ACKS, seq=5,
                                  slot=1))
    assert len(again) == 1 and check_ack(again[0], 0).flags == FLAG_RESENT | FLAG_WINDOW_ACKS


def test_a_roots_window_ack_goes_to_the_others_with_its_elements_and_touches_no_slot(sw: Switch) -> None:
    before = registers(sw)
    codes = [FLAG_OVERFLOW << 8 | 4, 0x20 << 8 | (-3 & 0xFF), 7]
    outs = send(sw, window_ack(1, codes, seq=40))
    assert sorted(p for p, _ in outs) == [JOB.hosts[w].port for w in range(N) if w != 1]
    for port, frame in outs:
        worker = port - 1
        pkt = Ether(frame)
        h = JOB.hosts[worker]
        assert (pkt.src, pkt.dst, pkt[IP].src, pkt[IP].dst, pkt[UDP].dport) == \
            (AGG_MAC, h.mac, AGG_IP, h.ip, h.udp_port)
        assert (pkt[IP].len, pkt[UDP].len) == (20 + 8 + 16 + 4 * INC_K, 8 + 16 + 4 * INC_K)
        header, elements = unpack(bytes(pkt[UDP].payload))
        assert (header.opcode, header.worker_id, header.root, header.seq, header.count, header.collective) == \
            (OP_WINDOW_ACK, worker, 1, 40, 3, COLL_REDUCE)
        assert list(elements[:4]) == codes + [0]
    assert registers(sw) == before
    assert counter(sw, "MyIngress.results_multicast") == 0 and counter(sw, "MyIngress.malformed_drops") == 0


@pytest.mark.parametrize("fields", [{"root": 2}, {"collective": COLL_ALLREDUCE}, {"flags": FLAG_PARTIAL}],
                         ids=["not-the-root", "not-a-reduce", "partial"])
def test_a_window_ack_that_is_not_a_roots_own_reduce_ack_is_malformed(sw: Switch, fields: dict) -> None:
    assert send(sw, window_ack(1, [0], seq=9, **fields)) == []
    assert counter(sw, "MyIngress.malformed_drops") == 1


@pytest.mark.parametrize("root_position", range(N))
def test_broadcast_gives_everyone_the_roots_chunk_bit_for_bit(sw: Switch, root_position: int) -> None:
    """The root's chunk arrives first, in the middle or last; the others send only JOINs."""
    root = 1
    rng = np.random.default_rng(root_position)
    chunk = rng.integers(-2**31, 2**31, INC_K, dtype=np.int64).astype(np.int32)
    chunk[:2] = [-2**31, 2**31 - 1]
    others = [w for w in range(N) if w != root]
    order = others[:root_position] + [root] + others[root_position:]
    outs = []
    for w in order:
        assert outs == []
        packet = contribution(w, chunk, collective=COLL_BROADCAST, root=root) if w == root \
            else join(w, collective=COLL_BROADCAST, root=root)
        outs = send(sw, packet)
    assert sorted(p for p, _ in outs) == [h.port for h in JOB.hosts]
    for out in outs:
        header = check_result(out, out[0] - 1, chunk)
        assert header.flags == FLAG_EAGER and len(out[1]) == 186     # this switch runs eager rounds
    assert counter(sw, "MyIngress.contributions") == N


def test_a_lost_broadcast_result_is_answered_to_the_join_again(sw: Switch) -> None:
    send(sw, join(0, collective=COLL_BROADCAST, root=2))
    send(sw, join(1, collective=COLL_BROADCAST, root=2))
    assert send(sw, join(1, collective=COLL_BROADCAST, root=2)) == []     # not complete: a duplicate
    assert counter(sw, "MyIngress.duplicate_drops") == 1
    send(sw, contribution(2, [7] * INC_K, collective=COLL_BROADCAST, root=2))
    again = send(sw, join(0, collective=COLL_BROADCAST, root=2))
    assert len(again) == 1
    assert check_result(again[0], 0, np.full(INC_K, 7, np.int32)).flags == FLAG_RESENT | FLAG_EAGER


def test_an_eager_broadcast_round_is_the_roots_chunk_alone_multicast_at_once(sw: Switch) -> None:
    chunk = np.arange(-16, INC_K - 16, dtype=np.int32)
    outs = send(sw, contribution(2, chunk, collective=COLL_BROADCAST, root=2, flags=FLAG_EAGER, seq=9, slot=1))
    assert sorted(p for p, _ in outs) == [h.port for h in JOB.hosts]
    for out in outs:
        assert check_result(out, out[0] - 1, chunk).flags == FLAG_EAGER
    assert [counter(sw, f"MyIngress.{c}") for c in ("contributions", "results_multicast")] == [1, 1]


def test_an_eager_join_is_answered_from_the_stored_round_and_never_starts_one(sw: Switch) -> None:
    """A worker that lost an eager round's result asks again with a JOIN: before the root's
    chunk came it gets nothing and nothing changes; after, the stored chunk, to it alone."""
    ask = join(0, collective=COLL_BROADCAST, root=2, flags=FLAG_EAGER, seq=4, slot=2)
    before = registers(sw)
    assert send(sw, ask) == []
    assert registers(sw) == before and counter(sw, "MyIngress.stale_drops") == 1
    send(sw, contribution(2, [5] * INC_K, collective=COLL_BROADCAST, root=2, flags=FLAG_EAGER, seq=4, slot=2))
    again = send(sw, ask)
    assert len(again) == 1
    assert check_result(again[0], 0, np.full(INC_K, 5, np.int32)).flags == FLAG_RESENT | FLAG_EAGER
    assert counter(sw, "MyIngress.contributions") == 1 and counter(sw, "MyIngress.results_resent") == 1
    again = send(sw, contribution(2, [5] * INC_K, collective=COLL_BROADCAST, root=2, flags=FLAG_EAGER, seq=4,
                                  slot=2))
    assert len(again) == 1 and again[0][0] == JOB.hosts[2].port      # the root's lost result, to it alone


def test_barrier_completes_with_an_ack_to_everyone_once_all_joined(sw: Switch) -> None:
    for w in range(N - 1):
        assert send(sw, join(w, collective=COLL_BARRIER, seq=5, slot=1)) == []
    outs = send(sw, join(N - 1, collective=COLL_BARRIER, seq=5, slot=1))
    assert sorted(p for p, _ in outs) == [h.port for h in JOB.hosts]
    for out in outs:
        header = check_ack(out, out[0] - 1)
        assert (header.collective, header.seq, header.slot, header.flags) == (COLL_BARRIER, 5, 1, FLAG_EAGER)
    again = send(sw, join(0, collective=COLL_BARRIER, seq=5, slot=1))
    assert len(again) == 1 and check_ack(again[0], 0).flags == FLAG_RESENT | FLAG_EAGER


def _with_opcode(packet: tuple[int, bytes], opcode: int) -> tuple[int, bytes]:
    """The same frame (lengths and all) with another INC opcode."""
    port, frame = packet
    return port, frame[:42] + bytes([(frame[42] & 0xF0) | opcode]) + frame[43:]


BAD = {
    "JOIN with a contribution's length": lambda: _with_opcode(contribution(0, [1] * INC_K, collective=COLL_BARRIER),
                                                              OP_JOIN),
    "CONTRIB with a JOIN's length": lambda: _with_opcode(join(0, collective=COLL_BARRIER), OP_CONTRIB),
    "JOIN in an AllReduce": lambda: join(0),
    "JOIN in a Reduce": lambda: join(0, collective=COLL_REDUCE),
    "CONTRIB from a Broadcast's non-root": lambda: contribution(0, [1] * INC_K, collective=COLL_BROADCAST, root=1),
    "JOIN from a Broadcast's root": lambda: join(1, collective=COLL_BROADCAST, root=1),
    "CONTRIB in a Barrier": lambda: contribution(0, [1] * INC_K, collective=COLL_BARRIER),
    "Broadcast with min": lambda: join(0, collective=COLL_BROADCAST, root=1, reduce_op=REDUCE_MIN),
    "unknown collective": lambda: contribution(0, [1] * INC_K, collective=4),
    "root beyond the job's workers": lambda: contribution(0, [1] * INC_K, collective=COLL_REDUCE, root=N),
    "eager AllReduce": lambda: contribution(0, [1] * INC_K, flags=FLAG_EAGER),
    "eager Reduce": lambda: contribution(0, [1] * INC_K, collective=COLL_REDUCE, flags=FLAG_EAGER),
    "eager Barrier": lambda: join(0, collective=COLL_BARRIER, flags=FLAG_EAGER),
    "eager partial": lambda: contribution(1, [1] * INC_K, collective=COLL_BROADCAST, root=1,
                                          flags=FLAG_EAGER | FLAG_PARTIAL),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_packet_against_its_collectives_rules_is_malformed(sw: Switch, case: str) -> None:
    send(sw, contribution(1, [2] * INC_K))     # a round in progress, so there is state to protect
    before = registers(sw)
    assert send(sw, BAD[case]()) == []
    assert registers(sw) == before
    assert counter(sw, "MyIngress.malformed_drops") == 1


def test_an_ack_on_its_way_to_a_worker_is_forwarded_unchanged(sw: Switch) -> None:
    """As a leaf passes its spine's ACKs on: the parser reads no elements after an ACK."""
    h = JOB.hosts[1]
    frame = bytes(Ether(src=AGG_MAC, dst=h.mac) / IP(src=AGG_IP, dst=h.ip) / UDP(sport=INC_PORT, dport=INC_PORT)
                  / Inc(opcode=OP_ACK, job_id=JOB.job_id, collective=COLL_BARRIER))
    before = registers(sw)
    assert sw.process(JOB.hosts[2].port, frame) == [(h.port, frame)]
    assert registers(sw) == before
