"""The INC wire format (docs/protocol.md): a Scapy layer for dumps, tests and tools, and
a precompiled packer/unpacker for the hot path that the tests prove byte-identical to it.
The protocol's constants come from protocol/.
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import numpy as np
from scapy.fields import (BitEnumField, BitField, ByteEnumField, ByteField, ConditionalField, FieldListField,
                          FlagsField, ShortField, SignedByteField, SignedIntField, IntField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

# The protocol's numbers live in protocol/ (shared with the controller); re-exported here,
# where the packet code and its users have always found them.
from protocol import (AGG_IP, AGG_MAC, COLL_ALLREDUCE, COLL_BARRIER, COLL_BROADCAST,  # noqa: F401
                      COLL_REDUCE, COLLECTIVES, DEFAULT_ELEMENTS_PER_PACKET, ELEMENTS_PER_BLOCK, data_elements,
                      payload_size,
                      MAX_ELEMENTS_PER_PACKET, FLAG_ACK_NOW, FLAG_EAGER, FLAG_OVERFLOW, FLAG_PARTIAL, FLAG_WINDOW_ACKS,
                      FLAG_RESENT, FLAG_RETRANSMIT, HEADER_ONLY, HEADER_SIZE, INC_PORT, INC_VERSION,
                      MAX_WORKERS, OP_ACK, OP_CONTRIB, OP_JOIN, OP_RESULT, OP_RING, OP_RING_ACK, OP_WINDOW_ACK, OPCODES,
                      WINDOW_ACK_ANSWERED,
                      POOL_SIZE, REDUCE_MAX, REDUCE_MIN, REDUCE_OPS, REDUCE_SUM, RING_PORT)

INC_K = DEFAULT_ELEMENTS_PER_PACKET   # elements per packet
PAYLOAD_SIZE = payload_size(INC_K)    # the UDP payload of a packet with K elements of data


# The header's field widths bound a job. The layout itself is written out in three places that
# tests prove byte-identical: the Scapy layer (Inc), pack_header/unpack_header here, and
# header_pack/header_unpack in hosts/engine/net.c.
MAX_ELEMENTS = MAX_ELEMENTS_PER_PACKET   # the header's count has 12 bits: K per job is 1..4064
MAX_WINDOW = (1 << 11) - 1               # the header's slot has 11 bits: a job's slots (its window) are 1..2047
# Chunks in flight for a job that has a star's switch to itself (`make bench`, the demos): all of
# the program's 512 slots, at K = 352 704 KiB. Where ranks outnumber the cores a rank waits its
# turn for a core, and with fewer chunks in flight the others wait for it: against 128, N = 8
# ReduceScatter of 256 KiB - 1 MiB took 20-40% less time, AllReduce 5-12% (docs/measurements.md,
# "Tried in the eleventh round"). Jobs sharing a pool use less.
STAR_WINDOW = 512


class IncFormatError(ValueError):
    """Bytes that are not a whole INC payload."""


def check_elements_per_packet(k: int) -> None:
    """ValueError unless a job may carry `k` elements per packet."""
    if not 1 <= k <= MAX_ELEMENTS:
        raise ValueError(f"elements per packet must be 1..{MAX_ELEMENTS} (the header's count has 12 bits), not {k}")


class ElementsField(FieldListField):
    """The packet's int32 elements: built padded with zeros to whole blocks of the count's
    elements (or the list's, if longer), as the switch expects; dissected as every whole element
    that follows the header, so the bound layer reads a packet of any K."""

    def __init__(self, name: str) -> None:
        super().__init__(name, [], SignedIntField("", 0), length_from=lambda pkt: 0)

    def getfield(self, pkt, s):  # noqa: ANN001 - Scapy's signature
        whole = len(s) // 4 * 4
        return s[whole:], [int(v) for v in np.frombuffer(s[:whole], _ELEMENTS)]

    def i2m(self, pkt, val):  # noqa: ANN001 - Scapy's signature
        val = list(val or [])
        if len(val) > pkt.K:
            raise ValueError(f"an INC packet carries at most {pkt.K} elements, not {len(val)}")
        return val + [0] * (data_elements(max(len(val), pkt.count or 0), pkt.K) - len(val))


class Inc(Packet):
    """The INC header and up to K elements; `inc_layer(k)` builds packets of a job with another K."""
    name = "INC"
    K = INC_K
    fields_desc = [
        BitField("version", INC_VERSION, 4),
        BitEnumField("opcode", OP_CONTRIB, 4, OPCODES),
        FlagsField("flags", 0, 8, ["overflow", "resent", "partial", "retransmit", "eager"]),
        ShortField("job_id", 0),
        ByteField("worker_id", 0),
        BitField("count", None, 12),         # None: the number of elements given
        BitField("pool_version", 0, 1),
        BitField("slot", 0, 11),
        IntField("seq", 0),
        SignedByteField("exponent", 0),
        SignedByteField("need", 0),
        ByteEnumField("reduce_op", REDUCE_SUM, REDUCE_OPS),
        BitEnumField("collective", COLL_ALLREDUCE, 3, COLLECTIVES),
        BitField("root", 0, 5),
        ConditionalField(ElementsField("elements"), lambda pkt: pkt.opcode not in HEADER_ONLY),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.count is None:
            count = 1 if self.opcode in HEADER_ONLY else min(len(self.elements or []), self.K)
            word = count << 12 | int.from_bytes(pkt[5:8], "big") & 0xFFF    # bytes 5-7: count, version, slot
            pkt = pkt[:5] + word.to_bytes(3, "big") + pkt[8:]
        return pkt + pay

    def mysummary(self) -> str:
        return self.sprintf("INC %opcode% job=%job_id% worker=%worker_id% slot=%slot%/%pool_version% "
                            "seq=%seq% count=%count% flags=%flags% %collective% root=%root%")


@functools.lru_cache(maxsize=None)
def inc_layer(k: int) -> type[Inc]:
    """The Inc layer of a job with `k` elements per packet (Inc itself for the default K)."""
    if k == INC_K:
        return Inc
    check_elements_per_packet(k)
    return type(f"Inc{k}", (Inc,), {"K": k})


bind_layers(UDP, Inc, dport=INC_PORT)
bind_layers(UDP, Inc, sport=INC_PORT)
bind_layers(UDP, Inc, dport=RING_PORT)


@dataclass(frozen=True, slots=True)
class IncHeader:
    """The INC header's fields, as the hot path packs and unpacks them."""
    opcode: int
    job_id: int
    worker_id: int
    count: int
    slot: int
    pool_version: int
    seq: int
    flags: int = 0
    exponent: int = 0
    need: int = 0
    version: int = INC_VERSION
    reduce_op: int = REDUCE_SUM
    collective: int = COLL_ALLREDUCE
    root: int = 0


_HEADER = struct.Struct("!BBHIIbbBB")    # bytes 4-7: worker_id 8, count 12, pool_version 1, slot 11
_ELEMENTS = np.dtype(">i4")


def pack(header: IncHeader, elements: np.ndarray, k: int = INC_K) -> bytes:
    """The UDP payload for `header` and up to `k` int32 `elements`, zero padded to whole blocks of
    the header's count (or of the elements, if more); a JOIN's or an ACK's is the header alone."""
    data = np.asarray(elements, dtype=_ELEMENTS).tobytes()
    if header.opcode in HEADER_ONLY:
        if data:
            raise ValueError(f"a {OPCODES[header.opcode]} carries no elements")
        return pack_header(header)
    if len(data) > 4 * k:
        raise ValueError(f"an INC packet carries at most {k} elements, not {len(data) // 4}")
    return pack_header(header) + data + bytes(4 * data_elements(max(header.count, len(data) // 4), k) - len(data))


def pack_header(header: IncHeader) -> bytes:
    """The 16 header bytes alone: a JOIN's payload, else followed by big-endian int32 elements."""
    return _HEADER.pack((header.version << 4) | header.opcode, header.flags, header.job_id,
                        header.worker_id << 24 | header.count << 12 | header.pool_version << 11 | header.slot,
                        header.seq, header.exponent, header.need, header.reduce_op,
                        (header.collective << 5) | header.root)


def with_flags(payload: bytes, flags: int) -> bytes:
    """The same INC payload with `flags` set in its header as well."""
    return payload[:1] + bytes((payload[1] | flags,)) + payload[2:]


def unpack(payload: bytes, k: int = INC_K) -> tuple[IncHeader, np.ndarray]:
    """Header and elements (native int32, whole blocks) of an INC UDP payload; none for JOIN and ACK."""
    header = unpack_header(payload, k)
    if header.opcode in HEADER_ONLY:
        return header, np.zeros(0, np.int32)
    return header, elements_view(payload).astype(np.int32)


def unpack_header(payload: bytes, k: int = INC_K) -> IncHeader:
    """The header of an INC UDP payload, after checking that the payload is whole for a job
    of `k` elements per packet: at most k elements, in whole blocks, their count's at least
    (a JOIN or an ACK is the header alone)."""
    if len(payload) < HEADER_SIZE:
        raise IncFormatError(f"an INC payload has at least {HEADER_SIZE} bytes, this one {len(payload)}")
    vo, flags, job, wcs, seq, exponent, need, reduce_op, cr = _HEADER.unpack_from(payload)
    if vo & 0xF not in HEADER_ONLY:
        count, data = wcs >> 12 & 0xFFF, len(payload) - HEADER_SIZE
        if count > k or data > 4 * k or data < 4 * data_elements(count, k) or data % 4:
            raise IncFormatError(f"an INC payload with {count} of at most {k} elements carries them in "
                                 f"{4 * data_elements(count, k)} bytes, this one in {data}")
    return IncHeader(opcode=vo & 0xF, job_id=job, worker_id=wcs >> 24, count=wcs >> 12 & 0xFFF, slot=wcs & 0x7FF,
                     pool_version=wcs >> 11 & 1, seq=seq, flags=flags, exponent=exponent, need=need,
                     version=vo >> 4, reduce_op=reduce_op, collective=cr >> 5, root=cr & 0x1F)


def elements_view(payload: bytes) -> np.ndarray:
    """The elements of a whole INC payload (unpack_header checked it), big-endian, without a copy."""
    return np.frombuffer(payload, dtype=_ELEMENTS, offset=HEADER_SIZE)
