"""P4 expression semantics in compiled code, against a Python oracle of the P4 spec.

Each case assigns one expression over header fields in ingress; the packet carries
the operands and comes back with the result field, so the whole path is exercised.
"""
from __future__ import annotations

import itertools
import struct

import pytest

from p4sim import Switch, compile_file

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
