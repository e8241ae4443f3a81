"""Corpus programs on constructs beyond the tutorials' (issue 10): a header union
of IPv4 and IPv6, and slices as lvalues.
"""
from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether

from tests.p4sim.oracles import H1_MAC, PAYLOAD, ROUTER_MAC, add, ip, rebuilt

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
