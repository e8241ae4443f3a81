"""Language constructs p4sim once refused or ran wrong (issue 10), each checked on packets:
empty controls, slices as lvalues, header fields of int<W>/bool/serializable enums,
constructor parameters of parsers and controls, functions with out/inout headers and
structs, struct-valued expressions as arguments, parser value sets.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from p4sim import P4Error, Switch, compile_file

HEAD = "#include <core.p4>\n#include <v1model.p4>\n"
# Every program below declares H, M, P, I and D; these complete it.
TAIL = """
control V(inout H hdr, inout M m) { apply { } }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
V1Switch(P(%(p)s), V(), I(%(i)s), E(), C(), D()) main;
"""


def source(text: str, p: str = "", i: str = "") -> str:
    return HEAD + text + TAIL % {"p": p, "i": i}


def run(tmp_path: Path, text: str, packets: list[tuple[int, bytes]]) -> list[list[tuple[int, bytes]]]:
    path = tmp_path / "prog.p4"
    path.write_text(text if text.startswith(HEAD) else source(text))
    sw = Switch(compile_file(str(path)))
    outs = [sw.process(port, data) for port, data in packets]
    assert sw.stats["errors"] == 0
    return outs


def test_empty_ingress_and_deparser_forward_the_unparsed_bytes_to_port_0(tmp_path):
    prog = """
header h_t { bit<8> a; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control D(packet_out pkt, in H hdr) { apply { } }
"""
    assert run(tmp_path, prog, [(3, b"\x01\x02\x03")]) == [[(0, b"\x02\x03")]]


def test_slices_assign_into_unsigned_and_signed_fields(tmp_path):
    prog = """
header h_t { bit<8> a; int<8> s; bit<16> w; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        hdr.h.a[7:4] = 0xA;            // high nibble only
        hdr.h.s[7:7] = 1;              // sign bit: 0x05 becomes -123 (0x85)
        hdr.h.w[11:4][3:0] = 0xF;      // a slice of a slice: bits 7..4
    }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
"""
    assert run(tmp_path, prog, [(0, bytes.fromhex("0305 0000"))]) == [[(1, bytes.fromhex("a385 00f0"))]]


def test_header_fields_of_int_bool_and_serializable_enum_types(tmp_path):
    prog = """
enum bit<8> Kind { A = 1, B = 2 }
header h_t { int<8> s; bool flag; bit<7> pad; Kind kind; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        if (hdr.h.s < 0 && hdr.h.flag && hdr.h.kind == Kind.A) {
            hdr.h.s = hdr.h.s - 1;         // signed arithmetic on the field
            hdr.h.flag = false;
            hdr.h.kind = Kind.B;
        }
    }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
"""
    outs = run(tmp_path, prog, [(0, bytes.fromhex("ff 81 01")), (0, bytes.fromhex("05 81 01"))])
    assert outs == [[(1, bytes.fromhex("fe 01 02"))], [(1, bytes.fromhex("05 81 01"))]]


def test_constructor_parameters_of_parsers_and_controls(tmp_path):
    prog = """
header h_t { bit<8> a; bit<8> b; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm)(bit<8> skip) {
    state start { pkt.advance((bit<32>)skip * 8); pkt.extract(hdr.h); transition accept; }
}
control Add(inout h_t h)(bit<8> k) { apply { h.b = h.b + k; } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm)(bit<9> port) {
    Add(8w1) one;
    Add(8w16) sixteen;
    apply { sm.egress_spec = port; one.apply(hdr.h); sixteen.apply(hdr.h); }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
"""
    assert run(tmp_path, source(prog, p="8w1", i="9w2"), [(0, bytes.fromhex("ee 0a 00"))]) \
        == [[(2, bytes.fromhex("0a 11"))]]


def test_functions_copy_headers_and_structs_in_and_out(tmp_path):
    prog = """
header h_t { bit<8> a; bit<8> b; }
struct pair_t { bit<8> x; bit<8> y; }
struct H { h_t h; h_t o; }
struct M { pair_t p; }
bool fill(in h_t src, out h_t dst, inout pair_t p) {
    dst = src;                     // dst starts invalid: this makes it a valid copy
    dst.b = src.b + p.x;
    p.y = src.a;
    return dst.isValid();
}
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        m.p = {x = 3, y = 0};
        if (fill(hdr.h, hdr.o, m.p)) { hdr.h.a = m.p.y + 1; }
    }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.o); } }
"""
    assert run(tmp_path, prog, [(0, bytes.fromhex("10 20"))]) == [[(1, bytes.fromhex("11 20 10 23"))]]


def test_value_set_matches_what_the_control_plane_put_in_it(tmp_path):
    prog = """
header h_t { bit<8> kind; }
header x_t { bit<8> v; }
struct H { h_t h; x_t x; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    value_set<bit<8>>(4) special;
    state start {
        pkt.extract(hdr.h);
        transition select(hdr.h.kind) { special: more; default: accept; }
    }
    state more { pkt.extract(hdr.x); hdr.x.v = 0xEE; transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { sm.egress_spec = 1; } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.x); } }
"""
    path = tmp_path / "vs.p4"
    path.write_text(source(prog))
    program = compile_file(str(path))
    assert program.info.value_sets["P.special"].size == 4
    sw = Switch(program)
    assert sw.process(0, bytes.fromhex("07 00")) == [(1, bytes.fromhex("07 00"))]   # empty set: no match
    sw.state.value_sets["P.special"].set([(("exact", 0x07),), (("exact", 0x4C),)])
    assert sw.process(0, bytes.fromhex("07 00")) == [(1, bytes.fromhex("07 ee"))]
    assert sw.process(0, bytes.fromhex("4c 00")) == [(1, bytes.fromhex("4c ee"))]
    assert sw.process(0, bytes.fromhex("08 00")) == [(1, bytes.fromhex("08 00"))]


def test_a_selector_without_selector_keys_is_named_with_its_location(tmp_path):
    prog = """
header h_t { bit<8> a; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    action a() { }
    table t { key = { hdr.h.a : exact; } actions = { a; }
              implementation = action_selector(HashAlgorithm.crc16, 32w64, 32w14); }
    apply { t.apply(); }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
"""
    path = tmp_path / "sel.p4"
    path.write_text(source(prog))
    with pytest.raises(P4Error) as err:
        compile_file(str(path))
    line = source(prog).splitlines().index(
        "              implementation = action_selector(HashAlgorithm.crc16, 32w64, 32w14); }") + 1
    assert str(err.value).startswith(f"{path}:{line}:")
    assert "action_selector but no `selector` keys" in err.value.message


def test_union_member_assignment_tuple_values_and_header_sizes(tmp_path):
    prog = """
header h_t { bit<8> a; bit<8> b; }
header_union u_t { h_t x; h_t y; }
struct H { h_t h; u_t u; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        tuple<bit<8>, bit<8>> t = {hdr.h.b, 7};
        hdr.u.x = hdr.h;              // x valid
        hdr.u.y = hdr.u.x;            // a valid header into y: x becomes invalid
        hdr.u.y.a = t[1];
        hdr.u.y.b = (bit<8>)hdr.h.minSizeInBits();
    }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.u); } }
"""
    assert run(tmp_path, prog, [(0, bytes.fromhex("01 02"))]) == [[(1, bytes.fromhex("0102 0710"))]]


def test_last_of_an_empty_stack_in_a_control_reads_0_and_writes_nothing(tmp_path):
    """P4_16 8.18: out of bounds, a read is unspecified (p4sim: 0) and a write has no
    effect; the packet goes on (in a parser it would be error.StackOutOfBounds)."""
    prog = """
header h_t { bit<8> a; }
struct H { h_t h; h_t[2] s; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        hdr.s.last.a = 5;
        hdr.h.a = hdr.h.a + hdr.s.last.a + 1;
    }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.s); } }
"""
    assert run(tmp_path, prog, [(0, bytes.fromhex("10"))]) == [[(1, bytes.fromhex("11"))]]


def test_deprecated_checksum16_extern_sums_its_fields(tmp_path):
    prog = """
header h_t { bit<8> a; bit<8> b; bit<16> sum; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    Checksum16() ck;
    apply { sm.egress_spec = 1; hdr.h.sum = ck.get({hdr.h.a, hdr.h.b}); }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
"""
    # ones' complement of 0x1234
    assert run(tmp_path, prog, [(0, bytes.fromhex("1234 0000"))]) == [[(1, bytes.fromhex("1234 edcb"))]]


def test_generic_functions_are_instantiated_per_type(tmp_path):
    prog = """
header h_t { bit<8> a; bit<16> w; }
struct H { h_t h; }
struct M { }
T larger<T>(in T x, in T y) { return x > y ? x : y; }
void twice<T>(inout T v) { v = v + v; }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        hdr.h.a = larger(hdr.h.a, 8w0x40);
        hdr.h.w = larger<bit<16>>(hdr.h.w, 16w0x0100);
        twice(hdr.h.w);
    }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
"""
    assert run(tmp_path, prog, [(0, bytes.fromhex("10 0300"))]) == [[(1, bytes.fromhex("40 0600"))]]
