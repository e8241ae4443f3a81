"""A large program (thousands of statements, as allreduce.p4 has at a large K) compiles and
runs on every backend: each of its elements goes through a register read-modify-write, and
what comes out is checked against sums computed here. How fast it compiles is measured
elsewhere, not asserted here.
"""
from __future__ import annotations

import random
import struct

import pytest

from p4sim import P4Error, Switch, compile_file

BLOCKS, FIELDS = 24, 32                 # a header stack of 24 headers of 32 x bit<32>: 768 elements
ELEMENTS = BLOCKS * FIELDS
MASK32 = (1 << 32) - 1


def large_program(blocks: int = BLOCKS) -> str:
    """A v1model program that adds each element of the packet to its register cell and
    writes the running sum back into the packet, element by element (no loops, no macros:
    every statement spelled out, as cpp expands allreduce.p4's)."""
    fields = "".join(f"    bit<32> e{f};\n" for f in range(FIELDS))
    extracts = "".join("        pkt.extract(hdr.blocks.next);\n" for _ in range(blocks))
    steps = "".join(
        f"        sums.read(value, {b * FIELDS + f});\n"
        f"        value = value + hdr.blocks[{b}].e{f};\n"
        f"        sums.write({b * FIELDS + f}, value);\n"
        f"        hdr.blocks[{b}].e{f} = value;\n"
        for b in range(blocks) for f in range(FIELDS))
    return f"""#include <core.p4>
#include <v1model.p4>
header block_t {{
{fields}}}
struct headers_t {{ block_t[{blocks}] blocks; }}
struct meta_t {{ }}
parser P(packet_in pkt, out headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {{
    state start {{
{extracts}        transition accept;
    }}
}}
control V(inout headers_t hdr, inout meta_t m) {{ apply {{ }} }}
control I(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {{
    register<bit<32>>({blocks * FIELDS}) sums;
    action accumulate() {{
        bit<32> value;
{steps}    }}
    apply {{
        accumulate();
        sm.egress_spec = sm.ingress_port;
    }}
}}
control E(inout headers_t hdr, inout meta_t m, inout standard_metadata_t sm) {{ apply {{ }} }}
control C(inout headers_t hdr, inout meta_t m) {{ apply {{ }} }}
control D(packet_out pkt, in headers_t hdr) {{ apply {{ pkt.emit(hdr.blocks); }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def packet(values: list[int]) -> bytes:
    return struct.pack(f"!{len(values)}I", *values)


def test_a_program_of_thousands_of_statements_sums_every_element(tmp_path):
    path = tmp_path / "large.p4"
    path.write_text(large_program())
    sw = Switch(compile_file(str(path)))
    rng = random.Random(7)
    sums = [0] * ELEMENTS
    for _ in range(3):
        values = [rng.getrandbits(32) for _ in range(ELEMENTS)]
        sums = [(s + v) & MASK32 for s, v in zip(sums, values)]
        assert sw.process(5, packet(values)) == [(5, packet(sums))]
    assert sw.state.registers["I.sums"].values[:ELEMENTS] == sums
    assert sw.stats["errors"] == 0


def test_a_syntax_error_deep_in_a_large_program_names_its_line_and_column(tmp_path):
    lines = large_program().split("\n")
    at = lines.index("        value = value + hdr.blocks[17].e9;")
    lines[at] = lines[at].rstrip(";")                     # the next statement follows without a `;`
    path = tmp_path / "large.p4"
    path.write_text("\n".join(lines))
    with pytest.raises(P4Error) as err:
        compile_file(str(path))
    assert str(err.value) == f"{path}:{at + 2}:9: error: syntax error, unexpected `sums`"
