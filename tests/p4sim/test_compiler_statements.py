"""Statements and declarations in compiled code: functions, directional action
parameters, switch on values and on action_run, unions, stacks, enums, copies.
"""
from __future__ import annotations

import logging

import pytest

from p4sim import Switch, compile_file
from p4sim.state import TableEntry

PROGRAM = r"""
#include <core.p4>
#include <v1model.p4>
enum bit<8> Op { ADD = 1, SWAP = 2, TWICE = 3 }
header h_t { bit<8> op; bit<8> a; bit<8> b; bit<8> r; }
header v4_t { bit<8> kind; bit<8> x; }
header v6_t { bit<8> kind; bit<16> y; }
header_union ip_t { v4_t v4; v6_t v6; }
header item_t { bit<8> v; }
struct headers { h_t h; ip_t ip; item_t[3] items; h_t copy; }
struct meta_t { bit<8> idx; bool flag; }
bit<8> twice(in bit<8> x) { return x + x; }
parser P(packet_in pkt, out headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.h);
        transition select(pkt.lookahead<bit<8>>()) {
            4: v4;
            6: v6;
            0x10 &&& 0xF0: items;
            0x20 .. 0x2F: items;
            default: accept;
        }
    }
    state v4 { pkt.extract(hdr.ip.v4); transition accept; }
    state v6 { pkt.extract(hdr.ip.v6); transition accept; }
    state items {
        pkt.extract(hdr.items.next);
        transition select(hdr.items.last.v) { 0: accept; default: items; }
    }
}
control V(inout headers hdr, inout meta_t meta) { apply { } }
control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    bit<8> scratch = 5;
    action swap(inout bit<8> x, inout bit<8> y) { bit<8> t = x; x = y; y = t; }
    action add(out bit<8> r, in bit<8> x, in bit<8> y) { r = x + y + scratch - 5; }
    action set_r(bit<8> v) { hdr.h.r = v; }
    table pick { key = { hdr.h.a : exact; } actions = { set_r; NoAction; } default_action = NoAction(); }
    apply {
        sm.egress_spec = 1;
        switch (hdr.h.op) {
            0: { }
            Op.ADD: { add(hdr.h.r, hdr.h.a, hdr.h.b); }
            Op.SWAP: { swap(hdr.h.a, hdr.h.b); }
            Op.TWICE: { hdr.h.r = twice(hdr.h.a); }
            4:
            5: { hdr.copy = hdr.h; hdr.copy.r = hdr.h == hdr.copy ? 8w1 : 8w0; }
            6: {
                switch (pick.apply().action_run) {
                    set_r: { hdr.h.b = 0xEE; }
                    default: { hdr.h.b = 0xDD; }
                }
            }
            7: { meta.idx = hdr.h.a; hdr.items[meta.idx].v = 0x99; hdr.items.pop_front(1); }
            8: { hdr.items.push_front(1); hdr.items[0].setValid(); hdr.items[0].v = 0x77; }
            9: { if (hdr.ip.v4.isValid()) { hdr.ip.v6.setValid(); hdr.ip.v6.kind = 6; hdr.ip.v6.y = 0x1234; } }
            10: { log_msg("a={} b={}", {hdr.h.a, hdr.h.b}); }
            11: { assert(hdr.h.a == 0); }
            default: { mark_to_drop(sm); }
        }
    }
}
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


@pytest.fixture(scope="module")
def switch_factory(tmp_path_factory):
    src = tmp_path_factory.mktemp("stmts") / "stmts.p4"
    src.write_text(PROGRAM)
    program = compile_file(str(src))
    return lambda: Switch(program)


def run(sw: Switch, data: bytes) -> bytes | None:
    out = sw.process(0, data)
    return out[0][1] if out else None


def test_action_out_parameter_is_copied_out_and_sees_control_locals(switch_factory):
    assert run(switch_factory(), bytes([1, 20, 30, 0])) == bytes([1, 20, 30, 50])


def test_action_inout_parameters_swap(switch_factory):
    assert run(switch_factory(), bytes([2, 20, 30, 0])) == bytes([2, 30, 20, 0])


def test_function_return_value_wraps_to_its_width(switch_factory):
    assert run(switch_factory(), bytes([3, 200, 0, 0])) == bytes([3, 200, 0, 144])


@pytest.mark.parametrize("op", [4, 5])
def test_fallthrough_label_and_header_copy_and_equality(switch_factory, op):
    # hdr.copy gets hdr.h (so it is emitted), then its r is set from h == copy (true).
    assert run(switch_factory(), bytes([op, 1, 2, 3])) == bytes([op, 1, 2, 3, op, 1, 2, 1])


def test_switch_on_action_run_takes_hit_and_default_cases(switch_factory):
    sw = switch_factory()
    sw.state.tables["I.pick"].insert(TableEntry((("exact", 9),), "I.set_r", (0x42,)))
    assert run(sw, bytes([6, 9, 0, 0])) == bytes([6, 9, 0xEE, 0x42])
    assert run(sw, bytes([6, 8, 0, 0])) == bytes([6, 8, 0xDD, 0])


def test_parser_select_masks_ranges_and_stack_loop(switch_factory):
    sw = switch_factory()
    data = bytes([0, 0, 0, 0, 0x15, 0x27, 0, 0xAB])
    assert run(sw, data) == data      # three stack elements parsed and emitted, payload follows


def test_stack_index_write_and_pop_front(switch_factory):
    data = bytes([7, 1, 0, 0, 0x15, 0x27, 0])
    assert run(switch_factory(), data) == bytes([7, 1, 0, 0, 0x99, 0])


def test_stack_push_front_shifts_elements(switch_factory):
    data = bytes([8, 0, 0, 0, 0x15, 0])
    assert run(switch_factory(), data) == bytes([8, 0, 0, 0, 0x77, 0x15, 0])


def test_union_member_set_valid_invalidates_the_other(switch_factory):
    assert run(switch_factory(), bytes([9, 0, 0, 0, 4, 0x55])) == bytes([9, 0, 0, 0, 6, 0x12, 0x34])


@pytest.mark.python_backend      # the C backend runs log_msg as a no-op: trace on Python
def test_log_msg_formats_into_the_trace_logger(switch_factory, caplog):
    with caplog.at_level(logging.INFO, logger="p4sim.trace"):
        run(switch_factory(), bytes([10, 3, 4, 0]))
    assert "a=3 b=4" in caplog.text


def test_failed_assert_drops_and_counts_an_error(switch_factory):
    sw = switch_factory()
    assert run(sw, bytes([11, 1, 0, 0])) is None
    assert sw.stats["errors"] == 1
    assert run(sw, bytes([11, 0, 0, 0])) == bytes([11, 0, 0, 0])


def test_default_case_drops(switch_factory):
    sw = switch_factory()
    assert run(sw, bytes([99, 0, 0, 0])) is None and sw.stats["dropped"] == 1


SUB_BLOCKS = r"""
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; }
header g_t { bit<8> c; }
struct headers { h_t h; g_t g; }
struct meta_t { bit<8> m; }
parser Inner(packet_in pkt, inout headers hdr) {
    state start { pkt.extract(hdr.g); transition accept; }
}
parser P(packet_in pkt, out headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    Inner() inner;
    state start { pkt.extract(hdr.h); inner.apply(pkt, hdr); transition accept; }
}
control Sub(inout h_t h, out bit<8> r) {
    register<bit<8>>(2) seen;
    action bump(bit<8> d) { h.a = h.a + d; }
    table t { key = { h.b : exact; } actions = { bump; NoAction; } default_action = bump(1); }
    apply { t.apply(); r = h.a; seen.write(0, h.a); }
}
control V(inout headers hdr, inout meta_t meta) { apply { } }
control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    Sub() first;
    Sub() second;
    apply { first.apply(hdr.h, meta.m); second.apply(hdr.h, hdr.h.b); hdr.g.c = meta.m; sm.egress_spec = 1; }
}
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_sub_parser_and_sub_controls_run_per_instance_with_p4c_names(tmp_path):
    src = tmp_path / "sub.p4"
    src.write_text(SUB_BLOCKS)
    program = compile_file(str(src))
    assert set(program.info.tables) == {"I.first.t", "I.second.t"}
    assert set(program.info.registers) == {"I.first.seen", "I.second.seen"}
    sw = Switch(program)
    sw.state.tables["I.second.t"].insert(TableEntry((("exact", 3),), "I.second.bump", (5,)))
    # first: miss, a = 10 + 1 -> meta.m = 11; second: b is still 3, hit, a = 16 -> b = 16.
    assert sw.process(0, bytes([10, 3, 0])) == [(1, bytes([16, 16, 11]))]
    assert sw.state.registers["I.first.seen"].values[0] == 11
    assert sw.state.registers["I.second.seen"].values[0] == 16


def test_p4_names_that_are_python_keywords_or_generated_locals_still_work(tmp_path):
    text = r"""
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> from; bit<8> _v; bit<8> class; }
struct headers { h_t h; }
struct meta_t { bit<8> lambda; }
parser P(packet_in d, out headers e, inout meta_t L, inout standard_metadata_t st) {
    state start { d.extract(e.h); transition accept; }
}
control V(inout headers a, inout meta_t args) { apply { } }
control I(inout headers e, inout meta_t a, inout standard_metadata_t hit) {
    action set(bit<8> args) { e.h.class = args; a.lambda = e.h.from; }
    table t { key = { e.h.from : exact; } actions = { set; } default_action = set(7); }
    apply { t.apply(); e.h._v = a.lambda + 1; hit.egress_spec = 2; }
}
control E(inout headers a, inout meta_t e, inout standard_metadata_t L) { apply { } }
control C(inout headers a, inout meta_t e) { apply { } }
control D(packet_out a, in headers e) { apply { a.emit(e.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
    src = tmp_path / "names.p4"
    src.write_text(text)
    assert Switch(compile_file(str(src))).process(0, bytes([5, 0, 0])) == [(2, bytes([5, 6, 7]))]


def test_trace_names_table_hits_misses_and_action_arguments(tmp_path, caplog):
    src = tmp_path / "stmts.p4"
    src.write_text(PROGRAM)
    sw = Switch(compile_file(str(src)), trace=True)
    sw.state.tables["I.pick"].insert(TableEntry((("exact", 9),), "I.set_r", (0x42,)))
    with caplog.at_level(logging.INFO, logger="p4sim.trace"):
        sw.process(0, bytes([6, 9, 0, 0]))
        sw.process(0, bytes([6, 8, 0, 0]))
    assert "table I.pick: hit key=(9,) -> I.set_r(66,)" in caplog.text
    assert "action I.set_r(v=66)" in caplog.text
    assert "table I.pick: miss key=(8,) -> NoAction()" in caplog.text
