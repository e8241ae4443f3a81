"""P4 expression semantics in compiled code, against a Python oracle of the P4 spec.

Each case assigns one expression over header fields in ingress; the packet carries
the operands and comes back with the result field, so the whole path is exercised.
"""
from __future__ import annotations

import itertools
import logging
import struct

import pytest

from p4sim import Switch, compile_file
from p4sim.errors import P4Error

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t {
    bit<8> a; bit<8> b; bit<16> c; int<8> s; int<8> t;
    bit<8> r; bit<16> r16; int<8> rs; bit<8> flag;
}
struct headers { h_t h; }
struct meta_t { }
parser P(packet_in pkt, out headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout headers hdr, inout meta_t m) { apply { } }
control I(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply { %s sm.egress_spec = 1; }
}
control E(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
LAYOUT = struct.Struct("!BBHbbBHbB")
FIELDS = ("a", "b", "c", "s", "t", "r", "r16", "rs", "flag")


def wrap(v: int, width: int, signed: bool = False) -> int:
    v &= (1 << width) - 1
    return v - (1 << width) if signed and v >> (width - 1) else v


# (statement, result field, oracle over the operand dict)
CASES = [
    ("hdr.h.r = hdr.h.a + hdr.h.b;", "r", lambda o: wrap(o["a"] + o["b"], 8)),
    ("hdr.h.r = hdr.h.a - hdr.h.b;", "r", lambda o: wrap(o["a"] - o["b"], 8)),
    ("hdr.h.r = hdr.h.a * hdr.h.b;", "r", lambda o: wrap(o["a"] * o["b"], 8)),
    ("hdr.h.r = hdr.h.a |+| hdr.h.b;", "r", lambda o: min(255, o["a"] + o["b"])),
    ("hdr.h.r = hdr.h.a |-| hdr.h.b;", "r", lambda o: max(0, o["a"] - o["b"])),
    ("hdr.h.rs = hdr.h.s |+| hdr.h.t;", "rs", lambda o: max(-128, min(127, o["s"] + o["t"]))),
    ("hdr.h.rs = hdr.h.s |-| hdr.h.t;", "rs", lambda o: max(-128, min(127, o["s"] - o["t"]))),
    ("hdr.h.rs = hdr.h.s + hdr.h.t;", "rs", lambda o: wrap(o["s"] + o["t"], 8, True)),
    ("hdr.h.rs = -hdr.h.s;", "rs", lambda o: wrap(-o["s"], 8, True)),
    ("hdr.h.rs = hdr.h.s >> 2;", "rs", lambda o: o["s"] >> 2),
    ("hdr.h.r = ~hdr.h.a;", "r", lambda o: o["a"] ^ 0xFF),
    ("hdr.h.r = hdr.h.a << 3;", "r", lambda o: wrap(o["a"] << 3, 8)),
    ("hdr.h.r = hdr.h.a << hdr.h.b;", "r", lambda o: wrap(o["a"] << o["b"], 8)),
    ("hdr.h.r = hdr.h.a >> hdr.h.b;", "r", lambda o: o["a"] >> o["b"]),
    ("hdr.h.r = hdr.h.a & hdr.h.b | hdr.h.a ^ 8w0x0F;", "r", lambda o: (o["a"] & o["b"]) | (o["a"] ^ 0x0F)),
    ("hdr.h.r16 = hdr.h.a ++ hdr.h.b;", "r16", lambda o: (o["a"] << 8) | o["b"]),
    ("hdr.h.r = hdr.h.c[11:4];", "r", lambda o: (o["c"] >> 4) & 0xFF),
    ("hdr.h.c[7:4] = hdr.h.a[3:0];", "c", lambda o: (o["c"] & 0xFF0F) | ((o["a"] & 0xF) << 4)),
    ("hdr.h.r = (bit<8>)hdr.h.c;", "r", lambda o: o["c"] & 0xFF),
    ("hdr.h.r16 = (bit<16>)hdr.h.a;", "r16", lambda o: o["a"]),
    ("hdr.h.r16 = (bit<16>)(int<16>)hdr.h.s;", "r16", lambda o: o["s"] & 0xFFFF),
    ("hdr.h.rs = (int<8>)hdr.h.a;", "rs", lambda o: wrap(o["a"], 8, True)),
    ("hdr.h.flag = hdr.h.s < hdr.h.t ? 8w1 : 8w0;", "flag", lambda o: int(o["s"] < o["t"])),
    ("hdr.h.flag = hdr.h.a < hdr.h.b ? 8w1 : 8w0;", "flag", lambda o: int(o["a"] < o["b"])),
    ("hdr.h.flag = (bit<8>)(bit<1>)(hdr.h.a == hdr.h.b || hdr.h.s >= hdr.h.t);", "flag",
     lambda o: int(o["a"] == o["b"] or o["s"] >= o["t"])),
    ("hdr.h.r = hdr.h.a / 3 + hdr.h.b % 5;", "r", lambda o: wrap(o["a"] // 3 + o["b"] % 5, 8)),
    ("hdr.h.r = hdr.h.a - 1;", "r", lambda o: wrap(o["a"] - 1, 8)),
    ("bit<8> x = hdr.h.a; x = x + 250; hdr.h.r = x;", "r", lambda o: wrap(o["a"] + 250, 8)),
]
OPERANDS = [dict(zip(("a", "b", "c", "s", "t"), v)) for v in
            itertools.product((0, 1, 7, 200, 255), (0, 3, 8, 255), (0xABCD,), (-128, -1, 5, 127), (-3, 0, 127))]


@pytest.mark.parametrize("statement,field,oracle", CASES, ids=[c[0] for c in CASES])
def test_expression_matches_p4_semantics(tmp_path, statement, field, oracle):
    src = tmp_path / "expr.p4"
    src.write_text(PROGRAM % statement)
    sw = Switch(compile_file(str(src)))
    for ops in OPERANDS:
        packet = LAYOUT.pack(ops["a"], ops["b"], ops["c"], ops["s"], ops["t"], 0, 0, 0, 0)
        [(port, out)] = sw.process(0, packet)
        got = dict(zip(FIELDS, LAYOUT.unpack(out)))
        assert port == 1
        assert got[field] == oracle(ops), ops


def test_constant_expressions_fold_with_widths(tmp_path):
    src = tmp_path / "const.p4"
    src.write_text(PROGRAM % """
        hdr.h.r = 8w250 + 8w10;
        hdr.h.r16 = 16w1 << 15;
        hdr.h.rs = 8s127 + 8s1;
        hdr.h.flag = (bit<8>)(8w3 ++ 4w1)[7:0];""")
    sw = Switch(compile_file(str(src)))
    [(_, out)] = sw.process(0, bytes(LAYOUT.size))
    got = dict(zip(FIELDS, LAYOUT.unpack(out)))
    assert (got["r"], got["r16"], got["rs"], got["flag"]) == (4, 0x8000, -128, 0x31)


# Expressions whose parts need the control they are in (a table's apply, a stack's last, a call)
# nested in every kind of expression; struct values that copy a variable; header union validity;
# packet_in.length().
IN_CONTEXT = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<8> x1; bit<8> x2; bit<8> x3; bit<8> x4; bit<8> x5; bit<8> x6; bit<8> x7; bit<8> x8; bit<8> x9; }
header e_t { bit<8> v; }
header_union u_t { e_t p; e_t q; }
struct inner_t { bit<8> v; }
struct outer_t { inner_t i; bit<8> w; }
bit<8> pick(in bool c, in bit<8> v) { return c ? v : 8w0; }
struct headers { h_t h; u_t u; e_t[2] s; }
struct meta_t { bit<32> len; }
parser P(packet_in pkt, out headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { m.len = pkt.length(); pkt.extract(hdr.h); pkt.extract(hdr.s.next); transition accept; }
}
control V(inout headers hdr, inout meta_t m) { apply { } }
control I(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    action set_b(bit<8> v) { hdr.h.b = v; }
    table t { key = { hdr.h.a : exact; } actions = { set_b; NoAction; } default_action = NoAction();
              const entries = { 8w1 : set_b(8w9); } }
    apply {
        hdr.h.x1 = t.apply().hit ? 8w1 : 8w2;
        hdr.h.x2 = hdr.h.a == 8w1 ? (t.apply().hit ? 8w5 : 8w6) : (t.apply().miss ? 8w3 : 8w4);
        hdr.h.x3 = (bit<8>)(bit<1>)(!t.apply().hit);
        hdr.h.x4 = ((bit<16>)(bit<1>)t.apply().hit)[7:0];
        outer_t o = {{hdr.h.a}, (bit<8>)(bit<1>)t.apply().hit};
        inner_t i = {8w11};
        outer_t o2 = {i, 8w0};
        i.v = 8w12;
        hdr.h.x5 = o.i.v + o.w + o2.i.v;
        hdr.h.x6 = pick(t.apply().hit, 8w40) + (hdr.s.last.isValid() ? 8w2 : 8w0);
        hdr.h.x7 = (bit<8>)m.len;
        bit<8> before = hdr.u.isValid() ? 8w1 : 8w0;
        hdr.u.q.setValid();
        hdr.h.x8 = before + (hdr.u.isValid() ? 8w2 : 8w0);
        tuple<bit<8>, bool> tu = {hdr.h.a, t.apply().hit};
        hdr.h.x9 = tu[0] + (tu[1] ? 8w100 : 8w0);
        sm.egress_spec = 1;
    }
}
control E(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_expressions_nested_around_table_applies_stacks_and_calls(tmp_path):
    src = tmp_path / "context.p4"
    src.write_text(IN_CONTEXT)
    sw = Switch(compile_file(str(src)))
    for a, hit in ((1, True), (2, False)):
        [(port, out)] = sw.process(0, bytes([a, 0] + [0] * 9 + [7, 0, 0]))
        assert port == 1 and len(out) == 13
        x = list(out[2:11])
        assert x == [1 if hit else 2,               # hit ? 1 : 2
                     5 if hit else 3,               # a == 1 ? (hit ? 5 : 6) : (miss ? 3 : 4)
                     int(not hit),                  # (bit<8>)(bit<1>)!hit
                     int(hit),                      # ((bit<16>)(bit<1>)hit)[7:0]
                     a + int(hit) + 11,             # o2 = {i, 0} took i = 11 before i.v = 12
                     (40 if hit else 0) + 2,        # pick(hit, 40) + s.last valid
                     14,                            # pkt.length() in bytes
                     2,                             # union invalid, then valid through its second member
                     a + (100 if hit else 0)], a    # a tuple's items
        assert out[1] == (9 if hit else 0)           # the table's action ran


LOOKAHEAD = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> lead; bit<8> x1; bit<8> x2; bit<8> x3; bit<8> x4; bit<8> x5; }
struct low_t { int<4> s; bit<4> u; }
struct peek_t { bit<8> skip; int<8> s; low_t low; bool f; bit<7> rest; }
struct headers { h_t h; }
struct meta_t { peek_t p; }
parser P(packet_in pkt, out headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    state start { m.p = pkt.lookahead<peek_t>(); pkt.extract(hdr.h); transition accept; }
}
control V(inout headers hdr, inout meta_t m) { apply { } }
control I(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) {
    apply {
        hdr.h.x1 = (bit<8>)m.p.s;
        hdr.h.x2 = (bit<8>)(int<8>)m.p.low.s;
        hdr.h.x3 = (bit<8>)m.p.low.u;
        hdr.h.x4 = m.p.f ? 8w1 : 8w0;
        hdr.h.x5 = (bit<8>)m.p.rest;
        log_msg("lookahead {}", {m.p.skip});
        sm.egress_spec = 1;
    }
}
control E(inout headers hdr, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t m) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def test_lookahead_of_a_struct_cuts_signed_nested_and_bool_fields(tmp_path):
    src = tmp_path / "lookahead.p4"
    src.write_text(LOOKAHEAD)
    sw = Switch(compile_file(str(src)))
    # skip, s, low = {int<4> s, bit<4> u}, f and rest: the struct's 32 bits, MSB first
    for data, expected in (([0x5A, 0x80, 0x97, 0xFF, 0, 0], [0x80, 0xF9, 0x7, 1, 0x7F]),
                           ([0x00, 0x7F, 0x7A, 0x01, 0, 0], [0x7F, 0x07, 0xA, 0, 0x01])):
        [(_, out)] = sw.process(0, bytes(data))
        assert list(out[1:]) == expected


@pytest.mark.python_backend
def test_log_msg_writes_its_format_string_to_the_trace_log(tmp_path, caplog):
    src = tmp_path / "lookahead.p4"
    src.write_text(LOOKAHEAD)
    sw = Switch(compile_file(str(src)))
    with caplog.at_level(logging.INFO, logger="p4sim.trace"):
        for first in (0x5A, 0):
            sw.process(0, bytes([first, 0x80, 0x97, 0xFF, 0, 0]))
    assert [r.getMessage() for r in caplog.records if "log_msg" in r.getMessage()] == \
        ["log_msg: lookahead 90", "log_msg: lookahead 0"]


@pytest.mark.parametrize("change, message", [
    (("struct peek_t { bit<8> skip;", "struct peek_t { h_t hh; bit<8> skip;"),
     r":11:25: error: lookahead<T>: T must be made of bit<W>, int<W>, bool, serializable enums and "
     r"structs of them, not h_t$"),
    (("struct peek_t { bit<8> skip;", "struct peek_t { low_t l2; color_t c; bit<8> skip;"),
     r":11:25: error: lookahead<T>: .* not color_t$"),
    (("m.p = pkt.lookahead<peek_t>();", "hdr.u = pkt.lookahead<u_t>();"),
     r":11:27: error: lookahead of a u_t is not supported by p4sim$"),
], ids=["header field", "enum without a width", "header union"])
def test_lookahead_of_what_p4sim_cannot_cut_is_an_error_at_the_call(tmp_path, change, message):
    src = tmp_path / "bad_lookahead.p4"
    text = LOOKAHEAD.replace(*change).replace("struct headers { h_t h; }",
                                              "header_union u_t { h_t a; h_t b; }\nstruct headers { h_t h; u_t u; }")
    src.write_text(text.replace("struct low_t {", "enum color_t { RED, BLUE }\nstruct low_t {"))
    with pytest.raises(P4Error, match=message):
        compile_file(str(src))
