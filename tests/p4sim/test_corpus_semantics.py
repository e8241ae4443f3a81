"""Corpus programs on constructs beyond the tutorials' (issue 10): a header union of
IPv4 and IPv6, slices as lvalues, list expressions assigned to whole headers and structs
(the P4_16 spec: a header assigned a list expression becomes valid), functions with
out/inout parameters, const entries with @priority, varbit fields, action arguments
bound in a table's action list, int/bool/enum header fields, control constructor
parameters and parser value sets.

Where the spec leaves a choice the tests expect BMv2's behaviour: a const entry with a
numerically smaller @priority wins, as p4c copies N verbatim into the JSON entry and
bm_sim's EntryList::lookup (src/bm_sim/lookup_structures.cpp) keeps the matching entry
with the smallest priority value (../shared/reference/bmv2-1.15.0/bound_action_args);
a varbit extract past the end of the packet is PacketTooShort and, as every parser
error in v1model, reaches ingress (../shared/reference/bmv2-1.15.0/varbit).
"""
from __future__ import annotations

import pytest
from scapy.fields import BitField, ByteField, IntField, ShortField, SignedShortField
from scapy.layers.inet import IP, UDP, IPOption_NOP, IPOption_RR
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, Raw

from tests.p4sim.oracles import H1_MAC, H2_MAC, PAYLOAD, ROUTER_MAC, add, ip, mac, rebuilt

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


# --- functions_inout.p4 --------------------------------------------------------------------

class Reflect(Packet):
    name = "Reflect"
    fields_desc = [ShortField("id", 0), ByteField("id_hi", 0), ByteField("id_lo", 0), ShortField("a", 0),
                   ShortField("b", 0), ShortField("ones_sum", 0)]


@pytest.mark.parametrize("ident,a,b", [(0x1234, 1, 2), (0xABCD, 0xFFFF, 1), (0, 0x8000, 0x8000),
                                       (0xFF00, 0xFFFF, 0xFFFF)])
def test_functions_swap_split_and_return(make_switch, ident, a, b):
    sw = make_switch("functions_inout")
    total = a + b
    ones = (total & 0xFFFF) + (total >> 16)
    sent = Ether(dst=H2_MAC, src=H1_MAC, type=0x88BE) / Reflect(id=ident, a=a, b=b) / PAYLOAD
    expected = Ether(dst=H1_MAC, src=H2_MAC, type=0x88BE) / \
        Reflect(id=ident, id_hi=ident >> 8, id_lo=ident & 0xFF, a=a, b=b, ones_sum=ones) / PAYLOAD
    assert sw.process(3, bytes(sent)) == [(3, bytes(expected))]


# --- const_priority.p4 ---------------------------------------------------------------------

@pytest.mark.parametrize("ethertype,port", [(0x0806, 3), (0x0800, 2), (0x08FF, 2), (0x86DD, 1), (0x0000, 1)])
def test_const_entry_with_the_smaller_priority_number_wins(make_switch, ethertype, port):
    sw = make_switch("const_priority")
    sent = bytes(Ether(dst=H2_MAC, src=H1_MAC, type=ethertype) / PAYLOAD)
    assert sw.process(1, sent) == [(port, sent)]


# --- varbit_options.p4 ---------------------------------------------------------------------

def setup_varbit(sw) -> None:
    add(sw, "MyIngress.routes", [("lpm", ip("10.0.2.0"), 24)], "MyIngress.forward", mac(H2_MAC), 2)


@pytest.mark.parametrize("options", [[], [IPOption_NOP()] * 4, [IPOption_RR(routers=["1.2.3.4"])],
                                     [IPOption_RR(routers=["10.0.0.1"] * 9)]])
def test_varbit_options_leave_exactly_as_they_came(make_switch, options):
    sw = make_switch("varbit_options")
    setup_varbit(sw)
    sent = Ether(dst=ROUTER_MAC, src=H1_MAC) / IP(src="10.0.1.1", dst="10.0.2.2", options=options) / \
        UDP() / PAYLOAD
    expected = Ether(dst=H2_MAC, src=ROUTER_MAC) / sent[IP]
    assert sw.process(1, bytes(sent)) == [(2, bytes(expected))]


def test_varbit_short_ihl_and_options_past_the_end_are_dropped(make_switch):
    sw = make_switch("varbit_options")
    setup_varbit(sw)
    sent = Ether(dst=ROUTER_MAC, src=H1_MAC) / IP(src="10.0.1.1", dst="10.0.2.2", ihl=4) / UDP() / PAYLOAD
    assert sw.process(1, bytes(sent)) == []
    long_ihl = bytes(Ether(dst=ROUTER_MAC, src=H1_MAC) / IP(src="10.0.1.1", dst="10.0.2.2", ihl=15))
    assert sw.process(1, long_ihl + b"\x01" * 10) == []
    assert sw.stats["malformed"] == 2


# --- bound_action_args.p4 ------------------------------------------------------------------

class Stats(Packet):
    name = "Stats"
    fields_desc = [ByteField("kind", 0), ShortField("hits", 0), ShortField("misses", 0)]


def test_bound_inout_argument_is_the_listed_field_and_the_step_comes_from_the_entry(make_switch):
    sw = make_switch("bound_action_args")
    add(sw, "MyIngress.kinds", [("exact", 1)], "MyIngress.count_into", 5)
    add(sw, "MyIngress.kinds", [("exact", 2)], "MyIngress.count_into", 0xFFFF)
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88BF)
    for kind, hits, misses in ((1, 15, 3), (2, 9, 3), (3, 10, 4)):
        sent = eth / Stats(kind=kind, hits=10, misses=3) / PAYLOAD
        expected = eth / Stats(kind=kind, hits=hits, misses=misses) / PAYLOAD
        assert sw.process(4, bytes(sent)) == [(4, bytes(expected))], kind


# --- typed_header_fields.p4 ----------------------------------------------------------------

class Typed(Packet):
    name = "Typed"
    fields_desc = [ByteField("mode", 1), BitField("enabled", 1, 1), BitField("pad", 0, 7),
                   SignedShortField("offset", 0), SignedShortField("position", 0)]


@pytest.mark.parametrize("mode,enabled,offset,position,result", [
    (1, 1, 5, 10, 15), (1, 1, -20, 10, -10), (1, 1, 30000, 30000, 32767), (1, 1, -30000, -30000, -32768),
    (2, 1, 5, 10, 0), (1, 0, 5, 10, 10), (7, 1, 5, 10, 10),
])
def test_int_bool_and_enum_header_fields(make_switch, mode, enabled, offset, position, result):
    sw = make_switch("typed_header_fields")
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88C0)
    sent = eth / Typed(mode=mode, enabled=enabled, offset=offset, position=position) / PAYLOAD
    expected = eth / Typed(mode=mode, enabled=enabled, offset=offset, position=result) / PAYLOAD
    assert sw.process(2, bytes(sent)) == [(2, bytes(expected))]


# --- ctor_params.p4 ------------------------------------------------------------------------

@pytest.mark.parametrize("port,src", [(1, "00:00:00:00:01:00"), (2, "00:00:00:00:02:00"), (3, H1_MAC)])
def test_each_control_instance_uses_its_constructor_arguments(make_switch, port, src):
    sw = make_switch("ctor_params")
    sent = Ether(dst=f"08:00:00:00:00:0{port}", src=H1_MAC) / PAYLOAD
    assert sw.process(5, bytes(sent)) == [(port, bytes(Ether(dst=sent.dst, src=src) / PAYLOAD))]


# --- value_set.p4 --------------------------------------------------------------------------

def test_value_set_members_decide_which_ethertypes_are_parsed(make_switch):
    sw = make_switch("value_set")
    tagged = Ether(dst=H2_MAC, src=H1_MAC, type=0x9100) / Raw(b"\x00\x07\x00\x05") / PAYLOAD
    # Empty set: nothing is tagged, every frame goes out of port 1.
    assert sw.process(3, bytes(tagged)) == [(1, bytes(tagged))]
    sw.state.value_sets["MyParser.tagged_types"].set([(("exact", 0x9100),), (("exact", 0x9200),)])
    assert sw.process(3, bytes(tagged)) == [(5, bytes(tagged))]
    other = Ether(dst=H2_MAC, src=H1_MAC, type=0x9300) / Raw(b"\x00\x07\x00\x05") / PAYLOAD
    assert sw.process(3, bytes(other)) == [(1, bytes(other))]
