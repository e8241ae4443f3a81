"""Single-use temporaries computed where they are used (statements.forward_single_uses),
headers read through local aliases (CodeGen.local_aliases), register indexes computed once
(externs.register_index) and signed casts of unsigned values: the same results as the
plain code in program order.
"""
from __future__ import annotations

import pytest

from p4sim import Switch, compile_file
from p4sim.backends.python import python_code

PROGRAM = r"""
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> op; bit<8> a; bit<8> b; bit<8> r; bit<8> s; }
struct headers { h_t h; h_t g; }
struct meta_t { bit<8> m; }
parser P(packet_in pkt, out headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control V(inout headers hdr, inout meta_t meta) { apply { } }
control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    register<bit<8>>(16) cells;
    action set_a() { hdr.h.a = 0x55; }
    action bump(inout h_t x) { x.a = x.a + 1; }
    // add_contribution's shape: min and max for every op, one of them used.
    action combine() {
        bit<8> lower;
        bit<8> higher;
        bit<8> sum;
        sum = hdr.h.a + hdr.h.b;
        lower = (int<8>)hdr.h.a < (int<8>)hdr.h.b ? hdr.h.a : hdr.h.b;
        higher = (int<8>)hdr.h.a < (int<8>)hdr.h.b ? hdr.h.b : hdr.h.a;
        hdr.h.r = hdr.h.s == 0 ? sum : (hdr.h.s == 1 ? lower : higher);
    }
    action written_between() {
        bit<8> t = hdr.h.a;
        hdr.h.a = 7;
        hdr.h.r = t;
    }
    action read_again() {
        bit<8> t;
        t = hdr.h.a + 1;
        hdr.h.r = t;
        hdr.h.s = t;
    }
    action overwritten() {
        bit<8> t;
        t = hdr.h.a;
        hdr.h.r = t;
        t = hdr.h.b;
        hdr.h.s = t;
    }
    action chained() {
        bit<8> t = hdr.h.a + 1;
        bit<8> u = t + t;
        bit<8> w = u;
        hdr.h.r = w;
        hdr.h.a = 0;
    }
    apply {
        sm.egress_spec = 1;
        if (hdr.h.op == 1) { combine(); }
        else if (hdr.h.op == 2) { written_between(); }
        else if (hdr.h.op == 3) { read_again(); }
        else if (hdr.h.op == 4) { overwritten(); }
        else if (hdr.h.op == 5) { chained(); }
        else if (hdr.h.op == 6) {
            bit<8> t = hdr.h.a;
            set_a();                         // a call in between: t keeps the old a
            hdr.h.r = t;
        } else if (hdr.h.op == 7) {
            bit<8> t = hdr.h.a;
            if (hdr.h.b == 1) { hdr.h.r = t; }
            hdr.h.s = t;
        } else if (hdr.h.op == 8) {
            int<16> wide = (int<16>)(bit<16>)hdr.h.a;     // zero-extended: never negative
            hdr.h.r = wide > 127 ? 8w1 : 8w0;
            hdr.h.s = (int<8>)hdr.h.a < 0 ? 8w1 : 8w0;
        } else if (hdr.h.op == 9) {
            hdr.g = hdr.h;                   // whole-header writes and copy-out, read after
            hdr.g.a = 1;
            hdr.h = hdr.g;
            hdr.g.setInvalid();
            bump(hdr.h);
            hdr.h.r = hdr.h.a;
        } else if (hdr.h.op == 10) {
            cells.write((bit<32>)hdr.h.b, hdr.h.a);           // the same index text, another value
            hdr.h.b = hdr.h.b + 1;
            cells.write((bit<32>)hdr.h.b, hdr.h.a + 1);
            hdr.h.b = hdr.h.b - 1;
            cells.read(hdr.h.r, (bit<32>)hdr.h.b);
            cells.read(hdr.h.s, (bit<32>)hdr.h.b + 1);
        } else if (hdr.h.op == 11) {
            cells.write(2, 9);
            cells.write(9, 4);
            cells.read(hdr.h.b, (bit<32>)hdr.h.b);            // the read changes its own index
            cells.read(hdr.h.r, (bit<32>)hdr.h.b);
        }
    }
}
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    src = tmp_path_factory.mktemp("temps") / "temps.p4"
    src.write_text(PROGRAM)
    return compile_file(str(src))


def run(program, op: int, a: int, b: int, r: int = 0, s: int = 0) -> bytes:
    [(_, out)] = Switch(program).process(0, bytes([op, a, b, r, s]))
    return out


def signed(v: int) -> int:
    return v - 256 if v >= 128 else v


@pytest.mark.parametrize("a,b", [(3, 200), (200, 3), (0x80, 0x7F), (5, 5), (255, 1)])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_min_max_or_sum_of_signed_bytes_like_add_contribution(program, a, b, which):
    lo, hi = sorted((a, b), key=signed)
    want = [(a + b) & 0xFF, lo, hi][which]
    assert run(program, 1, a, b, s=which) == bytes([1, a, b, want, which])


def test_temporary_keeps_the_value_from_before_a_later_write(program):
    assert run(program, 2, 9, 0) == bytes([2, 7, 0, 9, 0])


def test_temporary_read_twice(program):
    assert run(program, 3, 9, 0) == bytes([3, 9, 0, 10, 10])


def test_temporary_overwritten_after_its_use(program):
    assert run(program, 4, 9, 4) == bytes([4, 9, 4, 9, 4])


def test_chained_temporaries(program):
    assert run(program, 5, 9, 0) == bytes([5, 0, 0, 20, 0])


def test_temporary_keeps_its_value_across_an_action_call(program):
    assert run(program, 6, 9, 0) == bytes([6, 0x55, 0, 9, 0])


@pytest.mark.parametrize("b,r", [(1, 9), (0, 0)])
def test_temporary_used_in_a_branch_and_after_it(program, b, r):
    assert run(program, 7, 9, b) == bytes([7, 9, b, r, 9])


@pytest.mark.parametrize("a,r,s", [(0x80, 1, 1), (0x7F, 0, 0), (0xFF, 1, 1)])
def test_signed_casts_of_unsigned_values(program, a, r, s):
    assert run(program, 8, a, 0) == bytes([8, a, 0, r, s])


def test_header_written_whole_and_by_copy_out_is_read_back(program):
    assert run(program, 9, 7, 3, 0, 4) == bytes([9, 2, 3, 2, 4])


def test_register_index_written_between_uses_is_computed_again(program):
    assert run(program, 10, 7, 1) == bytes([10, 7, 1, 7, 8])


def test_register_read_into_its_own_index(program):
    assert run(program, 11, 0, 2) == bytes([11, 0, 9, 4, 0])


def test_generated_code_says_where_a_moved_temporary_went(program):
    source = python_code(program)[0].source
    assert "# lower: computed at its one use below" in source
    assert "# higher: computed at its one use below" in source
