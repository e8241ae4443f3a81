"""Corpus programs on table matching: lpm nesting, ternary and optional keys with
priorities, ranges, default actions with parameters and const entries.

Entries go in through the runtime state with P4Runtime's priority rule (a larger
number wins); outputs are compared byte for byte with Scapy-built packets.
"""
from __future__ import annotations

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether

from p4sim.state import StateError
from tests.p4sim.oracles import BROADCAST, H1_MAC, H2_MAC, PAYLOAD, ROUTER_MAC, add, ip, mac, rebuilt, udp_packet

# --- lpm_nesting.p4 ------------------------------------------------------------------------

LPM_ROUTES = {("0.0.0.0", 0): 1, ("10.0.0.0", 8): 2, ("10.1.0.0", 16): 3, ("10.1.2.0", 24): 4,
              ("10.1.2.3", 32): 5}


@pytest.mark.parametrize("dst,port", [("192.0.2.1", 1), ("10.9.9.9", 2), ("10.1.9.9", 3),
                                      ("10.1.2.4", 4), ("10.1.2.3", 5), ("10.1.3.3", 3)])
def test_lpm_most_specific_prefix_wins_and_slash_0_is_the_default_route(make_switch, dst, port):
    sw = make_switch("lpm_nesting")
    for (prefix, plen), out in LPM_ROUTES.items():
        add(sw, "MyIngress.routes", [("lpm", ip(prefix), plen)], "MyIngress.set_port", out)
    sent = bytes(udp_packet("192.168.0.1", dst))
    assert sw.process(9, sent) == [(port, sent)]


def test_lpm_without_default_route_drops_and_deleting_a_prefix_falls_back(make_switch):
    sw = make_switch("lpm_nesting")
    for (prefix, plen), out in LPM_ROUTES.items():
        if plen:
            add(sw, "MyIngress.routes", [("lpm", ip(prefix), plen)], "MyIngress.set_port", out)
    sent = bytes(udp_packet("192.168.0.1", "10.1.2.3"))
    assert sw.process(9, bytes(udp_packet("192.168.0.1", "11.0.0.1"))) == []
    assert sw.process(9, sent) == [(5, sent)]
    sw.state.tables["MyIngress.routes"].delete((("lpm", ip("10.1.2.3"), 32),))
    assert sw.process(9, sent) == [(4, sent)]
    assert sw.process(9, bytes(Ether(dst=BROADCAST, src=H1_MAC) / ARP())) == []


# --- ternary_acl.p4 ------------------------------------------------------------------------

def setup_acl(sw) -> None:
    t, any_ = "MyIngress.acl", ("ternary", 0, 0)
    # 10.0.0.0/8 to anywhere goes out port 2; its UDP to 10.0.0.0/16 out port 3; one host denied.
    add(sw, t, [("ternary", ip("10.0.0.0"), 0xFF000000), any_, any_], "MyIngress.permit", 2, priority=10)
    add(sw, t, [("ternary", ip("10.0.0.0"), 0xFF000000), ("ternary", ip("10.0.0.0"), 0xFFFF0000),
                ("ternary", 17, 0xFF)], "MyIngress.permit", 3, priority=20)
    add(sw, t, [("ternary", ip("10.6.6.6"), 0xFFFFFFFF), any_, any_], "MyIngress.deny", priority=30)
    # Low bit of the protocol set (ICMP 1, UDP 17 ...): port 4, below everything else.
    add(sw, t, [any_, any_, ("ternary", 1, 1)], "MyIngress.permit", 4, priority=1)


@pytest.mark.parametrize("src,dst,proto,port", [
    ("10.1.1.1", "192.0.2.1", 6, 2),          # only the /8 rule
    ("10.1.1.1", "10.0.7.7", 17, 3),          # both; the UDP rule has the higher priority
    ("10.1.1.1", "10.0.7.7", 6, 2),           # TCP: the UDP rule's protocol bits differ
    ("10.6.6.6", "10.0.7.7", 17, None),       # the deny rule outranks both
    ("172.16.0.1", "10.0.7.7", 1, 4),         # ICMP from outside 10/8: the low-bit rule
    ("172.16.0.1", "10.0.7.7", 6, None),      # no rule: default deny
])
def test_acl_highest_priority_matching_rule_decides(make_switch, src, dst, proto, port):
    sw = make_switch("ternary_acl")
    setup_acl(sw)
    sent = bytes(Ether(dst=ROUTER_MAC, src=H1_MAC) / IP(src=src, dst=dst, proto=proto) / PAYLOAD)
    assert sw.process(1, sent) == ([] if port is None else [(port, sent)])


def test_acl_rejects_entries_without_priority_and_values_outside_the_mask(make_switch):
    sw = make_switch("ternary_acl")
    any_ = ("ternary", 0, 0)
    with pytest.raises(StateError) as err:
        add(sw, "MyIngress.acl", [any_, any_, ("ternary", 6, 0xFF)], "MyIngress.deny")
    assert err.value.code == "INVALID_ARGUMENT"
    with pytest.raises(StateError):
        add(sw, "MyIngress.acl", [("ternary", 0x0A000001, 0xFF000000), any_, any_], "MyIngress.deny", priority=1)


# --- range_ports.p4 ------------------------------------------------------------------------

def setup_ranges(sw) -> None:
    t = "MyIngress.classify"
    add(sw, t, [("range", 1000, 1999)], "MyIngress.set_class", 10, 2, priority=1)
    add(sw, t, [("range", 1500, 1500)], "MyIngress.set_class", 46, 3, priority=5)   # inside the first
    add(sw, t, [("range", 2000, 65535)], "MyIngress.set_class", 8, 4, priority=1)


@pytest.mark.parametrize("dport,dscp,port", [(1000, 10, 2), (1999, 10, 2), (1500, 46, 3), (1501, 10, 2),
                                             (2000, 8, 4), (65535, 8, 4), (999, None, None)])
def test_range_bounds_are_inclusive_and_the_narrow_range_outranks(make_switch, dport, dscp, port):
    sw = make_switch("range_ports")
    setup_ranges(sw)
    sent = udp_packet("10.0.0.1", "10.0.0.2", tos=0b11, dport=dport)     # ECN bits set: kept
    if port is None:
        assert sw.process(1, bytes(sent)) == []
        return
    expected = sent.copy()
    expected[IP].tos = dscp << 2 | 0b11
    assert sw.process(1, bytes(sent)) == [(port, rebuilt(expected))]


def test_range_program_drops_non_udp(make_switch):
    sw = make_switch("range_ports")
    setup_ranges(sw)
    assert sw.process(1, bytes(Ether() / IP(dst="10.0.0.2") / TCP(dport=1500))) == []


# --- optional_match.p4 ---------------------------------------------------------------------

@pytest.mark.parametrize("in_port,ethertype,port", [
    (1, 0x0800, 5),       # both named
    (1, 0x86DD, 6),       # port 1, any type
    (2, 0x0800, 7),       # any port, IPv4
    (2, 0x88CC, None),    # nothing matches: drop
])
def test_optional_keys_match_exactly_or_not_at_all(make_switch, in_port, ethertype, port):
    sw = make_switch("optional_match")
    t = "MyIngress.steering"
    add(sw, t, [("optional", 1), ("optional", 0x0800)], "MyIngress.steer", 5, priority=30)
    add(sw, t, [("optional", 1), None], "MyIngress.steer", 6, priority=20)
    add(sw, t, [None, ("optional", 0x0800)], "MyIngress.steer", 7, priority=10)
    sent = bytes(Ether(dst=H2_MAC, src=H1_MAC, type=ethertype) / PAYLOAD)
    assert sw.process(in_port, sent) == ([] if port is None else [(port, sent)])


# --- default_action_params.p4 --------------------------------------------------------------

SWITCH_MAC = "00:00:00:00:ab:01"


def test_default_action_runs_with_its_declared_argument_then_the_controllers(make_switch):
    sw = make_switch("default_action_params")
    sent = Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD
    stamped = bytes(Ether(dst=H2_MAC, src=SWITCH_MAC) / PAYLOAD)
    assert sw.process(1, bytes(sent)) == [(7, stamped)]
    sw.state.tables["MyIngress.forward"].set_default("MyIngress.set_port", (3,))
    assert sw.process(1, bytes(sent)) == [(3, stamped)]
    add(sw, "MyIngress.forward", [("exact", mac(H2_MAC))], "MyIngress.set_port", 2)
    assert sw.process(1, bytes(sent)) == [(2, stamped)]


def test_const_default_action_cannot_be_replaced(make_switch):
    sw = make_switch("default_action_params")
    with pytest.raises(StateError) as err:
        sw.state.tables["MyIngress.stamp"].set_default("MyIngress.set_src", (1,))
    assert err.value.code == "PERMISSION_DENIED"


# --- const_entries.p4 ----------------------------------------------------------------------

@pytest.mark.parametrize("l4,port", [
    (UDP(dport=53), 1),
    (UDP(dport=1024), 2), (UDP(dport=65535), 2),
    (TCP(dport=80), 3), (TCP(dport=22), 3),        # TCP is listed before the port-22 entry
    (UDP(dport=22), 5),
    (ICMP(), 4),
    (UDP(dport=500), None),                        # no entry: const default drop
])
def test_const_entries_first_listed_match_wins(make_switch, l4, port):
    sw = make_switch("const_entries")
    sent = bytes(Ether(dst=ROUTER_MAC, src=H1_MAC) / IP(src="10.0.0.1", dst="10.0.0.2") / l4 / PAYLOAD)
    assert sw.process(1, sent) == ([] if port is None else [(port, sent)])


def test_const_entries_cannot_be_changed_by_the_controller(make_switch):
    sw = make_switch("const_entries")
    assert len(sw.state.tables["MyIngress.classify"].entries()) == 5
    with pytest.raises(StateError) as err:
        add(sw, "MyIngress.classify", [("ternary", 6, 0xFF), None], "MyIngress.drop", priority=99)
    assert err.value.code == "PERMISSION_DENIED"
