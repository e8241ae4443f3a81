"""The INC wire format (docs/protocol.md): a Scapy layer for dumps, tests and tools, and
a precompiled packer/unpacker for the hot path that the tests prove byte-identical to it.
The constants mirror p4src/allreduce.p4.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from scapy.fields import (BitEnumField, BitField, ByteEnumField, ByteField, FieldListField, FlagsField,
                          ShortField, SignedByteField, SignedIntField, IntField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

INC_PORT = 48879                 # 0xBEEF: workers send to it, results come from it
RING_PORT = INC_PORT + 1         # the ring baseline's host-to-host traffic, same format
AGG_IP = "10.0.0.254"
AGG_MAC = "02:00:00:00:00:fe"
INC_K = 32                       # elements per packet
INC_VERSION = 1
POOL_SIZE = 512                  # slots per version in the switch, shared by all jobs
MAX_WORKERS = 32                 # the switch's contributor bitmap is 32 bits

OP_CONTRIB = 1
OP_RESULT = 2
OP_RING = 3                      # ring baseline: one chunk of a step, host to host
OP_RING_ACK = 4                  # ring baseline: the receiver has that chunk
OPCODES = {OP_CONTRIB: "contrib", OP_RESULT: "result", OP_RING: "ring", OP_RING_ACK: "ring-ack"}
REDUCE_SUM = 0                   # how the switch combines a slot's contributions (byte 14, reduce_op)
REDUCE_MIN = 1
REDUCE_MAX = 2
REDUCE_OPS = {REDUCE_SUM: "sum", REDUCE_MIN: "min", REDUCE_MAX: "max"}

FLAG_OVERFLOW = 0x01
FLAG_RESENT = 0x02

HEADER_SIZE = 16
ELEMENT_BYTES = 4 * INC_K
PAYLOAD_SIZE = HEADER_SIZE + ELEMENT_BYTES    # the UDP payload of every INC packet


class IncFormatError(ValueError):
    """Bytes that are not a whole INC payload."""


class ElementsField(FieldListField):
    """The K int32 elements; a shorter list is padded with zeros, as the switch expects."""

    def __init__(self, name: str) -> None:
        super().__init__(name, [], SignedIntField("", 0), count_from=lambda pkt: INC_K)

    def i2m(self, pkt, val):  # noqa: ANN001 - Scapy's signature
        val = list(val or [])
        if len(val) > INC_K:
            raise ValueError(f"an INC packet carries at most {INC_K} elements, not {len(val)}")
        return val + [0] * (INC_K - len(val))


class Inc(Packet):
    name = "INC"
    fields_desc = [
        BitField("version", INC_VERSION, 4),
        BitEnumField("opcode", OP_CONTRIB, 4, OPCODES),
        FlagsField("flags", 0, 8, ["overflow", "resent"]),
        ShortField("job_id", 0),
        ByteField("worker_id", 0),
        ByteField("count", None),            # None: the number of elements given
        BitField("pool_version", 0, 1),
        BitField("slot", 0, 15),
        IntField("seq", 0),
        SignedByteField("exponent", 0),
        SignedByteField("need", 0),
        ByteEnumField("reduce_op", REDUCE_SUM, REDUCE_OPS),
        ByteField("reserved", 0),
        ElementsField("elements"),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.count is None:
            pkt = pkt[:5] + bytes([min(len(self.elements or []), INC_K)]) + pkt[6:]
        return pkt + pay

    def mysummary(self) -> str:
        return self.sprintf("INC %opcode% job=%job_id% worker=%worker_id% slot=%slot%/%pool_version% "
                            "seq=%seq% count=%count% flags=%flags%")


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


_HEADER = struct.Struct("!BBHBBHIbbBB")
_ELEMENTS = np.dtype(">i4")
_ZERO_ELEMENTS = bytes(ELEMENT_BYTES)


def pack(header: IncHeader, elements: np.ndarray) -> bytes:
    """The UDP payload for `header` and up to K int32 `elements` (zero padded)."""
    data = np.asarray(elements, dtype=_ELEMENTS).tobytes()
    if len(data) > ELEMENT_BYTES:
        raise ValueError(f"an INC packet carries at most {INC_K} elements, not {len(data) // 4}")
    return pack_header(header) + data + _ZERO_ELEMENTS[len(data):]


def pack_header(header: IncHeader) -> bytes:
    """The 16 header bytes alone; a payload is these and ELEMENT_BYTES of big-endian int32."""
    return _HEADER.pack((header.version << 4) | header.opcode, header.flags, header.job_id,
                        header.worker_id, header.count, (header.pool_version << 15) | header.slot,
                        header.seq, header.exponent, header.need, header.reduce_op, 0)


def unpack(payload: bytes) -> tuple[IncHeader, np.ndarray]:
    """Header and the K elements (native int32) of an INC UDP payload."""
    return unpack_header(payload), elements_view(payload).astype(np.int32)


def unpack_header(payload: bytes) -> IncHeader:
    """The header of an INC UDP payload, after checking that the payload is whole."""
    if len(payload) < PAYLOAD_SIZE:
        raise IncFormatError(f"an INC payload has {PAYLOAD_SIZE} bytes, this one {len(payload)}")
    vo, flags, job, worker, count, vs, seq, exponent, need, reduce_op, _ = _HEADER.unpack_from(payload)
    return IncHeader(opcode=vo & 0xF, job_id=job, worker_id=worker, count=count, slot=vs & 0x7FFF,
                     pool_version=vs >> 15, seq=seq, flags=flags, exponent=exponent, need=need,
                     version=vo >> 4, reduce_op=reduce_op)


def elements_view(payload: bytes) -> np.ndarray:
    """The K elements of a whole INC payload, big-endian, without a copy."""
    return np.frombuffer(payload, dtype=_ELEMENTS, count=INC_K, offset=HEADER_SIZE)
