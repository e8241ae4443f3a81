"""P4 arithmetic at every width 1..64, signed and unsigned, against a big-integer oracle.

For each bit<W> and int<W> one program computes some thirty expressions of two operands
and a shift amount taken from the packet, and writes each result sign- or zero-extended
to 64 bits into the packet; hypothesis picks the operands (edge values included). The
oracle is P4_16's definition in plain Python integers (spec 8.6 and 8.7: results modulo
2^W, int<W> in two's complement, |+| and |-| saturate, shifts by W or more give 0, or
the sign for >> on int<W>, ++ takes the left operand's signedness, slices are unsigned,
casts truncate or extend). Each width compiles once per backend; the tests run on each
backend of --p4sim-backend (default both; tests/p4sim/conftest.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p4sim import Switch, compile_file

WIDTHS = range(1, 65)


def wrap(v: int, w: int, signed: bool) -> int:
    v &= (1 << w) - 1
    return v - (1 << w) if signed and v >> (w - 1) else v


def lo_hi(w: int, signed: bool) -> tuple[int, int]:
    return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)


def shl(a: int, s: int, w: int, signed: bool) -> int:
    return 0 if s >= w else wrap(a << s, w, signed)


def shr(a: int, s: int, w: int, signed: bool) -> int:
    return a >> min(s, w)            # Python's >> of a negative int is arithmetic, as P4's on int<W>


# (P4 expression over a, b of type T and s of type bit<8>; oracle(a, b, s, w, signed) -> the
# value of the expression; the width of its type, None for T's; who it applies to).
Case = tuple[str, Callable[..., int], Callable[[int], int] | None, Callable[[int, bool], bool]]
ALL = (lambda w, signed: True)
BOOL64 = (lambda w: 64)          # `c ? 64w1 : 64w0`
CASES: list[Case] = [
    ("a + b", lambda a, b, s, w, sg: wrap(a + b, w, sg), None, ALL),
    ("a - b", lambda a, b, s, w, sg: wrap(a - b, w, sg), None, ALL),
    ("a * b", lambda a, b, s, w, sg: wrap(a * b, w, sg), None, ALL),
    ("a + b + a", lambda a, b, s, w, sg: wrap(2 * a + b, w, sg), None, ALL),
    ("(a + b) * (a - b)", lambda a, b, s, w, sg: wrap((a + b) * (a - b), w, sg), None, ALL),
    ("a |+| b", lambda a, b, s, w, sg: max(lo_hi(w, sg)[0], min(lo_hi(w, sg)[1], a + b)), None, ALL),
    ("a |-| b", lambda a, b, s, w, sg: max(lo_hi(w, sg)[0], min(lo_hi(w, sg)[1], a - b)), None, ALL),
    ("a & b", lambda a, b, s, w, sg: a & b, None, ALL),
    ("a | b", lambda a, b, s, w, sg: a | b, None, ALL),
    ("a ^ b", lambda a, b, s, w, sg: a ^ b, None, ALL),
    ("~a", lambda a, b, s, w, sg: wrap(~a, w, sg), None, ALL),
    ("-a", lambda a, b, s, w, sg: wrap(-a, w, sg), None, ALL),
    ("a << s", lambda a, b, s, w, sg: shl(a, s, w, sg), None, ALL),
    ("a >> s", lambda a, b, s, w, sg: shr(a, s, w, sg), None, ALL),
    ("a << 1", lambda a, b, s, w, sg: shl(a, 1, w, sg), None, ALL),
    ("a >> 1", lambda a, b, s, w, sg: shr(a, 1, w, sg), None, ALL),
    ("a / (b | 1)", lambda a, b, s, w, sg: a // (b | 1), None, lambda w, sg: not sg),
    ("a % (b | 1)", lambda a, b, s, w, sg: a % (b | 1), None, lambda w, sg: not sg),
    ("(a < b ? 64w1 : 64w0)", lambda a, b, s, w, sg: int(a < b), BOOL64, ALL),
    ("(a <= b ? 64w1 : 64w0)", lambda a, b, s, w, sg: int(a <= b), BOOL64, ALL),
    ("(a > b ? 64w1 : 64w0)", lambda a, b, s, w, sg: int(a > b), BOOL64, ALL),
    ("(a >= b ? 64w1 : 64w0)", lambda a, b, s, w, sg: int(a >= b), BOOL64, ALL),
    ("(a == b ? 64w1 : 64w0)", lambda a, b, s, w, sg: int(a == b), BOOL64, ALL),
    ("(a != b ? 64w1 : 64w0)", lambda a, b, s, w, sg: int(a != b), BOOL64, ALL),
    ("a ++ b", lambda a, b, s, w, sg: wrap((a << w) | (b & ((1 << w) - 1)), 2 * w, sg),
     lambda w: 2 * w, lambda w, sg: w <= 32),
    ("a[W-1:H]", lambda a, b, s, w, sg: (a & ((1 << w) - 1)) >> (w // 2), lambda w: w - w // 2, ALL),
    ("(bit<W>)a", lambda a, b, s, w, sg: a & ((1 << w) - 1), lambda w: w, ALL),
    ("(bit<1>)a", lambda a, b, s, w, sg: a & 1, lambda w: 1, lambda w, sg: not sg),
    ("(bit<64>)a", lambda a, b, s, w, sg: a & ((1 << 64) - 1), lambda w: 64, lambda w, sg: not sg),
    ("(int<64>)a", lambda a, b, s, w, sg: a, lambda w: 64, lambda w, sg: sg),
    ("(int<H1>)a", lambda a, b, s, w, sg: wrap(a, w // 2 + 1, True), lambda w: w // 2 + 1, lambda w, sg: sg),
    ("(int<W>)a", lambda a, b, s, w, sg: wrap(a, w, True), lambda w: w, lambda w, sg: not sg),
]


def cases_for(w: int, signed: bool) -> list[Case]:
    return [c for c in CASES if c[3](w, signed)]


def result_type(case: Case, w: int, signed: bool) -> tuple[int, bool]:
    text, _, width, _ = case
    rw = w if width is None else width(w)
    if text.startswith("(bit<") or text.startswith("a[") or "?" in text:
        return rw, False
    if text.startswith("(int<"):
        return rw, True
    return rw, signed


def source(w: int, signed: bool) -> str:
    t = f"{'int' if signed else 'bit'}<{w}>"
    lines = []
    for i, case in enumerate(cases_for(w, signed)):
        rw, rsigned = result_type(case, w, signed)
        e = case[0].replace("W-1", str(w - 1)).replace(":H]", f":{w // 2}]") \
            .replace("<H1>", f"<{w // 2 + 1}>").replace("<W>", f"<{w}>")
        # Widened to 64 bits: an int<W> sign-extends first (int<W> -> int<64> -> bit<64>).
        lines.append(f"        hdr.o.r{i} = (bit<64>)(int<64>)({e});" if rsigned else
                     f"        hdr.o.r{i} = (bit<64>)({e});")
    fields = " ".join(f"bit<64> r{i};" for i in range(len(lines)))
    get = "(int<{w}>)hdr.i.{x}[{hi}:0]" if signed else "hdr.i.{x}[{hi}:0]"
    return f"""#include <core.p4>
#include <v1model.p4>
header in_t {{ bit<64> a; bit<64> b; bit<8> s; }}
header out_t {{ {fields} }}
struct H {{ in_t i; out_t o; }}
struct M {{ }}
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) {{
    state start {{ pkt.extract(hdr.i); transition accept; }}
}}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {{
    apply {{
        sm.egress_spec = 1;
        {t} a = {get.format(x="a", hi=w - 1, w=w)};
        {t} b = {get.format(x="b", hi=w - 1, w=w)};
        bit<8> s = hdr.i.s;
        hdr.o.setValid();
{chr(10).join(lines)}
    }}
}}
control V(inout H hdr, inout M m) {{ apply {{ }} }}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) {{ apply {{ }} }}
control C(inout H hdr, inout M m) {{ apply {{ }} }}
control D(packet_out pkt, in H hdr) {{ apply {{ pkt.emit(hdr.o); }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


class Switches:
    """Each width's switch, compiled on first use. Kept by a module-scoped fixture, not a
    module-level cache: a process that runs the tests again (mutmut forks one per mutant of
    the code generator) must compile again."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.built: dict[tuple[int, bool, str], Switch] = {}

    def get(self, w: int, signed: bool, backend: str) -> Switch:
        if (w, signed, backend) not in self.built:
            path = self.folder / f"{'int' if signed else 'bit'}{w}.p4"
            path.write_text(source(w, signed))
            self.built[w, signed, backend] = Switch(compile_file(str(path)), backend=backend)
        return self.built[w, signed, backend]


def run(switches: Switches, backend: str, w: int, signed: bool, a: int, b: int, s: int) -> list[int]:
    sw = switches.get(w, signed, backend)
    mask = (1 << 64) - 1
    data = (a & mask).to_bytes(8, "big") + (b & mask).to_bytes(8, "big") + bytes([s])
    [(port, out)] = sw.process(0, data)
    assert port == 1
    return [int.from_bytes(out[i:i + 8], "big") for i in range(0, len(out), 8)]


def expected(w: int, signed: bool, a: int, b: int, s: int) -> list[int]:
    return [case[1](a, b, s, w, signed) & ((1 << 64) - 1) for case in cases_for(w, signed)]


@st.composite
def operands(draw, w: int | None = None, signed: bool | None = None):
    w = draw(st.sampled_from(WIDTHS)) if w is None else w
    signed = draw(st.booleans()) if signed is None else signed
    lo, hi = lo_hi(w, signed)
    edge = st.sampled_from(sorted(v for v in {lo, hi, 0, 1, -1, hi - 1, lo + 1, hi // 2} if lo <= v <= hi))
    value = st.one_of(edge, st.integers(lo, hi))
    shift = st.one_of(st.sampled_from([0, 1, w - 1, w, w + 1, 255]), st.integers(0, 255))
    return w, signed, draw(value), draw(value), draw(shift)


@pytest.fixture(scope="module")
def switches(tmp_path_factory) -> Switches:
    return Switches(tmp_path_factory.mktemp("widths"))


@pytest.mark.parametrize("signed", [False, True], ids=["bit", "int"])
@pytest.mark.parametrize("w", WIDTHS)
def test_every_width_edges(switches, p4sim_backend, w, signed):
    """Each width's extremes, deterministically: carries into the top bit, borrows out of
    it, overflow of the most negative value, shifts by W-1, W and more."""
    lo, hi = lo_hi(w, signed)
    for a, b, s in [(hi, 1, w - 1), (hi, hi, w), (lo, 1, 0), (lo, hi, 1), (hi // 2 + 1, hi // 2 + 1, w + 1),
                    (lo, lo, 255), (0, hi, 3)]:
        a, b = wrap(a, w, signed), wrap(b, w, signed)        # 1 is -1 in an int<1>
        assert run(switches, p4sim_backend, w, signed, a, b, s) == expected(w, signed, a, b, s), (a, b, s)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operands())
def test_arithmetic_matches_big_integer_oracle(switches, p4sim_backend, ops):
    w, signed, a, b, s = ops
    assert run(switches, p4sim_backend, w, signed, a, b, s) == expected(w, signed, a, b, s)
