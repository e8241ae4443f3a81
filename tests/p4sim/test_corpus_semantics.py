"""Corpus programs on constructs beyond the tutorials' (issue 10): a header union
of IPv4 and IPv6, slices as lvalues, and list expressions assigned to whole headers
and structs (the P4_16 spec: a header assigned a list expression becomes valid).
"""
from __future__ import annotations

import pytest
from scapy.fields import IntField, ShortField
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, Raw

from tests.p4sim.oracles import H1_MAC, H2_MAC, PAYLOAD, ROUTER_MAC, add, ip, rebuilt

# --- header_union_l3.p4 --------------------------------------------------------------------


def test_union_member_the_parser_chose_is_forwarded_and_decremented(make_switch):
    sw = make_switch("header_union_l3")
    v4 = Ether(dst=ROUTER_MAC, src=H1_MAC) / IP(src="10.0.0.1", dst="10.0.0.2", ttl=9) / UDP() / PAYLOAD
    out4 = v4.copy()
    out4[IP].ttl = 8
    assert sw.process(1, bytes(v4)) == [(4, rebuilt(out4))]
    v6 = Ether(dst=ROUTER_MAC, src=H1_MAC) / IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=9) / UDP() / PAYLOAD
    out6 = v6.copy()
    out6[IPv6].hlim = 8
    assert sw.process(1, bytes(v6)) == [(6, bytes(out6))]


def test_union_drops_expiring_packets_and_other_protocols(make_switch):
    sw = make_switch("header_union_l3")
    assert sw.process(1, bytes(Ether() / IP(ttl=1) / UDP())) == []
    assert sw.process(1, bytes(Ether() / IPv6(hlim=1) / UDP())) == []
    assert sw.process(1, bytes(Ether() / ARP())) == []


# --- slice_lvalue.p4 -----------------------------------------------------------------------

@pytest.mark.parametrize("tos,flags", [(0x00, 0), (0x03, 0), (0xFD, 4), (0x02, 1)])
def test_slice_assignment_changes_only_its_bits(make_switch, tos, flags):
    sw = make_switch("slice_lvalue")
    add(sw, "MyIngress.qos", [("lpm", ip("10.0.0.0"), 8)], "MyIngress.remark", 46, 2)
    sent = Ether(dst=ROUTER_MAC, src=H1_MAC) / IP(src="10.1.1.1", dst="192.0.2.1", tos=tos, flags=flags) / \
        UDP() / PAYLOAD
    expected = sent.copy()
    expected[IP].tos = 46 << 2 | tos & 0b11
    expected[IP].flags = flags | 0b010
    assert sw.process(1, bytes(sent)) == [(2, rebuilt(expected))]
    assert sw.process(1, bytes(Ether() / IP(src="11.0.0.1") / UDP())) == []


# --- list_assign.p4 ------------------------------------------------------------------------

class Reply(Packet):
    name = "Reply"
    fields_desc = [IntField("key", 0), ShortField("port", 0), ShortField("magic", 0xCAFE)]


def test_list_expressions_fill_a_new_header_and_a_struct(make_switch):
    sw = make_switch("list_assign")
    sent = Ether(dst=H2_MAC, src=H1_MAC, type=0x88C1) / Raw((0xDEADBEEF).to_bytes(4, "big")) / PAYLOAD
    expected = Ether(dst=H1_MAC, src=H2_MAC, type=0x88C2) / Reply(key=0xDEADBEEF, port=6) / PAYLOAD
    assert sw.process(6, bytes(sent)) == [(6, bytes(expected))]
    assert sw.process(6, bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)) == []
