"""The v1model pipeline around the program: replication, clones, resubmit, recirculate,
drops, parser errors, digests and traces, checked byte for byte with Scapy packets.
"""
from __future__ import annotations

import logging

import pytest
from scapy.all import Ether, Packet, Raw, ShortField, ByteField, bind_layers, raw

from p4sim import Switch, compile_file
from p4sim.backends.python.switch import EGRESS_CLONE, INGRESS_CLONE, NORMAL, RECIRC, REPLICATION, RESUBMIT
from p4sim.state import CloneSession


class Probe(Packet):
    """The test header: a command from the sender, and what the switch saw."""
    name = "Probe"
    fields_desc = [ByteField("cmd", 0), ByteField("arg", 0), ShortField("rid", 0),
                   ByteField("itype", 0xFF), ByteField("passes", 0), ShortField("port", 0),
                   ByteField("perr", 0), ByteField("kept", 0)]


bind_layers(Ether, Probe, type=0x88B5)

PROGRAM = r"""
#include <core.p4>
#include <v1model.p4>
const bit<8> CMD_FORWARD = 0;    // to port arg
const bit<8> CMD_MCAST = 1;      // to group arg
const bit<8> CMD_CLONE_I2E = 2;  // forward to port 1 and clone to session arg
const bit<8> CMD_CLONE_E2E = 3;
const bit<8> CMD_RESUBMIT = 4;   // once, keeping meta.kept
const bit<8> CMD_RECIRC = 5;     // once, from egress
const bit<8> CMD_DROP = 6;
const bit<8> CMD_TRUNCATE = 7;   // to arg bytes
const bit<8> CMD_DIGEST = 8;
const bit<8> CMD_RECIRC_FOREVER = 9;
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header probe_t {
    bit<8> cmd; bit<8> arg; bit<16> rid; bit<8> itype; bit<8> passes; bit<16> port;
    bit<8> perr; bit<8> kept;
}
struct headers { ethernet_t eth; probe_t probe; }
struct learn_t { bit<48> src; bit<9> port; }
struct meta_t { @field_list(1) bit<8> kept; bit<8> scratch; }
parser P(packet_in pkt, out headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) { 0x88B5: probe; default: accept; }
    }
    state probe { pkt.extract(hdr.probe); transition accept; }
}
control V(inout headers hdr, inout meta_t meta) { apply { } }
control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    counter(4, CounterType.packets_and_bytes) seen;
    register<bit<8>>(4) last_cmd;
    apply {
        if (!hdr.probe.isValid()) {
            hdr.eth.type = sm.parser_error == error.PacketTooShort ? 16w1 : 16w2;
            sm.egress_spec = 9;
            exit;
        }
        seen.count((bit<32>)hdr.probe.cmd[1:0]);
        last_cmd.write(0, hdr.probe.cmd);
        hdr.probe.passes = hdr.probe.passes + 1;
        hdr.probe.kept = meta.kept;
        hdr.probe.perr = (bit<8>)sm.instance_type;   // as ingress sees it
        sm.egress_spec = 1;
        if (hdr.probe.cmd == CMD_FORWARD) {
            sm.egress_spec = (bit<9>)hdr.probe.arg;
        } else if (hdr.probe.cmd == CMD_MCAST) {
            sm.mcast_grp = (bit<16>)hdr.probe.arg;
        } else if (hdr.probe.cmd == CMD_CLONE_I2E) {
            meta.kept = 42;
            clone_preserving_field_list(CloneType.I2E, (bit<32>)hdr.probe.arg, 1);
        } else if (hdr.probe.cmd == CMD_RESUBMIT && sm.instance_type == 0) {
            meta.kept = 7;
            resubmit_preserving_field_list(1);
        } else if (hdr.probe.cmd == CMD_DROP) {
            mark_to_drop(sm);
        } else if (hdr.probe.cmd == CMD_DIGEST) {
            digest<learn_t>(1, { hdr.eth.src, sm.ingress_port });
        }
    }
}
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        if (!hdr.probe.isValid()) { exit; }
        hdr.probe.rid = sm.egress_rid;
        hdr.probe.itype = (bit<8>)sm.instance_type;
        hdr.probe.port = (bit<16>)sm.egress_port;
        if (sm.instance_type == 1 || sm.instance_type == 2) { hdr.probe.kept = meta.kept; }
        if (hdr.probe.cmd == CMD_CLONE_E2E && sm.instance_type == 0) {
            meta.kept = 9;
            clone_preserving_field_list(CloneType.E2E, (bit<32>)hdr.probe.arg, 1);
        } else if (hdr.probe.cmd == CMD_RECIRC && hdr.probe.passes == 1) {
            recirculate_preserving_field_list(1);
        } else if (hdr.probe.cmd == CMD_RECIRC_FOREVER) {
            recirculate_preserving_field_list(1);
        } else if (hdr.probe.cmd == CMD_TRUNCATE) {
            truncate((bit<32>)hdr.probe.arg);
        }
    }
}
control C(inout headers hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.probe); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    src = tmp_path_factory.mktemp("pipeline") / "probe.p4"
    src.write_text(PROGRAM)
    return compile_file(str(src))


def probe(cmd: int, arg: int = 0, payload: bytes = b"payload!") -> bytes:
    return raw(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / Probe(cmd=cmd, arg=arg) / Raw(payload))


def seen_as(sent: bytes, **fields) -> bytes:
    """The sent packet with the Probe fields the switch writes."""
    p = Ether(sent)
    for name, value in fields.items():
        setattr(p[Probe], name, value)
    return raw(p)


def test_unicast_forwards_to_egress_spec_with_payload_after_headers(program):
    sw = Switch(program)
    sent = probe(0, 5)
    assert sw.process(3, sent) == [(5, seen_as(sent, itype=NORMAL, passes=1, port=5))]
    assert sw.stats["rx"] == 1 and sw.stats["tx"] == 1


def test_multicast_makes_one_replica_per_port_and_rid(program):
    sw = Switch(program)
    sw.state.multicast_groups[7] = [(1, 10), (2, 20), (2, 21)]
    sent = probe(1, 7)
    out = sw.process(3, sent)
    assert out == [(port, seen_as(sent, rid=rid, itype=REPLICATION, passes=1, port=port))
                   for port, rid in [(1, 10), (2, 20), (2, 21)]]


def test_multicast_to_empty_group_drops(program):
    sw = Switch(program)
    assert sw.process(3, probe(1, 8)) == []
    assert sw.stats["dropped"] == 1


def test_ingress_clone_sends_original_packet_with_preserved_metadata(program):
    sw = Switch(program)
    sw.state.clone_sessions[5] = CloneSession(replicas=[(4, 1)])
    sent = probe(2, 5)
    out = sw.process(3, sent)
    clone = seen_as(sent, itype=INGRESS_CLONE, port=4, rid=1, kept=42)   # headers as parsed
    original = seen_as(sent, itype=NORMAL, passes=1, port=1)
    assert sorted(out) == sorted([(4, clone), (1, original)])


def test_egress_clone_copies_the_egress_packet(program):
    sw = Switch(program)
    sw.state.clone_sessions[6] = CloneSession(replicas=[(8, 0)], packet_length_bytes=20)
    sent = probe(3, 6)
    out = dict(sw.process(3, sent))
    assert out[1] == seen_as(sent, itype=NORMAL, passes=1, port=1)
    assert out[8] == seen_as(sent, itype=EGRESS_CLONE, passes=1, port=8, kept=9)[:20]


def test_clone_to_unknown_session_only_forwards(program):
    sw = Switch(program)
    assert [p for p, _ in sw.process(3, probe(2, 99))] == [1]


def test_resubmit_runs_ingress_again_with_preserved_field_list(program):
    sw = Switch(program)
    sent = probe(4)
    # The resubmitted packet is the original one: passes counts 1 again, kept comes from meta;
    # ingress sees it as RESUBMIT, egress (unicast) as NORMAL, as in BMv2.
    assert sw.process(3, sent) == [(1, seen_as(sent, perr=RESUBMIT, itype=NORMAL, passes=1, port=1, kept=7))]


def test_recirculate_reparses_the_deparsed_packet(program):
    sw = Switch(program)
    sent = probe(5)
    first_pass = seen_as(sent, perr=NORMAL, itype=NORMAL, passes=1, port=1)
    assert sw.process(3, sent) == [(1, seen_as(first_pass, perr=RECIRC, itype=NORMAL, passes=2, port=1))]


def test_endless_recirculation_is_cut_off_and_dropped(program):
    sw = Switch(program)
    assert sw.process(3, probe(9)) == []
    assert sw.stats["dropped"] == 1 and sw.stats["errors"] == 0


def test_mark_to_drop_drops_and_counts(program):
    sw = Switch(program)
    assert sw.process(3, probe(6)) == []
    assert sw.stats["dropped"] == 1


def test_truncate_cuts_the_outgoing_packet(program):
    sw = Switch(program)
    sent = probe(7, 16)
    assert sw.process(3, sent) == [(1, seen_as(sent, itype=NORMAL, passes=1, port=1)[:16])]


def test_digest_calls_back_with_the_struct_fields(program):
    got = []
    sw = Switch(program, on_digest=lambda name, values: got.append((name, values)))
    sw.process(6, probe(8))
    assert got == [("learn_t", (0x020000000001, 6))]


def test_parser_error_reaches_ingress_and_unparsed_bytes_follow(program):
    sw = Switch(program)
    short = raw(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=0x88B5)) + b"\x00\x01"
    [(port, out)] = sw.process(3, short)
    assert port == 9
    assert out == short[:12] + (1).to_bytes(2, "big") + b"\x00\x01"
    assert sw.stats["malformed"] == 1


def test_runt_frame_never_raises(program):
    sw = Switch(program)
    for size in range(0, 16):
        sw.process(0, bytes(size))
    assert sw.stats["errors"] == 0 and sw.stats["rx"] == 16


def test_counters_and_registers_are_updated_through_state(program):
    sw = Switch(program)
    sent = probe(0, 2)
    sw.process(3, sent)
    sw.process(3, sent)
    assert sw.state.counters["I.seen"].packets[0] == 2
    assert sw.state.counters["I.seen"].bytes[0] == 2 * len(sent)
    assert sw.state.registers["I.last_cmd"].values[0] == 0
    sw.process(3, probe(6))
    assert sw.state.registers["I.last_cmd"].values[0] == 6


def test_trace_logs_parser_tables_actions_and_output(program, caplog):
    sw = Switch(program, trace=True)
    with caplog.at_level(logging.INFO, logger="p4sim.trace"):
        sw.process(3, probe(0, 5))
    text = caplog.text
    for step in ("packet in: port 3", "select (34997,) -> probe", "state probe", "control I", "packet out: port 5"):
        assert step in text


def test_program_without_trace_logs_nothing(program, caplog):
    sw = Switch(program)
    with caplog.at_level(logging.DEBUG, logger="p4sim.trace"):
        sw.process(3, probe(0, 5))
    assert caplog.records == []


def test_device_config_round_trip_needs_no_cpp(program):
    from p4sim import Program
    again = Program.from_device_config(program.device_config())
    assert again.info == program.info
    sent = probe(0, 2)
    assert Switch(again).process(1, sent) == Switch(program).process(1, sent)


METERS = r"""
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> key; bit<8> color; bit<8> dcolor; }
struct headers { h_t h; }
struct meta_t { }
parser P(packet_in pkt, out headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout headers hdr, inout meta_t meta) { apply { } }
control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    meter(2, MeterType.packets) m;
    direct_meter<bit<8>>(MeterType.packets) dm;
    action colour() { dm.read(hdr.h.dcolor); }
    table t { key = { hdr.h.key : exact; } actions = { colour; NoAction; } meters = dm; }
    apply { m.execute_meter((bit<32>)hdr.h.key, hdr.h.color); t.apply(); sm.egress_spec = 1; }
}
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


class FrozenClock:
    """Meters refill with time; a clock that stands still makes their colours exact."""

    @staticmethod
    def monotonic() -> float:
        return 1000.0

    @staticmethod
    def monotonic_ns() -> int:
        return 1000 * 10**9


def test_meters_colour_packets_green_yellow_red_once_configured(tmp_path, monkeypatch):
    from p4sim.state import GREEN, RED, YELLOW, TableEntry
    monkeypatch.setattr("p4sim.state.time", FrozenClock)
    src = tmp_path / "meters.p4"
    src.write_text(METERS)
    sw = Switch(compile_file(str(src)))
    entry = TableEntry((("exact", 1),), "I.colour")
    sw.state.tables["I.t"].insert(entry)
    # One packet per second committed, two peak: a burst of three is green, yellow, red.
    sw.state.meters["I.m"].set_config(1, 1, 1, 2, 2)
    entry.meter.set_config(1, 1, 2, 2)
    colours = [sw.process(0, bytes([1, 9, 9]))[0][1][1:] for _ in range(3)]
    assert colours == [bytes([GREEN, GREEN]), bytes([YELLOW, YELLOW]), bytes([RED, RED])]
    assert sw.process(0, bytes([0, 9, 9]))[0][1][1:] == bytes([GREEN, 9])   # index 0 unconfigured; t misses


@pytest.mark.parametrize("name", ["ipv4_router", "calc", "tunnel", "mri", "source_routing", "ecmp",
                                  "firewall", "multicast", "packet_io", "ecn", "link_monitor"])
def test_tracing_does_not_change_what_a_program_does(make_switch, name, caplog):
    import random
    from scapy.all import IP, TCP, UDP
    rng = random.Random(name)
    frames = [raw(Ether() / IP(dst="10.0.0.1", ihl=5) / UDP() / (b"x" * 10)),
              raw(Ether() / IP(dst="10.0.1.1", options=b"\x44\x04\x05\x00") / TCP(flags="S")),
              raw(Ether(type=0x1234) / (b"\x00" * 40))]
    frames += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(60))) for _ in range(20)]
    plain, traced = make_switch(name), make_switch(name, trace=True)
    with caplog.at_level(logging.INFO, logger="p4sim.trace"):
        for port, frame in enumerate(frames):
            assert traced.process(port % 4, frame) == plain.process(port % 4, frame)
    assert plain.stats == traced.stats and plain.stats["errors"] == 0
