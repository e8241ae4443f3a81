"""The v1model hash and checksum algorithms as BMv2 computes them, over bytes.

Inputs are the field list packed MSB first (compiler.data_bytes); results are plain
ints that the generated code cuts to the destination width.
"""
from __future__ import annotations

import random
import zlib
from typing import Callable


def _crc16_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC16 = _crc16_table()


def crc16(data: bytes) -> int:
    """CRC-16/ARC (poly 0x8005 reflected, init 0, no final xor): BMv2's crc16."""
    crc = 0
    table = _CRC16
    for b in data:
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return crc


def crc32(data: bytes) -> int:
    """The zlib/Ethernet CRC-32, which is BMv2's crc32."""
    return zlib.crc32(data)


def csum16(data: bytes) -> int:
    """The Internet checksum (RFC 1071): ones' complement of the ones' complement sum."""
    if len(data) % 2:
        data += b"\0"
    return csum16_int(int.from_bytes(data, "big"))


def csum16_int(value: int) -> int:
    """csum16 of a big-endian integer whose bit length is a multiple of 16.

    The ones' complement sum of 16-bit words is the value modulo 0xFFFF (2**16 is 1
    modulo 0xFFFF), except that a non-zero sum is never 0 but 0xFFFF."""
    total = value % 0xFFFF
    if total == 0 and value:
        total = 0xFFFF
    return total ^ 0xFFFF


def csum16_bits(value: int, nbits: int) -> int:
    """csum16 of a packed field list of `nbits` bits, zero-padded to whole 16-bit words."""
    return csum16_int(value << (-nbits % 16))


def xor16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    out = 0
    for i in range(0, len(data), 2):
        out ^= (data[i] << 8) | data[i + 1]
    return out


def identity(data: bytes) -> int:
    """BMv2's identity "hash": the first 8 bytes of the data, big-endian
    (behavioral-model src/bm_sim/calculations.cpp, struct identity)."""
    return int.from_bytes(data[:8], "big")


def hash_functions(rng: random.Random) -> dict[str, Callable[[bytes], int]]:
    """HashAlgorithm member name -> function; custom CRCs use their standard parameters."""
    return {"crc16": crc16, "crc16_custom": crc16, "crc32": crc32, "crc32_custom": crc32,
            "csum16": csum16, "xor16": xor16, "identity": identity,
            "random": lambda data: rng.getrandbits(32)}
