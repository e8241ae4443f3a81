"""Corpus programs on stateful externs: direct and indirect counters, indirect and
direct meters, a register read-modify-write, table entries that age, and random.

Packets go through `Switch.process`; the state is read back from `sw.state` as the
controller would read it. Counter bytes are the frame's length as received, as in
BMv2 (include/bm/bm_sim/counters.h and match_tables.h add
`pkt.get_ingress_length()` per count).
"""
from __future__ import annotations

import pytest
from scapy.fields import IntField, ShortField
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from p4sim.state import CloneSession
from tests.p4sim.oracles import H1_MAC, H2_MAC, H3_MAC, PAYLOAD, add, mac

# --- direct_counter.p4 ---------------------------------------------------------------------


def test_direct_counter_counts_hits_per_entry_and_no_misses(make_switch):
    sw = make_switch("direct_counter")
    t = "MyIngress.dmac"
    add(sw, t, [("exact", mac(H2_MAC))], "MyIngress.forward", 2)
    add(sw, t, [("exact", mac(H3_MAC))], "MyIngress.forward", 3)
    to_h2 = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    to_h3 = bytes(Ether(dst=H3_MAC, src=H1_MAC) / PAYLOAD / PAYLOAD)
    for _ in range(3):
        assert sw.process(1, to_h2) == [(2, to_h2)]
    assert sw.process(1, to_h3) == [(3, to_h3)]
    assert sw.process(1, bytes(Ether(dst="08:00:00:00:09:99", src=H1_MAC) / PAYLOAD)) == []
    table = sw.state.tables[t]
    counts = {e.match: (e.packets, e.bytes) for e in table.entries()}
    assert counts == {(("exact", mac(H2_MAC)),): (3, 3 * len(to_h2)),
                      (("exact", mac(H3_MAC)),): (1, len(to_h3))}


# --- indirect_counter.p4 -------------------------------------------------------------------

def test_indirect_counters_count_frames_per_ingress_and_bytes_per_egress_port(make_switch):
    sw = make_switch("indirect_counter")
    frames = [(1, "08:00:00:00:00:02", 0), (1, "08:00:00:00:00:03", 20), (4, "08:00:00:00:00:02", 40)]
    sent_bytes = {2: 0, 3: 0}
    for in_port, dst, pad in frames:
        frame = bytes(Ether(dst=dst, src=H1_MAC) / PAYLOAD) + bytes(pad)
        out_port = mac(dst) & 0xFF
        assert sw.process(in_port, frame) == [(out_port, frame)]
        sent_bytes[out_port] += len(frame)
    rx, tx = sw.state.counters["MyIngress.rx_frames"], sw.state.counters["MyEgress.tx_bytes"]
    assert (rx.packets[1], rx.packets[4], sum(rx.packets)) == (2, 1, 3)
    assert {p: tx.bytes[p] for p in (2, 3)} == sent_bytes and sum(tx.bytes) == sum(sent_bytes.values())


# --- meter_indirect.p4 ---------------------------------------------------------------------
# Rates of 0 keep the buckets from refilling, so the colours depend on burst sizes only:
# committed burst 2 and peak burst 3 give green, green, yellow, red (RFC 2698, as BMv2's
# bm_sim/meters.cpp marks: red if the peak bucket is short, else yellow if the committed one is).


def test_indirect_meter_marks_green_then_yellow_then_red(make_switch):
    sw = make_switch("meter_indirect")
    add(sw, "MyIngress.policed", [("exact", mac(H1_MAC))], "MyIngress.police", 5)
    sw.state.meters["MyIngress.source_meter"].set_config(5, 0, 2, 0, 3)
    frame = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    assert [sw.process(1, frame) for _ in range(5)] == [[(2, frame)], [(2, frame)], [(3, frame)], [], []]
    other = bytes(Ether(dst=H2_MAC, src=H3_MAC) / PAYLOAD)     # not policed
    assert sw.process(1, other) == [(1, other)]


def test_unconfigured_meter_cell_marks_everything_green(make_switch):
    sw = make_switch("meter_indirect")
    add(sw, "MyIngress.policed", [("exact", mac(H1_MAC))], "MyIngress.police", 6)
    sw.state.meters["MyIngress.source_meter"].set_config(5, 0, 1, 0, 1)     # another cell
    frame = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    assert all(sw.process(1, frame) == [(2, frame)] for _ in range(5))


# --- meter_direct.p4 -----------------------------------------------------------------------

def test_direct_byte_meter_colours_each_entrys_flow_separately(make_switch):
    sw = make_switch("meter_direct")
    t = "MyIngress.flows"
    add(sw, t, [("exact", mac(H2_MAC))], "MyIngress.forward_metered", 2)
    add(sw, t, [("exact", mac(H3_MAC))], "MyIngress.forward_metered", 3)
    frame = Ether(dst=H2_MAC, src=H1_MAC, type=0x1230) / PAYLOAD
    size = len(frame)
    # One frame's worth of committed burst, two of peak burst, no refill.
    sw.state.tables[t].get((("exact", mac(H2_MAC)),)).meter.set_config(0, size, 0, 2 * size)

    def coloured(color: int) -> bytes:
        out = frame.copy()
        out[Ether].type = 0x1230 | color
        return bytes(out)

    assert [sw.process(1, bytes(frame)) for _ in range(4)] == [
        [(2, coloured(0))], [(2, coloured(1))], [(2, coloured(2))], [(2, coloured(2))]]
    # The other entry's meter is unconfigured: green.
    other = Ether(dst=H3_MAC, src=H1_MAC, type=0x1230) / PAYLOAD
    assert sw.process(1, bytes(other)) == [(3, bytes(other))]


# --- register_rmw.p4 -----------------------------------------------------------------------

class Seq(Packet):
    name = "Seq"
    fields_desc = [IntField("seq", 0), ShortField("type", 0)]


def stamped(frame: Packet, seq: int) -> bytes:
    return bytes(Ether(dst=frame.dst, src=frame.src, type=0x88B5) / Seq(seq=seq, type=frame.type) /
                 frame.payload)


def test_register_counts_per_port_and_is_read_back(make_switch):
    sw = make_switch("register_rmw")
    frame = Ether(dst=H2_MAC, src=H1_MAC, type=0x0800) / PAYLOAD
    assert [sw.process(3, bytes(frame)) for _ in range(3)] == [[(1, stamped(frame, n))] for n in (1, 2, 3)]
    assert sw.process(7, bytes(frame)) == [(1, stamped(frame, 1))]
    values = sw.state.registers["MyIngress.last_seq"].values
    assert (values[3], values[7], sum(values)) == (3, 1, 4)


def test_register_value_written_by_the_controller_is_read_and_wraps(make_switch):
    sw = make_switch("register_rmw")
    sw.state.registers["MyIngress.last_seq"].write(2, 0xFFFFFFFE)
    frame = Ether(dst=H2_MAC, src=H1_MAC, type=0x86DD) / PAYLOAD
    assert sw.process(2, bytes(frame)) == [(1, stamped(frame, 0xFFFFFFFF))]
    assert sw.process(2, bytes(frame)) == [(1, stamped(frame, 0))]
    assert sw.state.registers["MyIngress.last_seq"].read(2) == 0


# --- idle_timeout.p4 -----------------------------------------------------------------------

def test_idle_timeout_table_records_the_last_hit_of_each_entry(make_switch):
    sw = make_switch("idle_timeout")
    assert sw.program.info.tables["MyIngress.hosts"].support_timeout
    t = "MyIngress.hosts"
    add(sw, t, [("exact", mac(H2_MAC))], "MyIngress.forward", 2)
    add(sw, t, [("exact", mac(H3_MAC))], "MyIngress.forward", 3)
    table = sw.state.tables[t]
    h2, h3 = (table.get((("exact", mac(m)),)) for m in (H2_MAC, H3_MAC))
    before = (h2.last_hit_ns, h3.last_hit_ns)
    frame = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    assert sw.process(1, frame) == [(2, frame)]
    assert h2.last_hit_ns > before[0] and h3.last_hit_ns == before[1]
    assert sw.process(1, bytes(Ether(dst="08:00:00:00:09:99") / PAYLOAD)) == []
    assert h3.last_hit_ns == before[1]


# --- random_sampling.p4 --------------------------------------------------------------------

@pytest.mark.parametrize("rate,low,high", [(0, 0, 0), (64, 60, 140), (256, 400, 400)])
def test_random_roll_samples_the_configured_share_of_frames(make_switch, rate, low, high):
    """random(out, 0, 255) is uniform over the closed range (v1model.p4); with rate 64
    about a quarter of 400 frames are cloned (seeded, so the count is reproducible)."""
    sw = make_switch("random_sampling", seed=7)
    sw.state.tables["MyIngress.sampling"].set_default("MyIngress.set_rate", (rate,))
    sw.state.clone_sessions[9] = CloneSession([(5, 0)])
    frame = bytes(Ether(dst=H2_MAC, src=H1_MAC) / PAYLOAD)
    sampled = 0
    for _ in range(400):
        out = sw.process(1, frame)
        assert (2, frame) in out and all(o == (5, frame) for o in out if o[0] != 2)
        sampled += len(out) - 1
    assert low <= sampled <= high
