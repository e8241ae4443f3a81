"""P4_16 1.2.5 constructs and type forms current p4c accepts, on packets, on every backend:
`for` loops (both forms, with break and continue), compound assignment, header fields of
a `typedef` or `type` of bit<W>, select on a cast of a typedef'd value, a generic parser
with extract<T>, lookahead<T> of a header and of a struct of bits.

What P4 says: P4_16 1.2.5 "for statements" (init once, the condition before each
iteration, the update after the body and after `continue`; `for (T x in e)` over a
header stack's elements or the values lo..hi of a range, both ends included),
"compound assignment" (`a op= b` is `a = a op b` with `a` evaluated once), "type"
(a new type with the representation of its base), lookahead<T> "evaluates to the next
bits of the packet as a T" (p4c's midend ExpandLookahead cuts a struct's bits into its
fields MSB first, as extract does a header's).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from p4sim import Switch, compile_file
from p4sim.backends import BACKENDS

HEAD = """#include <core.p4>
#include <v1model.p4>
typedef bit<8> B8;
typedef B8 B8b;
type bit<8> T8;
header h_t { bit<8> a; bit<8> b; int<8> s; B8b c; T8 t; }
header e_t { bit<8> v; }
header g_t { bit<16> x; }
enum bit<2> Two { A = 1, B = 2 }
struct low_t { bit<1> mid; bool lo; }
struct nib_t { bit<4> hi; Two two; low_t low; }
struct H { h_t h; e_t[4] s; g_t g; }
struct M { bit<8> m; }
bit<8> next_of(inout bit<8> x) { x = x + 1; return x; }
"""
PARSER = """
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.s[0]); pkt.extract(hdr.s[1]);
                  pkt.extract(hdr.s[2]); pkt.extract(hdr.s[3]); transition accept; }
}
"""
TAIL = """
control V(inout H hdr, inout M m) { apply { } }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
FIELDS = ("a", "b", "s", "c", "t", "s0", "s1", "s2", "s3")


def program(body: str, parser: str = PARSER) -> str:
    return HEAD + parser + f"""
control I(inout H hdr, inout M meta, inout standard_metadata_t sm) {{
    apply {{ sm.egress_spec = 1; {body} }}
}}
""" + TAIL


def run(tmp_path: Path, backend: str, text: str, data: bytes) -> bytes:
    path = tmp_path / "prog.p4"
    path.write_text(text)
    sw = Switch(compile_file(str(path)), backend=backend)
    outs = sw.process(0, data)
    assert sw.stats["errors"] == 0
    [(port, out)] = outs
    assert port == 1
    return out


def fields(**given: int) -> bytes:
    return bytes(given.get(f, 0) & 0xFF for f in FIELDS)


def wrap8(v: int) -> int:
    return v & 0xFF


# (statements, fields in, fields out that change)
CASES = {
    # init list, condition, update list; continue still runs the update.
    "for_continue": ("for (bit<8> i = 0, bit<8> j = 1; i < 4; i = i + 1, j = j << 1) {"
                     " if (i == 2) { continue; } hdr.h.a = hdr.h.a + j; }", {}, dict(a=1 + 2 + 8)),
    "for_break": ("for (bit<8> i = 0; i < 200; i += 1) { if (i == 5) { break; } hdr.h.a = i; }", {}, dict(a=4)),
    "for_no_cond": ("bit<8> i = 0; for (; ; ) { i = i + 1; if (i == 3) { break; } } hdr.h.a = i;", {}, dict(a=3)),
    "for_existing_var": ("bit<8> i; for (i = 10; i > 7; i -= 1) { hdr.h.b = hdr.h.b + 1; } hdr.h.a = i;",
                         {}, dict(a=7, b=3)),
    "for_zero_times": ("for (bit<8> i = 9; i < 3; i += 1) { hdr.h.a = 1; }", {}, {}),
    "for_nested": ("for (bit<8> i = 0; i < 3; i += 1) { for (bit<8> j = 0; j < 3; j += 1) {"
                   " if (j > i) { break; } hdr.h.a = hdr.h.a + 1; } }", {}, dict(a=6)),
    "for_cond_call": ("bit<8> k = 0; for (bit<8> i = 0; next_of(k) < 4; i += 1) { hdr.h.a = i; } hdr.h.b = k;",
                      {}, dict(a=2, b=4)),
    # for-in: each element of the stack in order (a copy), valid or not; ranges include both ends.
    "for_in_stack": ("for (e_t e in hdr.s) { hdr.h.a = hdr.h.a * 2 + e.v; e.v = 0; }",
                     dict(s0=1, s1=0, s2=1, s3=1), dict(a=0b1011)),
    "for_in_stack_break": ("for (e_t e in hdr.s) { if (e.v == 7) { break; } hdr.h.a = hdr.h.a + e.v; }",
                           dict(s0=1, s1=2, s2=7, s3=9), dict(a=3)),
    "for_in_range": ("for (bit<8> k in 2 .. 4) { hdr.h.a = hdr.h.a + k; }", {}, dict(a=9)),
    "for_in_range_runtime": ("for (bit<8> k in hdr.h.b .. hdr.h.b + 2) { hdr.h.a = hdr.h.a + k; }",
                             dict(b=5), dict(a=18)),
    "for_in_range_empty": ("for (bit<8> k in 3 .. 1) { hdr.h.a = 1; }", {}, {}),
    "for_in_signed_range": ("for (int<8> k in -2 .. 1) { hdr.h.s = hdr.h.s + k; }", {}, dict(s=wrap8(-2))),
    # compound assignment: each operator, wrapping and saturating as the plain operator does.
    "plus_eq": ("hdr.h.a += 250;", dict(a=10), dict(a=4)),
    "minus_eq": ("hdr.h.a -= 11;", dict(a=10), dict(a=255)),
    "times_eq": ("hdr.h.a *= 3;", dict(a=100), dict(a=44)),
    "div_mod_eq": ("hdr.h.a /= 7; hdr.h.b %= 7;", dict(a=100, b=100), dict(a=14, b=2)),
    "shift_eq": ("hdr.h.a <<= 3; hdr.h.b >>= 2;", dict(a=0x31, b=0x31), dict(a=0x88, b=0x0C)),
    "bit_eq": ("hdr.h.a &= 0x0F; hdr.h.b |= 0x80; hdr.h.c ^= 0xFF;", dict(a=0x3C, b=1, c=0x0F),
               dict(a=0x0C, b=0x81, c=0xF0)),
    "sat_eq": ("hdr.h.a |+|= 200; hdr.h.b |-|= 9; hdr.h.s |+|= 100;", dict(a=100, b=5, s=100),
               dict(a=255, b=0, s=127)),
    "signed_minus_eq": ("hdr.h.s -= 3;", dict(s=wrap8(-127)), dict(s=126)),
    "slice_plus_eq": ("hdr.h.a[7:4] += 3;", dict(a=0xF1), dict(a=0x21)),
    "index_once": ("hdr.s[next_of(hdr.h.a)].v += 5;", dict(a=0, s1=1), dict(a=1, s1=6)),
    "index_once_rhs_call": ("hdr.s[hdr.h.a].v += next_of(hdr.h.a);", dict(a=1, s1=1), dict(a=2, s1=3)),
    # typedef / type header fields
    "typedef_field": ("hdr.h.c = hdr.h.c + 1; hdr.h.t = (T8)((bit<8>)hdr.h.t + 2);", dict(c=7, t=9),
                      dict(c=8, t=11)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CASES)
def test_loops_compound_assignment_and_types(tmp_path, backend, name):
    body, given, changed = CASES[name]
    out = run(tmp_path, backend, program(body), fields(**given))
    assert out == fields(**(given | changed))


@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_that_never_ends_fails_the_packet_not_the_switch(tmp_path, backend):
    path = tmp_path / "prog.p4"
    path.write_text(program("for (bit<8> i = 0; i < 255; i = i) { hdr.h.a = i; }"))
    sw = Switch(compile_file(str(path)), backend=backend)
    assert sw.process(0, fields()) == []
    assert sw.stats["errors"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_select_on_a_cast_of_a_typedef_field(tmp_path, backend):
    parser = """
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition select((bit<8>)hdr.h.t, (bit<4>)hdr.h.c) {
        (2, 1): more; default: accept; } }
    state more { pkt.extract(hdr.s[0]); transition accept; }
}
"""
    text = program("", parser)
    assert run(tmp_path, backend, text, fields(t=2, c=0x11)) == fields(t=2, c=0x11)   # s[0] parsed and emitted
    assert run(tmp_path, backend, text, bytes([0, 0, 0, 0x12, 2, 0xEE])) == bytes([0, 0, 0, 0x12, 2, 0xEE])


@pytest.mark.parametrize("backend", BACKENDS)
def test_generic_subparser_extracts_its_type_argument(tmp_path, backend):
    parser = """
parser Sub<T>(packet_in pkt, out T h) {
    state start { pkt.extract<T>(h); transition accept; }
}
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    Sub<g_t>() sub;
    state start { pkt.extract(hdr.h); transition select(hdr.h.a) { 1: more; default: accept; } }
    state more { sub.apply(pkt, hdr.g); transition accept; }
}
"""
    text = program("hdr.g.x = hdr.g.x + 1;", parser)
    head = fields(a=1)[:5]
    assert run(tmp_path, backend, text, head + b"\x12\x34\x99") == head + b"\x12\x35\x99"


@pytest.mark.parametrize("backend", BACKENDS)
def test_lookahead_of_a_header_and_of_a_struct(tmp_path, backend):
    parser = """
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start {
        nib_t n = pkt.lookahead<nib_t>();
        e_t first = pkt.lookahead<e_t>();
        pkt.extract(hdr.h);
        hdr.h.b = ((bit<8>)n.hi << 4) | (bit<8>)(bit<2>)n.two << 1 | (bit<8>)n.low.mid;
        hdr.h.c = n.low.lo ? first.v : 8w0;
        transition accept;
    }
}
"""
    # 0xB7 = 1011 01 1 1: hi 0xB, two 1 (A), low.mid 1, low.lo true; e_t's v is the whole byte.
    assert run(tmp_path, backend, program("", parser), fields(a=0xB7)) == fields(a=0xB7, b=0xB3, c=0xB7)
