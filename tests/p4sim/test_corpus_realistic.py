"""Corpus programs that do a whole job: a VXLAN tunnel endpoint, an L4 load balancer,
INT-style telemetry over a header stack, a TCP connection-tracking firewall, an
IPv6 router, an ARP/ICMP responder and an IP-in-IP tunnel.

Expected packets are built with Scapy's own layers for the protocols (VXLAN, IPv6,
ARP, ICMP), so lengths and checksums come from an independent implementation.
"""
from __future__ import annotations

import ipaddress

import pytest
from scapy.fields import ByteField, IntField, ShortField
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet, Raw

from tests.p4sim.oracles import H1_MAC, H2_MAC, H3_MAC, PAYLOAD, add, concat, crc16, crc32, ip, mac, rebuilt

# --- vxlan.p4 ------------------------------------------------------------------------------

VTEP_IP, REMOTE_IP = "192.0.2.1", "192.0.2.2"
VTEP_MAC, UNDERLAY_MAC = "00:00:00:00:0a:01", "00:00:00:00:0a:02"
VNI = 5000


def setup_vxlan(sw) -> None:
    add(sw, "MyIngress.port_vni", [("exact", 1)], "MyIngress.set_vni", VNI)
    add(sw, "MyIngress.l2_vni", [("exact", VNI), ("exact", mac(H2_MAC))], "MyIngress.encap",
        ip(VTEP_IP), ip(REMOTE_IP), mac(VTEP_MAC), mac(UNDERLAY_MAC), 9)
    add(sw, "MyIngress.l2_vni", [("exact", VNI), ("exact", mac(H3_MAC))], "MyIngress.local_forward", 3)
    add(sw, "MyIngress.local_vtep", [("exact", ip(VTEP_IP))], "MyIngress.decap")
    add(sw, "MyIngress.inner_l2", [("exact", VNI), ("exact", mac(H1_MAC))], "MyIngress.local_forward", 1)


def test_vxlan_encapsulates_a_local_frame_for_a_remote_mac(make_switch):
    sw = make_switch("vxlan")
    setup_vxlan(sw)
    frame = Ether(dst=H2_MAC, src=H1_MAC) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / PAYLOAD
    sport = 49152 + crc16(concat((mac(H2_MAC), 48), (mac(H1_MAC), 48), (0x0800, 16))) % 16384
    expected = Ether(dst=UNDERLAY_MAC, src=VTEP_MAC) / \
        IP(src=VTEP_IP, dst=REMOTE_IP, ttl=64, id=0, flags=0) / UDP(sport=sport, dport=4789, chksum=0) / \
        VXLAN(flags=0x08, vni=VNI) / frame
    assert sw.process(1, bytes(frame)) == [(9, bytes(expected))]


def test_vxlan_decapsulates_and_bridges_the_inner_frame(make_switch):
    sw = make_switch("vxlan")
    setup_vxlan(sw)
    inner = Ether(dst=H1_MAC, src=H2_MAC) / IP(src="10.0.0.2", dst="10.0.0.1") / UDP() / PAYLOAD
    tunnelled = Ether(dst=VTEP_MAC, src=UNDERLAY_MAC) / IP(src=REMOTE_IP, dst=VTEP_IP) / \
        UDP(sport=50000, dport=4789) / VXLAN(vni=VNI) / inner
    assert sw.process(9, bytes(tunnelled)) == [(1, bytes(inner))]


def test_vxlan_local_bridging_and_what_it_drops(make_switch):
    sw = make_switch("vxlan")
    setup_vxlan(sw)
    local = bytes(Ether(dst=H3_MAC, src=H1_MAC) / PAYLOAD)
    assert sw.process(1, local) == [(3, local)]
    assert sw.process(2, local) == []                       # port 2 is in no VNI
    inner = Ether(dst=H1_MAC, src=H2_MAC) / PAYLOAD
    other_vtep = Ether() / IP(src=REMOTE_IP, dst="192.0.2.9") / UDP(dport=4789) / VXLAN(vni=VNI) / inner
    assert sw.process(9, bytes(other_vtep)) == []
    wrong_vni = Ether() / IP(src=REMOTE_IP, dst=VTEP_IP) / UDP(dport=4789) / VXLAN(vni=VNI + 1) / inner
    assert sw.process(9, bytes(wrong_vni)) == []


# --- l4_lb.p4 ------------------------------------------------------------------------------

VIP, CLIENT = "10.10.10.10", "172.16.0.5"
BACKENDS = {7: ("10.0.1.1", H1_MAC, 1), 8: ("10.0.1.2", H2_MAC, 2), 9: ("10.0.1.3", H3_MAC, 3)}
CLIENT_MAC = "08:00:00:00:0c:0c"


def setup_lb(sw) -> None:
    add(sw, "MyIngress.vips", [("exact", ip(VIP)), ("exact", 80)], "MyIngress.pick_member", 7, 3)
    for member, (addr, mac_, port) in BACKENDS.items():
        add(sw, "MyIngress.members", [("exact", member)], "MyIngress.to_backend", ip(addr), mac(mac_), port)
        add(sw, "MyIngress.backends", [("exact", ip(addr)), ("exact", 80)], "MyIngress.from_backend",
            ip(VIP), mac(CLIENT_MAC), 4)


def lb_flow(sport: int, payload: bytes = b"GET / HTTP/1.0\r\n\r\n") -> Ether:
    return Ether(dst=H1_MAC, src=CLIENT_MAC) / IP(src=CLIENT, dst=VIP) / \
        TCP(sport=sport, dport=80, flags="PA", seq=1000 + sport) / Raw(payload)


def test_lb_sends_each_flow_to_the_backend_its_crc32_picks(make_switch):
    sw = make_switch("l4_lb")
    setup_lb(sw)
    used = set()
    for sport in range(40000, 40030):
        sent = lb_flow(sport)
        key = concat((ip(CLIENT), 32), (ip(VIP), 32), (6, 8), (sport, 16), (80, 16))
        addr, mac_, port = BACKENDS[7 + crc32(key) % 3]
        expected = sent.copy()
        expected[IP].dst, expected[Ether].dst = addr, mac_
        assert sw.process(4, bytes(sent)) == [(port, rebuilt(expected))], sport
        used.add(port)
    assert used == {1, 2, 3}


def test_lb_reply_from_a_backend_comes_from_the_vip(make_switch):
    sw = make_switch("l4_lb")
    setup_lb(sw)
    reply = Ether(dst="00:00:00:00:01:00", src=H2_MAC) / IP(src="10.0.1.2", dst=CLIENT) / \
        TCP(sport=80, dport=40001, flags="A", options=[("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]) / \
        Raw(b"HTTP/1.0 200 OK\r\n")
    expected = reply.copy()
    expected[IP].src, expected[Ether].dst = VIP, CLIENT_MAC
    assert sw.process(2, bytes(reply)) == [(4, rebuilt(expected))]


def test_lb_drops_unknown_services_and_non_tcp(make_switch):
    sw = make_switch("l4_lb")
    setup_lb(sw)
    other_port = lb_flow(40000)
    other_port[TCP].dport = 443
    assert sw.process(4, bytes(other_port)) == []
    assert sw.process(4, bytes(Ether() / IP(src=CLIENT, dst=VIP) / UDP(dport=80))) == []


# --- int_telemetry.p4 ----------------------------------------------------------------------

class IntShim(Packet):
    name = "IntShim"
    fields_desc = [ByteField("hop_count", 0), ByteField("max_hops", 4), ShortField("orig_dport", 0)]


class IntRecord(Packet):
    name = "IntRecord"
    fields_desc = [IntField("switch_id", 0), ShortField("ingress_port", 0), ShortField("egress_port", 0),
                   IntField("qdepth", 0)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


INT_SWITCH_ID, APP_PORT = 0x51, 9999
ROUTER = "00:00:00:00:01:00"


def setup_int(sw, sink_port: int | None = None) -> None:
    add(sw, "MyIngress.ipv4_lpm", [("lpm", ip("10.0.2.0"), 24)], "MyIngress.ipv4_forward", mac(H2_MAC), 2)
    sw.state.tables["MyEgress.int_transit"].set_default("MyEgress.add_record", (INT_SWITCH_ID,))
    if sink_port is not None:
        add(sw, "MyEgress.int_sink", [("exact", sink_port)], "MyEgress.strip_int")


def int_datagram(records: list[IntRecord], max_hops: int = 4, dst_mac: str = ROUTER, src_mac: str = H1_MAC,
                 ttl: int = 64) -> Ether:
    layers = IntShim(hop_count=len(records), max_hops=max_hops, orig_dport=APP_PORT)
    for r in records:
        layers = layers / r
    return Ether(dst=dst_mac, src=src_mac) / IP(src="10.0.1.1", dst="10.0.2.2", ttl=ttl) / \
        UDP(sport=4000, dport=5000, chksum=0) / layers / PAYLOAD


def lengths_fixed(pkt: Ether) -> bytes:
    """IPv4 length and checksum and UDP length recomputed; the UDP checksum stays 0 (none)."""
    pkt = pkt.copy()
    del pkt[IP].len, pkt[IP].chksum, pkt[UDP].len
    return bytes(pkt)


@pytest.mark.parametrize("earlier", [0, 1, 3])
def test_int_transit_pushes_its_record_on_top_and_grows_the_lengths(make_switch, earlier):
    sw = make_switch("int_telemetry")
    setup_int(sw)
    records = [IntRecord(switch_id=i, ingress_port=i, egress_port=i + 1, qdepth=i) for i in range(earlier)]
    mine = IntRecord(switch_id=INT_SWITCH_ID, ingress_port=1, egress_port=2, qdepth=0)   # no queues in p4sim
    expected = int_datagram([mine] + records, dst_mac=H2_MAC, src_mac=ROUTER, ttl=63)
    assert sw.process(1, bytes(int_datagram(records))) == [(2, lengths_fixed(expected))]


def test_int_full_trace_is_forwarded_without_a_new_record(make_switch):
    sw = make_switch("int_telemetry")
    setup_int(sw)
    full = [IntRecord(switch_id=i) for i in range(2)]
    sent = int_datagram(full, max_hops=2)
    expected = int_datagram(full, max_hops=2, dst_mac=H2_MAC, src_mac=ROUTER, ttl=63)
    assert sw.process(1, bytes(sent)) == [(2, lengths_fixed(expected))]


def test_int_sink_strips_everything_and_restores_the_application_datagram(make_switch):
    sw = make_switch("int_telemetry")
    setup_int(sw, sink_port=2)
    sent = int_datagram([IntRecord(switch_id=7), IntRecord(switch_id=6)])
    expected = Ether(dst=H2_MAC, src=ROUTER) / IP(src="10.0.1.1", dst="10.0.2.2", ttl=63) / \
        UDP(sport=4000, dport=APP_PORT, chksum=0) / PAYLOAD
    assert sw.process(1, bytes(sent)) == [(2, lengths_fixed(expected))]


def test_int_too_many_records_is_a_parser_error_and_dropped(make_switch):
    sw = make_switch("int_telemetry")
    setup_int(sw)
    assert sw.process(1, bytes(int_datagram([IntRecord()] * 5, max_hops=8))) == []


# --- conntrack.p4 --------------------------------------------------------------------------

IN_HOST, OUT_HOST = "10.0.1.1", "198.51.100.9"
CLOSED, SYN_SENT, ESTABLISHED = 0, 1, 2


def setup_conntrack(sw) -> None:
    add(sw, "MyIngress.routes", [("lpm", ip("10.0.1.0"), 24)], "MyIngress.set_port", 1)
    add(sw, "MyIngress.routes", [("lpm", 0, 0)], "MyIngress.set_port", 2)


def segment(outbound: bool, flags: str, in_port: int = 5000, out_port: int = 443) -> bytes:
    if outbound:
        return bytes(Ether() / IP(src=IN_HOST, dst=OUT_HOST) / TCP(sport=in_port, dport=out_port, flags=flags))
    return bytes(Ether() / IP(src=OUT_HOST, dst=IN_HOST) / TCP(sport=out_port, dport=in_port, flags=flags))


def conn_cell(in_port: int = 5000, out_port: int = 443) -> int:
    return crc32(concat((ip(IN_HOST), 32), (in_port, 16), (ip(OUT_HOST), 32), (out_port, 16))) % 1024


def test_conntrack_handshake_opens_the_way_back_and_fin_closes_it(make_switch):
    sw = make_switch("conntrack")
    setup_conntrack(sw)
    state = sw.state.registers["MyIngress.conn_state"]
    cell = conn_cell()
    steps = [(True, "S", SYN_SENT), (False, "SA", ESTABLISHED), (True, "A", ESTABLISHED),
             (False, "PA", ESTABLISHED), (False, "FA", CLOSED)]
    for outbound, flags, after in steps:
        sent = segment(outbound, flags)
        assert sw.process(1 if outbound else 2, sent) == [(2 if outbound else 1, sent)], flags
        assert state.read(cell) == after, flags
    # Closed: the outside may no longer send.
    assert sw.process(2, segment(False, "PA")) == []
    assert sum(state.values) == 0


def test_conntrack_drops_unsolicited_and_premature_outside_packets(make_switch):
    sw = make_switch("conntrack")
    setup_conntrack(sw)
    state = sw.state.registers["MyIngress.conn_state"]
    assert sw.process(2, segment(False, "S")) == []          # nobody asked
    assert sw.process(2, segment(False, "SA")) == []         # no SYN went out
    syn = segment(True, "S")
    assert sw.process(1, syn) == [(2, syn)]
    assert sw.process(2, segment(False, "A")) == []          # not yet established
    assert state.read(conn_cell()) == SYN_SENT
    # Another connection of the same host is tracked apart.
    assert sw.process(2, segment(False, "SA", in_port=5001)) == []
    assert sw.process(2, bytes(Ether() / IP(src=OUT_HOST, dst=IN_HOST) / UDP())) == []


def test_conntrack_rst_from_inside_closes(make_switch):
    sw = make_switch("conntrack")
    setup_conntrack(sw)
    for outbound, flags in ((True, "S"), (False, "SA"), (True, "R")):
        sw.process(1 if outbound else 2, segment(outbound, flags))
    assert sw.state.registers["MyIngress.conn_state"].read(conn_cell()) == CLOSED
    assert sw.process(2, segment(False, "A")) == []


# --- ipv6_router.p4 ------------------------------------------------------------------------

def setup_ipv6(sw) -> None:
    t = "MyIngress.ipv6_lpm"
    add(sw, t, [("lpm", int(ipaddress.IPv6Address("2001:db8::")), 32)], "MyIngress.ipv6_forward", mac(H2_MAC), 2)
    add(sw, t, [("lpm", int(ipaddress.IPv6Address("2001:db8:1::")), 48)], "MyIngress.ipv6_forward",
        mac(H3_MAC), 3)
    add(sw, t, [("lpm", int(ipaddress.IPv6Address("2001:db8:1::7")), 128)], "MyIngress.ipv6_forward",
        mac(H1_MAC), 4)


@pytest.mark.parametrize("dst,nhop,port", [("2001:db8:9::1", H2_MAC, 2), ("2001:db8:1::1", H3_MAC, 3),
                                           ("2001:db8:1::7", H1_MAC, 4)])
def test_ipv6_longest_prefix_and_hop_limit(make_switch, dst, nhop, port):
    sw = make_switch("ipv6_router")
    setup_ipv6(sw)
    sent = Ether(dst=ROUTER, src=H1_MAC) / IPv6(src="2001:db8:ff::1", dst=dst, hlim=5, fl=0xABCDE, tc=0x2E) / \
        UDP(sport=1, dport=2) / PAYLOAD
    expected = sent.copy()
    expected[Ether].dst, expected[Ether].src, expected[IPv6].hlim = nhop, ROUTER, 4
    assert sw.process(1, bytes(sent)) == [(port, bytes(expected))]


def test_ipv6_drops_expiring_unrouted_and_non_ipv6(make_switch):
    sw = make_switch("ipv6_router")
    setup_ipv6(sw)
    base = Ether(dst=ROUTER, src=H1_MAC)
    assert sw.process(1, bytes(base / IPv6(dst="2001:db8:1::1", hlim=1) / PAYLOAD)) == []
    assert sw.process(1, bytes(base / IPv6(dst="2001:db9::1") / PAYLOAD)) == []
    assert sw.process(1, bytes(base / IP(dst="10.0.0.1") / PAYLOAD)) == []


# --- arp_icmp_responder.p4 -----------------------------------------------------------------

SWITCH_IP, SWITCH_MAC = "10.0.0.254", "00:00:00:00:fe:01"
HOST_IP = "10.0.0.1"


def setup_responder(sw) -> None:
    add(sw, "MyIngress.arp_answers", [("exact", ip(SWITCH_IP))], "MyIngress.arp_reply", mac(SWITCH_MAC))
    add(sw, "MyIngress.icmp_answers", [("exact", ip(SWITCH_IP))], "MyIngress.echo_reply", mac(SWITCH_MAC))


def test_arp_request_for_the_switch_gets_a_reply(make_switch):
    sw = make_switch("arp_icmp_responder")
    setup_responder(sw)
    request = Ether(dst="ff:ff:ff:ff:ff:ff", src=H1_MAC) / ARP(op=1, hwsrc=H1_MAC, psrc=HOST_IP, pdst=SWITCH_IP)
    reply = Ether(dst=H1_MAC, src=SWITCH_MAC) / ARP(op=2, hwsrc=SWITCH_MAC, psrc=SWITCH_IP, hwdst=H1_MAC,
                                                    pdst=HOST_IP)
    assert sw.process(3, bytes(request)) == [(3, bytes(reply))]


@pytest.mark.parametrize("payload", [b"abcdefgh" * 7, b"odd", b""])
def test_echo_request_gets_an_echo_reply_with_the_payload(make_switch, payload):
    sw = make_switch("arp_icmp_responder")
    setup_responder(sw)
    request = Ether(dst=SWITCH_MAC, src=H1_MAC) / IP(src=HOST_IP, dst=SWITCH_IP, ttl=17, id=99) / \
        ICMP(type=8, id=0x77, seq=3) / Raw(payload)
    reply = Ether(dst=H1_MAC, src=SWITCH_MAC) / IP(src=SWITCH_IP, dst=HOST_IP, ttl=64, id=99) / \
        ICMP(type=0, id=0x77, seq=3) / Raw(payload)
    assert sw.process(2, bytes(request)) == [(2, bytes(reply))]


def test_responder_ignores_other_addresses_and_replies(make_switch):
    sw = make_switch("arp_icmp_responder")
    setup_responder(sw)
    assert sw.process(1, bytes(Ether() / ARP(op=1, pdst="10.0.0.9"))) == []
    assert sw.process(1, bytes(Ether() / ARP(op=2, pdst=SWITCH_IP))) == []
    assert sw.process(1, bytes(Ether() / IP(dst=SWITCH_IP) / ICMP(type=0))) == []
    assert sw.process(1, bytes(Ether() / IP(dst="10.0.0.9") / ICMP(type=8))) == []


# --- ipip.p4 -------------------------------------------------------------------------------

TUNNEL_LOCAL, TUNNEL_REMOTE = "192.0.2.1", "192.0.2.2"


def setup_ipip(sw) -> None:
    t = "MyIngress.routes"
    add(sw, t, [("lpm", ip("10.0.1.0"), 24)], "MyIngress.forward", mac(H1_MAC), 1)
    add(sw, t, [("lpm", ip("10.0.2.0"), 24)], "MyIngress.encap", ip(TUNNEL_LOCAL), ip(TUNNEL_REMOTE),
        mac(H2_MAC), 2)
    add(sw, t, [("lpm", ip("192.0.2.0"), 24)], "MyIngress.forward", mac(H2_MAC), 2)
    add(sw, "MyIngress.local_endpoints", [("exact", ip(TUNNEL_LOCAL))], "MyIngress.decap")


def test_ipip_encapsulates_with_an_outer_header_covering_the_packet(make_switch):
    sw = make_switch("ipip")
    setup_ipip(sw)
    inner = IP(src="10.0.1.1", dst="10.0.2.2", ttl=20, tos=0xB8) / UDP(sport=7, dport=9) / PAYLOAD
    sent = Ether(dst=ROUTER, src=H1_MAC) / inner
    hop = inner.copy()
    hop.ttl = 19
    expected = Ether(dst=H2_MAC, src=ROUTER) / \
        IP(src=TUNNEL_LOCAL, dst=TUNNEL_REMOTE, ttl=64, tos=0xB8, id=0, flags=0, proto=4) / hop
    assert sw.process(1, bytes(sent)) == [(2, rebuilt(expected))]


def test_ipip_decapsulates_for_this_endpoint_and_routes_the_inner_packet(make_switch):
    sw = make_switch("ipip")
    setup_ipip(sw)
    inner = IP(src="10.0.2.2", dst="10.0.1.1", ttl=20) / UDP(sport=9, dport=7) / PAYLOAD
    sent = Ether(dst=ROUTER, src=H2_MAC) / IP(src=TUNNEL_REMOTE, dst=TUNNEL_LOCAL, proto=4) / inner
    expected = Ether(dst=H1_MAC, src=ROUTER) / inner.copy()
    expected[IP].ttl = 19
    assert sw.process(2, bytes(sent)) == [(1, rebuilt(expected))]


def test_ipip_transit_tunnel_is_routed_on_its_outer_header(make_switch):
    sw = make_switch("ipip")
    setup_ipip(sw)
    inner = IP(src="10.0.9.9", dst="10.0.8.8", ttl=20) / UDP() / PAYLOAD
    sent = Ether(dst=ROUTER, src=H1_MAC) / IP(src="192.0.2.7", dst="192.0.2.9", proto=4, ttl=30) / inner
    expected = sent.copy()
    expected[Ether].dst, expected[Ether].src = H2_MAC, ROUTER
    expected[IP].ttl = 29
    del expected[IP].chksum
    assert sw.process(1, bytes(sent)) == [(2, bytes(expected))]
    assert sw.process(1, bytes(Ether() / IP(dst="10.0.2.2", ttl=1) / UDP())) == []
