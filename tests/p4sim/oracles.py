"""Oracles and packet builders shared by the p4sim program tests (test_programs.py and
the corpus tests): BMv2's hash algorithms, field-list packing, Scapy packets as the
hosts of the tutorials' topologies send them, and table entries through the runtime state.
"""
from __future__ import annotations

import ipaddress
import zlib

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from p4sim.state import TableEntry

ROUTER_MAC = "00:00:00:00:01:00"
H1_MAC, H2_MAC, H3_MAC = "08:00:00:00:01:11", "08:00:00:00:02:22", "08:00:00:00:03:33"
BROADCAST = "ff:ff:ff:ff:ff:ff"
PAYLOAD = Raw(b"p4sim conformance")


def crc16(data: bytes) -> int:
    """BMv2's HashAlgorithm.crc16: CRC-16/ARC (poly 0x8005 reflected, init 0, no xor-out)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def crc32(data: bytes) -> int:
    """BMv2's HashAlgorithm.crc32 is zlib's CRC-32."""
    return zlib.crc32(data)


def concat(*fields: tuple[int, int]) -> bytes:
    """(value, width) fields packed MSB first, as BMv2 builds a hash's input."""
    value, width = 0, 0
    for v, w in fields:
        value, width = (value << w) | v, width + w
    assert width % 8 == 0, "the field list must fill whole bytes"
    return value.to_bytes(width // 8, "big")


def ip(addr: str) -> int:
    return int(ipaddress.IPv4Address(addr))


def mac(addr: str) -> int:
    return int(addr.replace(":", ""), 16)


def add(sw, table: str, match: list, action: str, *args: int, priority: int = 0) -> None:
    sw.state.tables[table].insert(TableEntry(tuple(match), action, tuple(args), priority=priority))


def rebuilt(pkt: Packet) -> bytes:
    """Bytes of `pkt` with lengths and checksums recomputed, as a correct switch leaves them."""
    pkt = pkt.copy()
    for layer in (IP, UDP, TCP):
        if layer in pkt:
            for name in ("chksum", "len", "ihl"):
                pkt[layer].fields.pop(name, None)
    return bytes(pkt)


def routed(sent: Packet, dst_mac: str, src_mac: str = ROUTER_MAC, **ip_changes) -> bytes:
    """What a router emits: MACs rewritten, TTL one lower, IPv4 checksum redone."""
    out = sent.copy()
    out[Ether].dst, out[Ether].src = dst_mac, src_mac
    out[IP].ttl = sent[IP].ttl - 1
    for name, value in ip_changes.items():
        setattr(out[IP], name, value)
    return rebuilt(out)


def udp_packet(src: str, dst: str, ttl: int = 64, tos: int = 0, sport: int = 1234,
               dport: int = 4321, eth_dst: str = ROUTER_MAC, eth_src: str = H1_MAC) -> Packet:
    return Ether(dst=eth_dst, src=eth_src) / IP(src=src, dst=dst, ttl=ttl, tos=tos) / \
        UDP(sport=sport, dport=dport) / PAYLOAD


def tcp_packet(src: str, dst: str, sport: int, dport: int, flags: str, eth_src: str = H1_MAC) -> Packet:
    return Ether(dst=ROUTER_MAC, src=eth_src) / IP(src=src, dst=dst) / \
        TCP(sport=sport, dport=dport, flags=flags) / PAYLOAD


def stats_delta(sw, before: dict) -> dict:
    return {k: sw.stats[k] - before.get(k, 0) for k in sw.stats}
