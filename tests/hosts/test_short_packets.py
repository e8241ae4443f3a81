"""allreduce.p4 built for K = 96 (three blocks of 32) on both of p4sim's backends: a packet
carries its count's blocks, ceil(count / 32), and the result has as many; a packet whose
lengths, blocks and count disagree is dropped as malformed and changes nothing; a round whose
packets carried different counts sums as if each had carried all K (docs/protocol.md)."""
from __future__ import annotations

import numpy as np
import pytest
from p4sim import Program, Switch, compile_file
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from hosts.inc import AGG_IP, AGG_MAC, HEADER_SIZE, INC_PORT, OP_JOIN, OP_RESULT, inc_layer, unpack
from tests.hosts.conftest import P4_PROGRAM, Job, counter, host, install_forwarding, install_job, registers

K = 96
HOSTS = [host(i) for i in range(1, 4)]
JOB = Job(job_id=3, hosts=tuple(HOSTS), slot_base=0, num_slots=8)
Inc96 = inc_layer(K)


@pytest.fixture(scope="module")
def program96() -> Program:
    return compile_file(str(P4_PROGRAM), defines=(f"INC_K={K}",))


@pytest.fixture(params=["python", "c"])
def sw(request: pytest.FixtureRequest, program96: Program) -> Switch:
    switch = Switch(program96, backend=request.param)
    assert getattr(switch, "backend", "python") == request.param, "the C backend fell back to Python"
    install_forwarding(switch, HOSTS)
    install_job(switch, JOB)
    return switch


def frame(worker: int, elements, *, count: int | None = None, seq: int = 0, slot: int = 0, **fields) -> bytes:
    """Worker `worker`'s packet to the aggregator, its lengths those of what it carries."""
    h = HOSTS[worker]
    inc = Inc96(job_id=JOB.job_id, worker_id=worker, slot=slot, seq=seq, count=count,
                elements=[int(e) for e in elements], **fields)
    return bytes(Ether(src=h.mac, dst=AGG_MAC) / IP(src=h.ip, dst=AGG_IP) / UDP(sport=INC_PORT, dport=INC_PORT) / inc)


def send(sw: Switch, worker: int, data: bytes) -> list[tuple[int, bytes]]:
    return sw.process(HOSTS[worker].port, data)


def results(outs: list[tuple[int, bytes]]) -> list[tuple[int, np.ndarray, int]]:
    """(port, elements, IPv4 length) of each result, after checking its IPv4 and UDP lengths agree."""
    got = []
    for port, data in outs:
        pkt = Ether(data)
        payload = bytes(pkt[UDP].payload)
        assert pkt[IP].len == 20 + 8 + len(payload) and pkt[UDP].len == 8 + len(payload)
        header, elements = unpack(payload, K)
        assert header.opcode == OP_RESULT
        got.append((port, elements, pkt[IP].len))
    return got


@pytest.mark.parametrize(("count", "blocks"), [(1, 1), (32, 1), (33, 2), (70, 3), (96, 3)])
def test_a_round_s_result_carries_its_count_s_blocks(sw: Switch, count: int, blocks: int) -> None:
    rng = np.random.default_rng(count)
    data = [rng.integers(-10**6, 10**6, count, dtype=np.int32) for _ in HOSTS]
    for w in range(len(HOSTS)):
        data_frame = frame(w, data[w])
        assert len(data_frame) == 14 + 20 + 8 + HEADER_SIZE + 128 * blocks
        outs = send(sw, w, data_frame)
    got = results(outs)
    assert sorted(p for p, _, _ in got) == [h.port for h in HOSTS]
    expected = np.zeros(32 * blocks, np.int32)
    expected[:count] = np.sum(data, axis=0, dtype=np.int32)
    for _, elements, ipv4_len in got:
        assert ipv4_len == 20 + 8 + HEADER_SIZE + 128 * blocks
        np.testing.assert_array_equal(elements, expected)


def test_a_retransmission_gets_the_stored_result_in_its_own_blocks(sw: Switch) -> None:
    data = [np.arange(40, dtype=np.int32) * (w + 1) for w in range(len(HOSTS))]
    for w in range(len(HOSTS)):
        send(sw, w, frame(w, data[w]))
    outs = send(sw, 1, frame(1, data[1]))
    [(port, elements, ipv4_len)] = results(outs)
    assert port == HOSTS[1].port and ipv4_len == 20 + 8 + HEADER_SIZE + 128 * 2
    np.testing.assert_array_equal(elements[:40], np.sum(data, axis=0, dtype=np.int32))
    assert counter(sw, "MyIngress.results_resent") == 1


def test_a_join_stands_for_its_count_s_zeros(sw: Switch) -> None:
    """A Broadcast: the root's 40 elements and two JOINs of count 40 make a two-block result."""
    root_data = np.arange(1, 41, dtype=np.int32)
    assert send(sw, 1, frame(1, [], count=40, opcode=OP_JOIN, collective="broadcast", root=0)) == []
    assert send(sw, 2, frame(2, [], count=40, opcode=OP_JOIN, collective="broadcast", root=0)) == []
    got = results(send(sw, 0, frame(0, root_data, collective="broadcast", root=0)))
    assert len(got) == 3
    for _, elements, ipv4_len in got:
        assert ipv4_len == 20 + 8 + HEADER_SIZE + 128 * 2
        np.testing.assert_array_equal(elements[:40], root_data)
        assert not elements[40:].any()


@pytest.mark.parametrize(("count", "cut_blocks", "why"), [
    (40, 1, "a count of two blocks, one block carried"),
    (5, -1, "a count of one block, two carried"),
    (K + 1, 0, "more blocks than K / 32"),
])
def test_blocks_that_disagree_with_the_count_are_malformed(sw: Switch, count: int, cut_blocks: int, why: str) -> None:
    """The lengths say what the packet carries, so only the parser and the count can tell."""
    carried = -(-count // 32) - cut_blocks
    header = bytes(Inc96(job_id=JOB.job_id, worker_id=0, count=count))[:HEADER_SIZE]
    payload = header + np.full(32 * carried, 7, ">i4").tobytes()
    h = HOSTS[0]
    data = bytes(Ether(src=h.mac, dst=AGG_MAC) / IP(src=h.ip, dst=AGG_IP) / UDP(sport=INC_PORT, dport=INC_PORT)
                 / payload)
    before = registers(sw)
    assert send(sw, 0, data) == [], why
    assert counter(sw, "MyIngress.malformed_drops") == 1, why
    assert registers(sw) == before, why


def test_a_truncated_packet_is_malformed_though_its_lengths_and_count_agree(sw: Switch) -> None:
    """The frame lost its last block on the way; only the parser's PacketTooShort says so."""
    whole = frame(0, np.arange(40, dtype=np.int32))
    before = registers(sw)
    assert send(sw, 0, whole[:-128]) == []
    assert counter(sw, "MyIngress.malformed_drops") == 1
    assert registers(sw) == before


def test_a_round_of_mixed_counts_sums_as_if_each_carried_all_k(sw: Switch) -> None:
    """The slot's earlier round left sums in all three blocks; the next round's first packet
    carries one block, and the others two: the second block holds their sum alone."""
    for w in range(len(HOSTS)):
        send(sw, w, frame(w, np.full(K, 1000, np.int32), seq=0))
    send(sw, 0, frame(0, np.full(5, 1, np.int32), seq=8))
    send(sw, 1, frame(1, np.full(40, 2, np.int32), seq=8))
    got = results(send(sw, 2, frame(2, np.full(40, 3, np.int32), seq=8)))
    expected = np.zeros(64, np.int32)
    expected[:40] = 5
    expected[:5] += 1
    for _, elements, _ in got:
        np.testing.assert_array_equal(elements, expected)
