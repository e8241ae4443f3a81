"""Corpus programs on v1model's traffic manager: multicast groups with rids,
ingress-to-egress and egress-to-egress clones with preserved metadata, resubmit,
recirculate, truncate, and digests.

Where the spec leaves the behaviour to the target, the expected packets follow
BMv2's simple_switch (targets/simple_switch/simple_switch.cpp, ingress_thread and
egress_thread): an I2E clone is the received packet parsed again, with the
@field_list metadata as it is at the END of ingress; an E2E clone copies the headers
as egress left them and resets the other metadata; a resubmitted packet is parsed
again from the received bytes; a recirculated one from the deparsed bytes; replicas
carry their rid in egress_rid and the ingress port is not pruned.
"""
from __future__ import annotations

from scapy.fields import ByteField, ShortField
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Packet

from p4sim.state import CloneSession
from tests.p4sim.oracles import H1_MAC, H2_MAC, H3_MAC, PAYLOAD, add, mac

# --- multicast_rid.p4 ----------------------------------------------------------------------


def test_multicast_replica_per_port_and_rid_tagged_with_its_vlan(make_switch):
    sw = make_switch("multicast_rid")
    # Port 1 is a trunk carrying VLANs 10 and 20; port 2 is untagged; the ingress port 3 is
    # a member too and is not pruned.
    sw.state.multicast_groups[1] = [(1, 10), (2, 0), (1, 20), (3, 0)]
    sent = Ether(dst="08:00:00:00:09:99", src=H1_MAC, type=0x0800) / PAYLOAD
    untagged = bytes(sent)

    def tagged(vid: int) -> bytes:
        return bytes(Ether(dst=sent.dst, src=sent.src) / Dot1Q(vlan=vid, type=0x0800) / PAYLOAD)

    assert sorted(sw.process(3, bytes(sent))) == sorted(
        [(1, tagged(10)), (2, untagged), (1, tagged(20)), (3, untagged)])


def test_multicast_known_destination_is_unicast_and_empty_group_sends_nothing(make_switch):
    sw = make_switch("multicast_rid")
    add(sw, "MyIngress.dmac", [("exact", mac(H2_MAC))], "MyIngress.set_port", 2)
    add(sw, "MyIngress.dmac", [("exact", mac(H3_MAC))], "MyIngress.flood", 5)
    sent = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    assert sw.process(1, sent) == [(2, sent)]
    sw.state.multicast_groups[5] = []
    assert sw.process(1, bytes(Ether(dst=H3_MAC, src=H1_MAC) / PAYLOAD)) == []
    assert sw.process(1, bytes(Ether(dst="08:00:00:00:09:99", src=H1_MAC) / PAYLOAD)) == []  # group 1 unset


# --- clone_i2e.p4 --------------------------------------------------------------------------

class Mirror(Packet):
    name = "Mirror"
    fields_desc = [ShortField("orig_port", 0), ShortField("type", 0x88B9)]


SWITCH_MAC = "00:00:00:00:ab:01"


def setup_mirror(sw) -> None:
    add(sw, "MyIngress.dmac", [("exact", mac(H2_MAC))], "MyIngress.forward", 2)
    add(sw, "MyIngress.mirrored_ports", [("exact", 1)], "MyIngress.mirror", 7)
    sw.state.clone_sessions[7] = CloneSession([(9, 0)])


def test_i2e_clone_is_the_received_frame_with_the_preserved_field(make_switch):
    sw = make_switch("clone_i2e")
    setup_mirror(sw)
    sent = Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD
    forwarded = bytes(Ether(dst=H2_MAC, src=SWITCH_MAC) / PAYLOAD)
    copy = bytes(Mirror(orig_port=1)) + bytes(sent)
    assert sorted(sw.process(1, bytes(sent))) == [(2, forwarded), (9, copy)]


def test_i2e_clone_of_a_dropped_frame_still_leaves(make_switch):
    sw = make_switch("clone_i2e")
    setup_mirror(sw)
    sent = Ether(dst=H3_MAC, src=H1_MAC) / PAYLOAD          # no dmac entry: dropped
    assert sw.process(1, bytes(sent)) == [(9, bytes(Mirror(orig_port=1)) + bytes(sent))]


def test_i2e_unmirrored_port_and_unconfigured_session_send_no_copy(make_switch):
    sw = make_switch("clone_i2e")
    setup_mirror(sw)
    sent = Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD
    forwarded = bytes(Ether(dst=H2_MAC, src=SWITCH_MAC) / PAYLOAD)
    assert sw.process(4, bytes(sent)) == [(2, forwarded)]
    del sw.state.clone_sessions[7]
    assert sw.process(1, bytes(sent)) == [(2, forwarded)]


# --- clone_e2e.p4 --------------------------------------------------------------------------

class Monitor(Packet):
    name = "Monitor"
    fields_desc = [ShortField("orig_egress_port", 0)]


PORT2_MAC = "00:00:00:00:02:00"


def test_e2e_clone_carries_the_egress_changes_and_the_preserved_port(make_switch):
    sw = make_switch("clone_e2e")
    add(sw, "MyEgress.port_mac", [("exact", 2)], "MyEgress.set_src_mac", mac(PORT2_MAC))
    add(sw, "MyEgress.monitored", [("exact", 2)], "MyEgress.monitor", 3)
    sw.state.clone_sessions[3] = CloneSession([(8, 0)])
    sent = Ether(dst="08:00:00:00:00:02", src=H1_MAC) / PAYLOAD
    rewritten = Ether(dst=sent.dst, src=PORT2_MAC)
    # The monitor header sits between Ethernet and the payload, where the deparser emits it.
    assert sorted(sw.process(1, bytes(sent))) == [
        (2, bytes(rewritten / PAYLOAD)), (8, bytes(rewritten / Monitor(orig_egress_port=2) / PAYLOAD))]
    other = bytes(Ether(dst="08:00:00:00:00:04", src=H1_MAC) / PAYLOAD)
    assert sw.process(1, other) == [(4, other)]


# --- resubmit.p4 ---------------------------------------------------------------------------

def test_resubmit_second_pass_uses_preserved_metadata_and_original_bytes(make_switch):
    sw = make_switch("resubmit")
    add(sw, "MyIngress.services", [("exact", mac(H2_MAC))], "MyIngress.set_service", 42)
    add(sw, "MyIngress.service_ports", [("exact", 42)], "MyIngress.set_port", 6)
    sent = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    # The first pass zeroed the source MAC; the resubmitted packet does not show it.
    assert sw.process(1, sent) == [(6, sent)]
    assert sw.process(1, bytes(Ether(dst=H3_MAC, src=H1_MAC) / PAYLOAD)) == []   # no service
    sw.state.tables["MyIngress.service_ports"].delete((("exact", 42),))
    assert sw.process(1, sent) == []                                            # no port for it


# --- recirculate.p4 ------------------------------------------------------------------------

class Loop(Packet):
    name = "Loop"
    fields_desc = [ByteField("rounds", 0), ByteField("ingress_passes", 0)]


def test_recirculation_loops_the_deparsed_packet_with_preserved_metadata(make_switch):
    sw = make_switch("recirculate")
    eth = Ether(dst=H2_MAC, src=H1_MAC, type=0x88BA)
    for rounds in range(4):
        sent = eth / Loop(rounds=rounds) / PAYLOAD
        # Every pass through egress counts a round down; every ingress pass counts up.
        expected = eth / Loop(rounds=0, ingress_passes=rounds + 1) / PAYLOAD
        assert sw.process(1, bytes(sent)) == [(2, bytes(expected))], rounds


# --- truncate.p4 ---------------------------------------------------------------------------

def test_truncate_cuts_frames_to_the_sampling_port_only(make_switch):
    sw = make_switch("truncate")
    add(sw, "MyEgress.sampling_ports", [("exact", 5)], "MyEgress.snapshot", 20)
    add(sw, "MyEgress.sampling_ports", [("exact", 6)], "MyEgress.snapshot", 1000)
    for port, limit in ((5, 20), (6, None), (7, None)):
        sent = bytes(Ether(dst=f"08:00:00:00:00:0{port}", src=H1_MAC) / PAYLOAD)
        assert sw.process(1, sent) == [(port, sent[:limit])]


def test_truncate_in_ingress_cuts_the_unicast_packet_and_the_shorter_length_wins(make_switch):
    """BMv2's Packet::truncate (include/bm/bm_sim/packet.h) marks the packet object,
    which simple_switch hands from ingress to egress for unicast, and keeps the
    smallest length it was given."""
    sw = make_switch("truncate")
    add(sw, "MyIngress.sampled_sources", [("exact", mac(H1_MAC))], "MyIngress.snapshot", 30)
    add(sw, "MyEgress.sampling_ports", [("exact", 5)], "MyEgress.snapshot", 20)
    add(sw, "MyEgress.sampling_ports", [("exact", 6)], "MyEgress.snapshot", 40)
    for port, limit in ((7, 30), (5, 20), (6, 30)):
        sent = bytes(Ether(dst=f"08:00:00:00:00:0{port}", src=H1_MAC) / PAYLOAD / PAYLOAD)
        assert sw.process(1, sent) == [(port, sent[:limit])], port
    other = bytes(Ether(dst="08:00:00:00:00:07", src=H2_MAC) / PAYLOAD / PAYLOAD)
    assert sw.process(1, other) == [(7, other)]


# --- digest_learning.p4 --------------------------------------------------------------------

def test_digest_reports_unknown_source_once_per_frame_until_learned(make_switch):
    digests = []
    sw = make_switch("digest_learning", on_digest=lambda name, values: digests.append((name, values)))
    sw.state.multicast_groups[1] = [(1, 0), (2, 0), (3, 0)]
    sent = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    assert sorted(sw.process(1, sent)) == [(1, sent), (2, sent), (3, sent)]
    assert digests == [("mac_learn_digest_t", (mac(H1_MAC), 1))]
    # The controller learns H1 on port 1 and H2's port: no more digests for H1 there.
    add(sw, "MyIngress.learned", [("exact", mac(H1_MAC)), ("exact", 1)], "NoAction")
    add(sw, "MyIngress.dmac", [("exact", mac(H2_MAC))], "MyIngress.forward", 2)
    assert sw.process(1, sent) == [(2, sent)]
    assert len(digests) == 1
    # H1 moving to port 3 is news again.
    assert sw.process(3, sent) == [(2, sent)]
    assert digests[1:] == [("mac_learn_digest_t", (mac(H1_MAC), 3))]
