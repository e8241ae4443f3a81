"""The INC wire format: the Scapy layer round-trips and the hot-path packer produces
exactly the bytes the Scapy layer builds."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from hosts.inc import (AGG_IP, COLL_BARRIER, COLL_BROADCAST, COLL_REDUCE, OP_ACK, OP_JOIN, FLAG_OVERFLOW, FLAG_RESENT, HEADER_SIZE, INC_K, INC_PORT, OP_CONTRIB,
                       OP_RESULT, REDUCE_MAX, REDUCE_MIN, MAX_ELEMENTS, MAX_WINDOW, Inc, IncFormatError,
                       IncHeader, data_elements, inc_layer, pack, payload_size, unpack)
from hosts.agent import JobConfig

HEADERS = [
    IncHeader(opcode=OP_CONTRIB, job_id=1, worker_id=0, count=1, slot=0, pool_version=0, seq=0),
    IncHeader(opcode=OP_RESULT, job_id=0xFFFF, worker_id=31, count=INC_K, slot=MAX_WINDOW, pool_version=1,
              seq=0xFFFFFFFF, flags=FLAG_OVERFLOW | FLAG_RESENT, exponent=-128, need=127),
    IncHeader(opcode=OP_CONTRIB, job_id=7, worker_id=3, count=17, slot=300, pool_version=1, seq=123456,
              exponent=5, need=-3),
    IncHeader(opcode=OP_CONTRIB, job_id=2, worker_id=1, count=INC_K, slot=1, pool_version=0, seq=9,
              reduce_op=REDUCE_MIN),
    IncHeader(opcode=OP_RESULT, job_id=2, worker_id=1, count=INC_K, slot=1, pool_version=0, seq=9,
              reduce_op=REDUCE_MAX),
    IncHeader(opcode=OP_CONTRIB, job_id=3, worker_id=30, count=INC_K, slot=2, pool_version=1, seq=10,
              collective=COLL_REDUCE, root=31),
]
HEADER_ONLY_HEADERS = [
    IncHeader(opcode=OP_JOIN, job_id=4, worker_id=2, count=1, slot=5, pool_version=1, seq=77,
              collective=COLL_BROADCAST, root=3),
    IncHeader(opcode=OP_ACK, job_id=4, worker_id=2, count=1, slot=5, pool_version=0, seq=78, flags=FLAG_OVERFLOW,
              need=-7, collective=COLL_BARRIER),
]


def _scapy(h: IncHeader, elements: list[int], layer: type[Inc] = Inc) -> Inc:
    return layer(version=h.version, opcode=h.opcode, flags=h.flags, job_id=h.job_id, worker_id=h.worker_id,
               count=h.count, pool_version=h.pool_version, slot=h.slot, seq=h.seq, exponent=h.exponent,
               need=h.need, reduce_op=h.reduce_op, collective=h.collective, root=h.root, elements=elements)


@pytest.mark.parametrize("header", HEADERS)
def test_fast_packer_matches_scapy_bytes(header: IncHeader) -> None:
    rng = np.random.default_rng(header.seq)
    elements = rng.integers(-2**31, 2**31, size=header.count, dtype=np.int64).astype(np.int32)
    assert pack(header, elements) == bytes(_scapy(header, elements.tolist()))


@pytest.mark.parametrize("header", HEADERS)
def test_unpack_reads_what_scapy_built(header: IncHeader) -> None:
    elements = list(range(-5, -5 + header.count))
    got_header, got_elements = unpack(bytes(_scapy(header, elements)))
    assert got_header == header
    assert got_elements.tolist() == elements + [0] * (INC_K - header.count)


def test_layer_is_bound_to_the_inc_port_both_ways() -> None:
    request = Ether() / IP(dst=AGG_IP) / UDP(sport=40000, dport=INC_PORT) / Inc(job_id=9, elements=[1, 2])
    reply = Ether() / IP() / UDP(sport=INC_PORT, dport=40000) / Inc(opcode=OP_RESULT, job_id=9)
    for pkt in (request, reply):
        parsed = Ether(bytes(pkt))
        assert parsed.haslayer(Inc)
        assert parsed[Inc].job_id == 9
    assert Ether(bytes(request))[Inc].elements[:3] == [1, 2, 0]


def test_layer_fills_count_and_pads_elements_to_a_whole_block() -> None:
    raw = bytes(inc_layer(352)(elements=[-1, 2, 3]))
    assert len(raw) == HEADER_SIZE + 4 * 32                 # one block of 32, not K = 352
    assert int.from_bytes(raw[5:8], "big") >> 12 == 3      # the 12-bit count
    assert raw[HEADER_SIZE:HEADER_SIZE + 12] == bytes.fromhex("ffffffff0000000200000003")
    assert raw[HEADER_SIZE + 12:] == bytes(4 * (32 - 3))


@pytest.mark.parametrize(("count", "blocks"), [(1, 1), (32, 1), (33, 2), (320, 10), (321, 11), (352, 11)])
def test_a_packet_carries_its_count_s_whole_blocks_both_ways(count: int, blocks: int) -> None:
    header = replace(HEADERS[0], count=count)
    values = np.arange(1, count + 1, dtype=np.int32)
    raw = pack(header, values, 352)
    assert len(raw) == HEADER_SIZE + 4 * 32 * blocks == HEADER_SIZE + 4 * data_elements(count, 352)
    assert raw == bytes(_scapy(header, values.tolist(), inc_layer(352)))
    got_header, got = unpack(raw, 352)
    assert got_header == header and got.tolist() == values.tolist() + [0] * (32 * blocks - count)
    with pytest.raises(IncFormatError):                      # a block short of its count
        unpack(raw[:-4 * 32], 352)
    with pytest.raises(IncFormatError):                      # more than K
        unpack(raw + bytes(4 * 352), 352)


def test_more_than_k_elements_are_refused() -> None:
    with pytest.raises(ValueError):
        pack(HEADERS[0], np.zeros(INC_K + 1, np.int32))
    with pytest.raises(ValueError):
        bytes(Inc(elements=[0] * (INC_K + 1)))


def test_unpack_refuses_a_truncated_payload() -> None:
    with pytest.raises(IncFormatError):
        unpack(pack(HEADERS[0], np.ones(1, np.int32))[:-1])


@pytest.mark.parametrize("header", HEADER_ONLY_HEADERS)
def test_join_and_ack_are_the_header_alone_both_ways(header: IncHeader) -> None:
    raw = pack(header, np.zeros(0, np.int32))
    assert len(raw) == HEADER_SIZE and raw == bytes(_scapy(header, []))
    assert raw[15] == (header.collective << 5) | header.root
    got_header, got_elements = unpack(raw)
    assert got_header == header and got_elements.size == 0
    dissected = Inc(raw)
    assert (dissected.collective, dissected.root, dissected.elements) == (header.collective, header.root, None)


def test_a_join_with_elements_and_a_short_contribution_are_refused() -> None:
    with pytest.raises(ValueError):
        pack(HEADER_ONLY_HEADERS[0], np.ones(1, np.int32))
    with pytest.raises(IncFormatError):
        unpack(pack(HEADERS[0], np.ones(1, np.int32))[:HEADER_SIZE])
    with pytest.raises(IncFormatError):
        unpack(pack(HEADER_ONLY_HEADERS[0], np.zeros(0, np.int32))[:-1])


@pytest.mark.parametrize("k", [1, 7, 64, MAX_ELEMENTS])
def test_a_job_s_own_k_packs_as_its_scapy_layer_builds_and_reads_back(k: int) -> None:
    header = IncHeader(opcode=OP_CONTRIB, job_id=5, worker_id=2, count=min(k, 5), slot=3, pool_version=1, seq=77,
                       exponent=-4, need=9)
    elements = list(range(-2, -2 + header.count))
    raw = pack(header, np.array(elements, np.int32), k)
    carried = min(k, 32)                                   # the count's one block, at most K
    assert len(raw) == HEADER_SIZE + 4 * carried
    assert raw == bytes(_scapy(header, elements, inc_layer(k)))
    got_header, got_elements = unpack(raw, k)
    assert got_header == header and got_elements.tolist() == elements + [0] * (carried - header.count)
    dissected = Ether(bytes(Ether() / IP() / UDP(sport=40000, dport=INC_PORT) / Raw(raw)))[Inc]   # the bound layer
    assert dissected.elements == got_elements.tolist() and dissected.count == header.count
    with pytest.raises(ValueError, match=f"at most {k} elements"):
        pack(header, np.zeros(k + 1, np.int32), k)
    with pytest.raises(IncFormatError):
        unpack(raw[:-1], k)
    full = replace(header, count=k)                        # every count the job can have fits the field
    raw = pack(full, np.arange(k, dtype=np.int32), k)
    assert len(raw) == payload_size(k) == HEADER_SIZE + 4 * k
    assert raw == bytes(_scapy(full, list(range(k)), inc_layer(k))) and unpack(raw, k)[0] == full


def test_elements_per_packet_beyond_the_count_field_is_refused() -> None:
    for k in (0, MAX_ELEMENTS + 1):
        with pytest.raises(ValueError, match="elements per packet must be 1..4064"):
            inc_layer(k)


def test_a_window_beyond_the_slot_field_is_refused() -> None:
    assert JobConfig(1, 0, 2, window=MAX_WINDOW).window == MAX_WINDOW     # the widest slot still packs (HEADERS)
    for window in (0, MAX_WINDOW + 1):
        with pytest.raises(ValueError, match=f"window must be 1..{MAX_WINDOW} slots"):
            JobConfig(1, 0, 2, window=window)
