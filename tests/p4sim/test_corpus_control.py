"""Corpus programs on control flow, enums and errors, hashes and checksums: switch on
action_run, exit inside and outside actions, serializable and plain enums with a
custom parser error, every BMv2 hash algorithm, and a UDP source NAT that verifies and
recomputes both checksums (with payload).

The hash oracles follow BMv2's bm_sim/calculations.cpp: crc16 is CRC-16/ARC, crc32
zlib's CRC-32, csum16 the Internet checksum, xor16 the xor of 16-bit words, identity
the input bytes as a number; `hash(out, algo, base, data, max)` is base + h % max.
mark_to_drop only sets egress_spec to 511 (BMv2's primitives.cpp), so a later write
to egress_spec forwards the packet again.
"""
from __future__ import annotations

import pytest
from scapy.fields import ByteField, IntField, ShortField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from tests.p4sim.oracles import H1_MAC, H2_MAC, H3_MAC, PAYLOAD, add, concat, crc16, crc32, ip, mac, rebuilt

# --- action_run_switch.p4 ------------------------------------------------------------------


def setup_classify(sw) -> None:
    t = "MyIngress.classify"
    add(sw, t, [("exact", 0x0800)], "MyIngress.to_port", 2)
    add(sw, t, [("exact", 0x88CC)], "MyIngress.to_cpu")
    add(sw, t, [("exact", 0x88E5)], "MyIngress.to_monitor")
    add(sw, t, [("exact", 0x0806)], "MyIngress.drop")
    add(sw, "MyIngress.tag_special", [("exact", mac(H1_MAC))], "MyIngress.set_tag", 0xBEEF)


@pytest.mark.parametrize("ethertype,port,tagged", [
    (0x0800, 2, False),          # default: case, nothing more
    (0x88CC, 64, True),          # to_cpu falls through to to_monitor's body
    (0x88E5, 65, True),
    (0x1234, 1, False),          # miss: the default action `unknown` has its own case
    (0x0806, None, False),       # drop runs, default: case
])
def test_switch_on_action_run_branches_per_action(make_switch, ethertype, port, tagged):
    sw = make_switch("action_run_switch")
    setup_classify(sw)
    sent = Ether(dst=H2_MAC, src=H1_MAC, type=ethertype) / PAYLOAD
    if port is None:
        assert sw.process(1, bytes(sent)) == []
        return
    expected = Ether(dst=H2_MAC, src=H1_MAC, type=0xBEEF if tagged else ethertype) / PAYLOAD
    assert sw.process(1, bytes(sent)) == [(port, bytes(expected))]
    # From another source the special tag table misses and changes nothing.
    other = bytes(Ether(dst=H2_MAC, src=H3_MAC, type=ethertype) / PAYLOAD)
    assert sw.process(1, other) == [(port, other)]


# --- exit_semantics.p4 ---------------------------------------------------------------------

class Trace(Packet):
    name = "Trace"
    fields_desc = [ByteField(n, 0) for n in ("cmd", "step1", "step2", "step3", "egress_step1", "egress_step2")]


@pytest.mark.parametrize("cmd,steps", [
    (0, (1, 1, 1, 1, 1)),
    (1, (1, 0, 0, 1, 1)),        # exit in ingress: egress still runs
    (2, (1, 1, 0, 1, 1)),        # exit inside an action ends ingress
    (3, (1, 1, 1, 1, 0)),        # exit in egress: the packet still leaves
    (4, None),                   # mark_to_drop then exit: dropped
    (5, (1, 1, 1, 1, 1)),        # mark_to_drop then egress_spec = 3: forwarded
])
def test_exit_ends_the_control_and_the_packet_goes_on(make_switch, cmd, steps):
    sw = make_switch("exit_semantics")
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88BB)
    sent = eth / Trace(cmd=cmd) / PAYLOAD
    if steps is None:
        assert sw.process(1, bytes(sent)) == []
        return
    names = ("step1", "step2", "step3", "egress_step1", "egress_step2")
    expected = eth / Trace(cmd=cmd, **dict(zip(names, steps))) / PAYLOAD
    assert sw.process(1, bytes(sent)) == [(3, bytes(expected))]


def test_exit_after_drop_of_a_frame_without_trace(make_switch):
    sw = make_switch("exit_semantics")
    assert sw.process(1, bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)) == []


# --- enums_errors.p4 -----------------------------------------------------------------------

class Cmd(Packet):
    name = "Cmd"
    fields_desc = [ByteField("op", 0), ByteField("flags", 0), ShortField("id", 0)]


@pytest.mark.parametrize("op,out", [(1, "reply"), (0xFF, "cpu"), (2, None), (7, None), (0, None)])
def test_enum_opcodes_pick_the_reply_the_cpu_or_a_drop(make_switch, op, out):
    sw = make_switch("enums_errors")
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88BC)
    sent = eth / Cmd(op=op, flags=3, id=0x1234) / PAYLOAD
    result = sw.process(5, bytes(sent))
    if out == "reply":
        assert result == [(5, bytes(eth / Cmd(op=2, flags=3, id=0x1234) / PAYLOAD))]
    elif out == "cpu":
        assert result == [(64, bytes(sent))]
    else:
        assert result == []
    # Opcode 0 fails the parser's verify with the custom error.
    assert sw.stats["malformed"] == (op == 0)


def test_enum_program_drops_truncated_and_foreign_frames(make_switch):
    sw = make_switch("enums_errors")
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88BC)
    assert sw.process(5, bytes(eth / Cmd(op=1))[:-1]) == []
    assert sw.process(5, bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)) == []


# --- hash_algorithms.p4 --------------------------------------------------------------------

class HashReq(Packet):
    name = "HashReq"
    fields_desc = [IntField("a", 0), IntField("b", 0), ShortField("crc16", 0), IntField("crc32", 0),
                   ShortField("csum16", 0), ShortField("xor16", 0), IntField("identity", 0),
                   ShortField("bucket", 0)]


def csum16(data: bytes) -> int:
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total ^ 0xFFFF


def xor16(data: bytes) -> int:
    out = 0
    for i in range(0, len(data), 2):
        out ^= int.from_bytes(data[i:i + 2], "big")
    return out


@pytest.mark.parametrize("a,b", [(0, 0), (1, 2), (0x0A000001, 0x0A000002), (0xFFFFFFFF, 0x12345678),
                                 (0xDEADBEEF, 0xCAFEF00D)])
def test_each_hash_algorithm_matches_bmv2s(make_switch, a, b):
    sw = make_switch("hash_algorithms")
    data = concat((a, 32), (b, 32))
    expected = HashReq(a=a, b=b, crc16=crc16(data), crc32=crc32(data), csum16=csum16(data), xor16=xor16(data),
                       identity=b, bucket=100 + crc16(data) % 50)
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88BD)
    assert sw.process(4, bytes(eth / HashReq(a=a, b=b) / PAYLOAD)) == [(4, bytes(eth / expected / PAYLOAD))]


# --- udp_nat.p4 ----------------------------------------------------------------------------

INSIDE, PUBLIC, SERVER = "192.168.1.10", "203.0.113.5", "198.51.100.7"


def setup_nat(sw) -> None:
    add(sw, "MyIngress.nat", [("exact", ip(INSIDE))], "MyIngress.snat", ip(PUBLIC), 2)


def datagram(src: str, payload: bytes = b"p4sim nat payload", chksum: int | None = None) -> Packet:
    udp = UDP(sport=5353, dport=53) if chksum is None else UDP(sport=5353, dport=53, chksum=chksum)
    return Ether(dst=H2_MAC, src=H1_MAC) / IP(src=src, dst=SERVER, ttl=9) / udp / Raw(payload)


@pytest.mark.parametrize("payload", [b"p4sim nat payload", b"odd", b""])
def test_nat_rewrites_the_source_and_both_checksums(make_switch, payload):
    sw = make_switch("udp_nat")
    setup_nat(sw)
    sent = datagram(INSIDE, payload)
    expected = sent.copy()
    expected[IP].src = PUBLIC
    assert sw.process(1, bytes(sent)) == [(2, rebuilt(expected))]


def test_nat_keeps_a_zero_udp_checksum(make_switch):
    sw = make_switch("udp_nat")
    setup_nat(sw)
    sent = datagram(INSIDE, chksum=0)
    expected = sent.copy()
    expected[IP].src = PUBLIC
    del expected[IP].chksum
    assert sw.process(1, bytes(sent)) == [(2, bytes(expected))]
    assert expected[UDP].chksum == 0


def test_nat_drops_bad_checksums_and_unknown_sources(make_switch):
    sw = make_switch("udp_nat")
    setup_nat(sw)
    good = bytes(datagram(INSIDE))
    bad_udp = bytearray(good)
    bad_udp[-1] ^= 0x01                                     # payload changed under the checksum
    assert sw.process(1, bytes(bad_udp)) == []
    bad_ip = datagram(INSIDE)
    bad_ip[IP].chksum = 0x1234
    assert sw.process(1, bytes(bad_ip)) == []
    assert sw.process(1, bytes(datagram("192.168.1.99"))) == []
    forwarded = datagram(INSIDE)
    forwarded[IP].src = PUBLIC
    assert sw.process(1, good) == [(2, rebuilt(forwarded))]
