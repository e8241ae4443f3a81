"""Hash and checksum algorithms against their reference values (BMv2's choices)."""
from __future__ import annotations

import random
import zlib

import pytest
from scapy.all import IP, UDP, raw
from scapy.utils import checksum

from p4sim.externs import crc16, crc32, csum16, hash_functions, identity, xor16

CHECK = b"123456789"


def test_crc16_is_crc16_arc():
    assert crc16(CHECK) == 0xBB3D          # the published CRC-16/ARC check value
    assert crc16(b"") == 0


def test_crc32_equals_zlib():
    data = bytes(range(256)) * 3
    assert crc32(CHECK) == 0xCBF43926
    assert crc32(data) == zlib.crc32(data)


@pytest.mark.parametrize("size", [0, 1, 19, 20, 61])
def test_csum16_equals_the_internet_checksum(size):
    data = bytes(random.Random(size).getrandbits(8) for _ in range(size))
    assert csum16(data) == checksum(data)


def test_csum16_reproduces_an_ipv4_header_checksum():
    header = raw(IP(src="10.0.0.1", dst="10.1.2.3", ttl=17) / UDP())[:20]
    zeroed = header[:10] + b"\0\0" + header[12:]
    assert csum16(zeroed) == int.from_bytes(header[10:12], "big")


def test_identity_and_xor16():
    assert identity(b"\x01\x02\x03") == 0x010203
    assert identity(bytes(range(1, 11))) == 0x0102030405060708   # BMv2 keeps 8 bytes
    assert xor16(b"\x12\x34\x56\x78\x9a") == 0x1234 ^ 0x5678 ^ 0x9A00


def test_hash_functions_cover_every_v1model_algorithm():
    names = set(hash_functions(random.Random(0)))
    assert names == {"crc32", "crc32_custom", "crc16", "crc16_custom", "random", "identity", "csum16", "xor16"}
