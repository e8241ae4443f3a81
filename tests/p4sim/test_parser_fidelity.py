"""Parser details where p4sim once gave another packet than BMv2, on every backend: header
stacks passed to a sub-parser, and parser operations whose argument BMv2 cannot take.

What P4 and BMv2 say:
- A header stack argument is copied in and out with its nextIndex (P4_16 6.8 and 8.18:
  nextIndex is part of the stack's value); p4c inlines sub-parsers for BMv2 (frontend
  Inline), so the callee's `.next` extracts continue where the caller was and the caller's
  `.last`/`.next` after the call see the callee's extracts.
- BMv2 raises error.ParserInvalidArgument for `advance(n)` and for a varbit `extract(h, n)`
  whose n is not a whole number of bytes, before it looks at the packet's length
  (behavioral-model src/bm_sim/parser.cpp: ParserOpAdvance, extract_VL); a varbit extract
  then checks the length (PacketTooShort) and then the varbit's maximum (HeaderTooShort).
  The packet goes on to ingress with parser_error set; what was extracted before stays
  valid, the failed header is invalid, and the bytes from the failing operation on
  follow the emitted headers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from p4sim import Switch, compile_file
from p4sim.backends import BACKENDS
from p4sim.frontend.checker import CORE_ERRORS

ERR = {name: i for i, name in enumerate(CORE_ERRORS)}
# The parser error as a number in hdr.r.err (P4 has no cast from error to bit<W>).
ERROR_CODE = " ".join(f"if (sm.parser_error == error.{name}) {{ hdr.r.err = {i}; }}" for name, i in ERR.items())
TAIL = """
control V(inout H hdr, inout M m) { apply { } }
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H hdr, inout M m) { apply { } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def run(tmp_path: Path, backend: str, text: str, data: bytes) -> bytes:
    path = tmp_path / "prog.p4"
    path.write_text("#include <core.p4>\n#include <v1model.p4>\n" + text + TAIL)
    sw = Switch(compile_file(str(path)), backend=backend)
    outs = sw.process(0, data)
    assert sw.stats["errors"] == 0
    [(port, out)] = outs
    assert port == 1
    return out


STACKS = """
header e_t { bit<8> v; }
header r_t { bit<8> last_in_sub; bit<8> next_in_sub; bit<8> last_after; bit<8> idx_after; }
struct H { r_t r; e_t[4] s; }
struct M { }
parser Sub(packet_in pkt, inout e_t[4] s, out bit<8> last, out bit<8> next_index) {
    state start {
        pkt.extract(s.next);
        last = s.last.v;
        next_index = (bit<8>)s.nextIndex;
        transition accept;
    }
}
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    Sub() sub;
    state start {
        hdr.r.setValid();
        pkt.extract(hdr.s.next);
        pkt.extract(hdr.s.next);
        sub.apply(pkt, hdr.s, hdr.r.last_in_sub, hdr.r.next_in_sub);
        hdr.r.last_after = hdr.s.last.v;
        pkt.extract(hdr.s.next);
        hdr.r.idx_after = (bit<8>)hdr.s.lastIndex;
        transition accept;
    }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { sm.egress_spec = 1; } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.r); pkt.emit(hdr.s); } }
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_subparser_continues_a_stack_and_hands_nextindex_back(tmp_path, backend):
    out = run(tmp_path, backend, STACKS, bytes([10, 20, 30, 40, 99]))
    # In the sub-parser: s[2] extracted (last 30), nextIndex 3; after it: last still 30, then
    # s[3] gets 40 and lastIndex is 3. Then the four elements, then the payload.
    assert out == bytes([30, 3, 30, 3, 10, 20, 30, 40, 99])


@pytest.mark.parametrize("backend", BACKENDS)
def test_subparser_that_overfills_the_stack_raises_stackoutofbounds_in_the_caller(tmp_path, backend):
    text = STACKS.replace("pkt.extract(hdr.s.next);\n        pkt.extract(hdr.s.next);\n        sub",
                          "pkt.extract(hdr.s.next);\n        pkt.extract(hdr.s.next);\n"
                          "        pkt.extract(hdr.s.next);\n        pkt.extract(hdr.s.next);\n        sub")
    text = text.replace("sm.egress_spec = 1;", "sm.egress_spec = 1; " + ERROR_CODE.replace("hdr.r.err", "hdr.r.last_in_sub"))
    out = run(tmp_path, backend, text, bytes([1, 2, 3, 4, 5, 6]))
    # The sub-parser's extract finds the stack full: the four elements stay, 5 and 6 follow.
    assert out == bytes([ERR["StackOutOfBounds"], 0, 0, 0, 1, 2, 3, 4, 5, 6])


ARGUMENTS = """
header a_t { bit<8> n; }
header v_t { bit<8> fixed; varbit<16> opt; }
header r_t { bit<8> err; }
struct H { r_t r; a_t a; v_t v; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.a);
        transition select(hdr.a.n[7:7]) { 1: skip; default: var; }
    }
    state skip { pkt.advance((bit<32>)hdr.a.n[6:0]); transition accept; }
    state var { pkt.extract(hdr.v, (bit<32>)hdr.a.n); transition accept; }
}
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 1; hdr.r.setValid(); ERROR_CODE }
}
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.r); pkt.emit(hdr.a); pkt.emit(hdr.v); } }
""".replace("ERROR_CODE", ERROR_CODE)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("data,error,emitted", [
    # varbit of 12 bits: not whole bytes, though the packet is long enough
    (bytes([12, 7, 1, 2, 3]), "ParserInvalidArgument", bytes([12])),
    # ...and also on a packet too short for it: the argument is checked first
    (bytes([12]), "ParserInvalidArgument", bytes([12])),
    # 24 bits > varbit<16> with the bytes there: HeaderTooShort; too few bytes: PacketTooShort
    (bytes([24, 7, 1, 2, 3]), "HeaderTooShort", bytes([24])),
    (bytes([24, 7, 1]), "PacketTooShort", bytes([24])),
    (bytes([16, 7, 1, 2, 3]), "NoError", bytes([16, 7, 1, 2])),
    # advance by 4 bits: ParserInvalidArgument; by 16 bits: the 2 bytes are skipped (and dropped)
    (bytes([0x84, 5, 6, 7]), "ParserInvalidArgument", bytes([0x84])),
    (bytes([0x90, 5, 6, 7]), "NoError", bytes([0x90])),
])
def test_parser_argument_errors_as_bmv2_raises_them(tmp_path, backend, data, error, emitted):
    out = run(tmp_path, backend, ARGUMENTS, data)
    consumed = len(emitted) if error == "NoError" else 1
    if error == "NoError" and data[0] & 0x80:
        consumed = 1 + (data[0] & 0x7F) // 8
    assert out == bytes([ERR[error]]) + emitted + data[consumed:]
