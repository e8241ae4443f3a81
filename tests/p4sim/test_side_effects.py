"""Calls with side effects inside expressions, on packets: copy-out happens even where the
other operand makes the value constant, `&&`/`||` short-circuit, `?:` evaluates only the
branch it takes, operands and arguments are evaluated left to right (the left-hand side
of an assignment first), and an index or a slice's base is evaluated once.

What P4 says: P4_16 spec 8.1 ("Expression evaluation order": left to right, `&&`, `||`
and `?:` short-circuit), 6.8 ("Calling convention": arguments evaluated left to right,
copy-in before the call, copy-out left to right after it). p4c implements it in the
frontend's SideEffectOrdering (frontends/p4/sideEffects.cpp): an effectful call becomes a
temporary; the left operand is saved first when the right has side effects (p4c PR 2352,
issues 2205 and 2288); the left-hand side of an assignment is dismantled before the right
(DoSimplifyExpressions::postorder(AssignmentStatement)); a non-constant index becomes a
temporary (DismantleExpression::preorder(ArrayIndex)); short-circuits and `?:` become ifs.
ConstantFolding keeps a call with side effects (p4c testdata issue2221-bmv2.p4:
`16w0 & function_with_side_effect(...)`). BMv2 runs what p4c leaves.

The tests run on every backend in p4sim.backends.BACKENDS.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from p4sim import Switch, compile_file
from p4sim.backends import BACKENDS

HEAD = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> a; bit<8> b; bit<8> c; bit<8> r; bit<8> q; }
header e_t { bit<8> v; }
struct H { h_t h; e_t[4] s; }
struct M { bit<8> m; }
struct H2 { h_t h; }
struct S2 { bit<8> x; bit<8> y; }
// x + 1 into x; 7 back.
bit<8> bump(inout bit<8> x) { x = x + 1; return 8w7; }
// x + 1 into x; the new x back: an index that moves its own variable.
bit<8> next_of(inout bit<8> x) { x = x + 1; return x; }
bool yes(inout bit<8> x) { x = x + 1; return true; }
bool no(inout bit<8> x) { x = x + 1; return false; }
bit<8> sum2(in bit<8> x, in bit<8> y) { return x + y; }
void keep(inout bit<8> x, in bit<8> y) { }
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); pkt.extract(hdr.s[0]); pkt.extract(hdr.s[1]);
                  pkt.extract(hdr.s[2]); pkt.extract(hdr.s[3]); transition accept; }
}
"""
TAIL = """
control V(inout H hdr, inout M m) { apply { } }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); pkt.emit(hdr.s); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
FIELDS = ("a", "b", "c", "r", "q", "s0", "s1", "s2", "s3")


def ingress(body: str, locals_: str = "") -> str:
    return HEAD + f"""
control I(inout H hdr, inout M meta, inout standard_metadata_t sm) {{
{locals_}
    apply {{ sm.egress_spec = 1; {body} }}
}}
""" + TAIL


def run(tmp_path: Path, backend: str, program: str, **given: int) -> dict[str, int]:
    """The fields of the one packet out, for a packet with fields `given` (others 0)."""
    path = tmp_path / "prog.p4"
    path.write_text(program)
    sw = Switch(compile_file(str(path)), backend=backend)
    outs = sw.process(0, bytes(given.get(f, 0) for f in FIELDS))
    assert sw.stats["errors"] == 0
    [(port, data)] = outs
    assert port == 1
    return dict(zip(FIELDS, data))


# (statements, packet fields in, the fields that must come out)
CASES = {
    # Copy-out happens though the value is known without the call (p4c issue2221-bmv2.p4).
    "and_zero": ("hdr.h.r = 8w0 & bump(hdr.h.a);", dict(a=5, r=9), dict(a=6, r=0)),
    "mul_zero": ("hdr.h.r = 8w0 * bump(hdr.h.a);", dict(a=5, r=9), dict(a=6, r=0)),
    "shr_of_zero": ("hdr.h.r = 8w0 >> bump(hdr.h.a);", dict(a=5, r=9), dict(a=6, r=0)),
    "saturated": ("hdr.h.r = 8w255 |+| bump(hdr.h.a);", dict(a=5), dict(a=6, r=255)),
    "slice_of_concat": ("hdr.h.r = (hdr.h.c ++ bump(hdr.h.a))[15:8];", dict(a=5, c=3), dict(a=6, c=3, r=3)),
    "or_all_ones": ("hdr.h.r = 8w255 | bump(hdr.h.a);", dict(a=5), dict(a=6, r=255)),
    "call_twice": ("hdr.h.r = (bit<8>)(bit<1>)(bump(hdr.h.a) != bump(hdr.h.a));", dict(a=5), dict(a=7, r=0)),
    "const_rhs_shift": ("hdr.h.r = bump(hdr.h.a) << 8;", dict(a=5, r=1), dict(a=6, r=0)),
    # Short-circuit: no call, so no copy-out, when the left side decides.
    "or_decided": ("if (hdr.h.a == 0 || yes(hdr.h.b)) { hdr.h.r = 1; }", dict(a=0, b=5), dict(b=5, r=1)),
    "or_undecided": ("if (hdr.h.a == 0 || yes(hdr.h.b)) { hdr.h.r = 1; }", dict(a=1, b=5), dict(a=1, b=6, r=1)),
    "and_decided": ("if (hdr.h.a == 0 && no(hdr.h.b)) { hdr.h.r = 1; }", dict(a=1, b=5), dict(a=1, b=5)),
    "and_undecided": ("if (hdr.h.a == 0 && no(hdr.h.b)) { hdr.h.r = 1; }", dict(a=0, b=5), dict(b=6)),
    "bool_value": ("bool t = no(hdr.h.a) && yes(hdr.h.b); hdr.h.r = t ? 8w1 : 8w2;",
                   dict(a=1, b=1), dict(a=2, b=1, r=2)),
    # ?: evaluates the branch it takes.
    "cond_then": ("hdr.h.r = hdr.h.a == 1 ? bump(hdr.h.b) : bump(hdr.h.c);", dict(a=1, b=1, c=1),
                  dict(a=1, b=2, c=1, r=7)),
    "cond_else": ("hdr.h.r = hdr.h.a == 1 ? bump(hdr.h.b) : bump(hdr.h.c);", dict(a=0, b=1, c=1),
                  dict(b=1, c=2, r=7)),
    "cond_in_cond": ("hdr.h.r = (yes(hdr.h.a) ? no(hdr.h.b) : yes(hdr.h.c)) ? 8w1 : 8w2;", dict(),
                     dict(a=1, b=1, r=2)),
    # Left to right: the left operand is read before the call on the right changes it.
    "left_before_call": ("hdr.h.r = hdr.h.a + bump(hdr.h.a);", dict(a=5), dict(a=6, r=12)),
    "call_before_right": ("hdr.h.r = bump(hdr.h.a) + hdr.h.a;", dict(a=5), dict(a=6, r=13)),
    "args_in_order": ("hdr.h.r = sum2(hdr.h.a, bump(hdr.h.a));", dict(a=5), dict(a=6, r=12)),
    "nested_left": ("hdr.h.r = (hdr.h.a * 2) - (hdr.h.a + bump(hdr.h.a));", dict(a=5), dict(a=6, r=255 & (10 - 12))),
    # p4c issue 2288: an inout argument is copied in before a later argument changes it.
    "inout_copied_in_first": ("keep(hdr.h.a, bump(hdr.h.a));", dict(a=5), dict(a=5)),
    "compare_then_call": ("if (hdr.h.a == bump(hdr.h.a)) { hdr.h.r = 1; }", dict(a=7), dict(a=8, r=1)),
    # Initializers of struct, header and tuple locals: items in order.
    "header_init": ("h_t t = {hdr.h.a, bump(hdr.h.a), hdr.h.a, 1, 2}; hdr.h.r = t.a; hdr.h.q = t.c; hdr.h.b = t.b;",
                    dict(a=5), dict(a=6, b=7, r=5, q=6)),
    "nested_struct_init": ("H2 t = {{hdr.h.a, bump(hdr.h.a), hdr.h.a, 1, 2}}; hdr.h.r = t.h.a; hdr.h.q = t.h.c;",
                           dict(a=5), dict(a=6, r=5, q=6)),
    "named_struct_init": ("S2 t = {y = bump(hdr.h.a), x = hdr.h.a}; hdr.h.r = t.x; hdr.h.q = t.y;",
                          dict(a=5), dict(a=6, r=5, q=7)),
    "tuple_init": ("tuple<bit<8>, bit<8>> t = {hdr.h.a, bump(hdr.h.a)}; hdr.h.r = t[0]; hdr.h.q = t[1];",
                   dict(a=5), dict(a=6, r=5, q=7)),
    # An index with a side effect is evaluated once, and before the right-hand side.
    "index_write_once": ("hdr.s[next_of(hdr.h.a)].v = 9;", dict(a=0), dict(a=1, s1=9)),
    "index_read_once": ("hdr.h.r = hdr.s[next_of(hdr.h.a)].v;", dict(a=1, s2=4), dict(a=2, r=4, s2=4)),
    "index_slice_once": ("hdr.s[next_of(hdr.h.a)].v[3:0] = 4w5;", dict(a=1, s2=0xF0), dict(a=2, s2=0xF5)),
    "lhs_before_rhs": ("hdr.s[hdr.h.a].v = next_of(hdr.h.a);", dict(a=1), dict(a=2, s1=2)),
    "index_inout_arg": ("bump(hdr.s[next_of(hdr.h.a)].v);", dict(a=0, s1=3), dict(a=1, s1=4)),
    "index_arg_then_call": ("hdr.h.r = sum2(hdr.s[hdr.h.a].v, next_of(hdr.h.a));", dict(a=0, s0=10, s1=20),
                            dict(a=1, r=11, s0=10, s1=20)),
}
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CASES)
def test_side_effects_happen_once_in_order(tmp_path, backend, name):
    body, given, want = CASES[name]
    got = run(tmp_path, backend, ingress(body), **given)
    expected = {f: given.get(f, 0) for f in FIELDS} | want
    assert got == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_table_apply_in_a_short_circuit_runs_only_when_reached(tmp_path, backend):
    """`c && t.apply().hit`: the table (and its action) runs only when c holds (spec 8.1)."""
    program = ingress("if (hdr.h.a == 1 && t.apply().hit) { hdr.h.r = 1; } else { hdr.h.q = 1; }", """
    action mark() { hdr.h.c = 0x33; }
    table t { key = { hdr.h.b : exact; } actions = { mark; } default_action = mark(); }
""")
    assert run(tmp_path, backend, program, a=0, b=2) == dict.fromkeys(FIELDS, 0) | dict(b=2, q=1)
    assert run(tmp_path, backend, program, a=1, b=2) == dict.fromkeys(FIELDS, 0) | dict(a=1, b=2, c=0x33, q=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_select_keys_are_read_in_order_around_a_call(tmp_path, backend):
    """`select(x, f(x))`: the first key is x before f changes it (p4c dismantles the select
    expression like any other: DoSimplifyExpressions::postorder(ParserState))."""
    program = HEAD.replace("transition accept; }\n}", """transition sel; }
    state sel { transition select(hdr.h.a, bump(hdr.h.a)) { (5, 7): hit; default: accept; } }
    state hit { hdr.h.r = hdr.h.a; transition accept; }
}""", 1) + """
control I(inout H hdr, inout M meta, inout standard_metadata_t sm) { apply { sm.egress_spec = 1; } }
""" + TAIL
    assert run(tmp_path, backend, program, a=5) == dict.fromkeys(FIELDS, 0) | dict(a=6, r=6)
