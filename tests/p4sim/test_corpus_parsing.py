"""Corpus programs on the parser: select keysets (tuples, masks, ranges, `_`,
default), lookahead, parser errors left to ingress, an MPLS header stack with
.next/.last/push_front/pop_front, and VLAN tags added and removed.

Where a parser error happens BMv2 does not drop: ingress runs with
`standard_metadata.parser_error` set and the failing header invalid, and the bytes
from the failing extract on leave as payload (simple_switch's parser in
src/bm_sim/parser.cpp records the error and stops; see also
../shared/reference/bmv2-1.15.0/README.md).
"""
from __future__ import annotations

import pytest
from scapy.contrib.mpls import MPLS
from scapy.fields import BitField, ByteField, IntField, ShortField
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet, Raw

from tests.p4sim.oracles import H1_MAC, H2_MAC, H3_MAC, PAYLOAD, add, mac

# --- select_masks.p4 -----------------------------------------------------------------------


class Kind(Packet):
    name = "Kind"
    fields_desc = [ByteField("kind", 0), ByteField("sub", 0)]


@pytest.mark.parametrize("kind,sub,port", [
    (0x01, 0x01, 1),          # the exact pair
    (0x01, 0x03, 6),          # kind 1 with another odd sub: default
    (0x10, 0x55, 2), (0x1F, 0x00, 2),      # masked: high nibble 1
    (0x20, 0x07, 3), (0x2F, 0x07, 3),      # range and exact sub
    (0x25, 0x08, 4),                       # range, any sub
    (0x30, 0x08, 5), (0x01, 0x02, 5),      # even sub below 0x80 (mask 0x81)
    (0x30, 0x88, 6), (0x30, 0x09, 6), (0xFF, 0xFF, 6),
])
def test_select_tries_cases_in_order_with_masks_and_ranges(make_switch, kind, sub, port):
    sw = make_switch("select_masks")
    sent = bytes(Ether(dst=H2_MAC, src=H1_MAC, type=0x88B6) / Kind(kind=kind, sub=sub) / PAYLOAD)
    assert sw.process(9, sent) == [(port, sent)]


def test_select_program_drops_frames_without_the_header(make_switch):
    sw = make_switch("select_masks")
    assert sw.process(9, bytes(Ether(dst=H2_MAC, src=H1_MAC, type=0x0800) / PAYLOAD)) == []
    assert sw.process(9, bytes(Ether(dst=H2_MAC, src=H1_MAC, type=0x88B6)) + b"\x01") == []


# --- lookahead.p4 --------------------------------------------------------------------------

class TagV1(Packet):
    name = "TagV1"
    fields_desc = [BitField("version", 1, 4), BitField("flags", 0, 4), ByteField("channel", 0),
                   ShortField("length", 0)]


class TagV2(Packet):
    name = "TagV2"
    fields_desc = [BitField("version", 2, 4), BitField("flags", 0, 4), ByteField("channel", 0),
                   ShortField("length", 0), IntField("stream", 0)]


def test_lookahead_picks_the_version_without_consuming_it(make_switch):
    sw = make_switch("lookahead")
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88B7)
    v1 = eth / TagV1(flags=5, channel=9, length=17) / PAYLOAD
    assert sw.process(3, bytes(v1)) == [(1, bytes(eth / TagV2(flags=5, channel=9, length=21) / PAYLOAD))]
    v2 = bytes(eth / TagV2(flags=3, channel=1, length=99, stream=0xCAFE) / PAYLOAD)
    assert sw.process(3, v2) == [(2, v2)]


def test_lookahead_unknown_version_and_empty_tag_are_dropped(make_switch):
    sw = make_switch("lookahead")
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88B7)
    assert sw.process(3, bytes(eth / TagV1(version=3) / PAYLOAD)) == []
    # Nothing to look at: lookahead fails with PacketTooShort and no tag is valid.
    assert sw.process(3, bytes(eth)) == []


# --- parser_errors.p4 ----------------------------------------------------------------------

class Msg(Packet):
    name = "Msg"
    fields_desc = [ByteField("version", 1), ByteField("length", 4), ShortField("id", 0)]


@pytest.mark.parametrize("data,port", [
    (bytes(Msg(id=7)) + b"WORD" + b"tail", 1),       # NoError
    (bytes(Msg(id=7)) + b"WO", 2),                   # body cut short: PacketTooShort
    (bytes(Msg(version=2)) + b"WORD", 3),            # verify(version == 1) fails
    (bytes(Msg(length=0)) + b"WORD", 4),             # the second verify fails
    (bytes(Msg(version=2, length=0)) + b"WORD", 3),  # the first failure is the one reported
    (bytes(Msg())[:3], 2),                           # msg itself too short
])
def test_parser_error_reaches_ingress_and_unparsed_bytes_stay_payload(make_switch, data, port):
    sw = make_switch("parser_errors")
    sent = bytes(Ether(dst=H2_MAC, src=H1_MAC, type=0x88B8)) + data
    assert sw.process(5, sent) == [(port, sent)]
    assert sw.stats["malformed"] == (port != 1)


# --- mpls_stack.p4 -------------------------------------------------------------------------

def labelled(*labels: tuple[int, int], eth_src: str = H1_MAC) -> Packet:
    """A frame with MPLS labels (label, ttl), top first, over IPv4."""
    pkt = Ether(dst=H2_MAC, src=eth_src, type=0x8847)
    for i, (label, ttl) in enumerate(labels):
        pkt = pkt / MPLS(label=label, cos=5, s=int(i == len(labels) - 1), ttl=ttl)
    return pkt / IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / PAYLOAD


def setup_lfib(sw) -> None:
    add(sw, "MyIngress.lfib", [("exact", 100)], "MyIngress.swap", 200, 2)
    add(sw, "MyIngress.lfib", [("exact", 101)], "MyIngress.push", 300, 3)
    add(sw, "MyIngress.lfib", [("exact", 102)], "MyIngress.pop", 4)


def test_mpls_swap_push_and_pop_of_the_top_label(make_switch):
    sw = make_switch("mpls_stack")
    setup_lfib(sw)
    assert sw.process(1, bytes(labelled((100, 64), (7, 9)))) == [(2, bytes(labelled((200, 63), (7, 9))))]
    assert sw.process(1, bytes(labelled((101, 64), (7, 9)))) == [
        (3, bytes(labelled((300, 63), (101, 64), (7, 9))))]
    assert sw.process(1, bytes(labelled((102, 64), (7, 9)))) == [(4, bytes(labelled((7, 9))))]


def test_mpls_pop_of_the_last_label_restores_ipv4(make_switch):
    sw = make_switch("mpls_stack")
    setup_lfib(sw)
    sent = labelled((102, 64))
    expected = Ether(dst=H2_MAC, src=H1_MAC, type=0x0800) / sent[IP]
    assert sw.process(1, bytes(sent)) == [(4, bytes(expected))]


def test_mpls_push_onto_a_full_stack_drops_the_bottom_label(make_switch):
    """push_front on a full stack shifts the last element out (the P4_16 spec on header stacks)."""
    sw = make_switch("mpls_stack")
    setup_lfib(sw)
    sent = labelled((101, 64), (1, 1), (2, 2), (3, 3))
    ((port, out),) = sw.process(1, bytes(sent))
    assert port == 3
    # The frame keeps 4 labels; the bottom one (3) is gone, so (2, 2) is no longer marked bos
    # and IPv4 follows a label without the bottom-of-stack bit.
    expected = Ether(dst=H2_MAC, src=H1_MAC, type=0x8847) / MPLS(label=300, cos=5, s=0, ttl=63) / \
        MPLS(label=101, cos=5, s=0, ttl=64) / MPLS(label=1, cos=5, s=0, ttl=1) / \
        MPLS(label=2, cos=5, s=0, ttl=2) / Raw(bytes(sent[IP]))
    assert out == bytes(expected)


def test_mpls_too_many_labels_unknown_label_and_plain_ipv4_are_dropped(make_switch):
    sw = make_switch("mpls_stack")
    setup_lfib(sw)
    assert sw.process(1, bytes(labelled((100, 64), (1, 1), (2, 2), (3, 3), (4, 4)))) == []
    assert sw.process(1, bytes(labelled((555, 64)))) == []
    assert sw.process(1, bytes(Ether(dst=H2_MAC, src=H1_MAC) / IP() / UDP())) == []


# --- vlan_tagging.p4 -----------------------------------------------------------------------

TRUNK, ACCESS_10, ACCESS_20 = 1, 2, 3


def setup_vlans(sw) -> None:
    add(sw, "MyIngress.access_vlan", [("exact", ACCESS_10)], "MyIngress.set_access_vlan", 10)
    add(sw, "MyIngress.access_vlan", [("exact", ACCESS_20)], "MyIngress.set_access_vlan", 20)
    t = "MyIngress.dmac_vlan"
    add(sw, t, [("exact", mac(H1_MAC)), ("exact", 10)], "MyIngress.to_access", ACCESS_10)
    add(sw, t, [("exact", mac(H2_MAC)), ("exact", 10)], "MyIngress.to_trunk", TRUNK)
    add(sw, t, [("exact", mac(H3_MAC)), ("exact", 20)], "MyIngress.to_trunk", TRUNK)


def test_vlan_access_frame_is_tagged_onto_the_trunk(make_switch):
    sw = make_switch("vlan_tagging")
    setup_vlans(sw)
    sent = Ether(dst=H2_MAC, src=H1_MAC) / IP() / PAYLOAD
    expected = Ether(dst=H2_MAC, src=H1_MAC) / Dot1Q(vlan=10) / IP() / PAYLOAD
    assert sw.process(ACCESS_10, bytes(sent)) == [(TRUNK, bytes(expected))]


def test_vlan_trunk_frame_is_untagged_onto_the_access_port(make_switch):
    sw = make_switch("vlan_tagging")
    setup_vlans(sw)
    sent = Ether(dst=H1_MAC, src=H2_MAC) / Dot1Q(vlan=10, prio=5) / IP() / PAYLOAD
    assert sw.process(TRUNK, bytes(sent)) == [(ACCESS_10, bytes(Ether(dst=H1_MAC, src=H2_MAC) / IP() / PAYLOAD))]


def test_vlan_keeps_vlans_apart_and_tagged_transit_is_unchanged(make_switch):
    sw = make_switch("vlan_tagging")
    setup_vlans(sw)
    # H1 is in VLAN 10 only: from the VLAN-20 access port it is unknown.
    assert sw.process(ACCESS_20, bytes(Ether(dst=H1_MAC, src=H3_MAC) / PAYLOAD)) == []
    # From an unknown access port: no VLAN, dropped.
    assert sw.process(7, bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)) == []
    transit = bytes(Ether(dst=H3_MAC, src=H1_MAC) / Dot1Q(vlan=20) / PAYLOAD)
    assert sw.process(TRUNK, transit) == [(TRUNK, transit)]
