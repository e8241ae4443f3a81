"""The front end: cpp with our includes, the grammar, checking errors at file:line:col,
and the ProgramInfo names p4c would put in P4Info.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from p4sim import P4Error, compile_file
from p4sim.frontend import parse_text, preprocess
from p4sim.ir import ActionRef, ConstEntry, MatchField

HEAD = """#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers { eth_t eth; }
struct meta_t { bit<8> m8; bit<16> m16; }
parser P(packet_in pkt, out headers hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
"""
TAIL = """
control V(inout headers hdr, inout meta_t meta) { apply { } }
control E(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control C(inout headers hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
HEAD_LINES = HEAD.count("\n")
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def ingress(body: str, decls: str = "") -> str:
    return HEAD + ("control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {\n"
                   f"{decls}\n    apply {{\n{body}\n    }}\n}}") + TAIL


def compile_text(tmp_path, text: str, name: str = "prog.p4"):
    path = tmp_path / name
    path.write_text(text)
    return compile_file(str(path))


def error_of(tmp_path, text: str) -> P4Error:
    with pytest.raises(P4Error) as info:
        compile_text(tmp_path, text)
    return info.value


@pytest.mark.parametrize("body,line_offset,column,words", [
    ("        meta.m8 = meta.m16;", 4, 9, "cannot assign bit<16> to bit<8>"),
    ("        meta.m8 = nosuch;", 4, 19, "unknown name `nosuch`"),
    ("        meta.m8 = hdr.eth.nosuch;", 4, 19, "no field `nosuch`"),
    ("        meta.m8 = meta.m8 + meta.m16;", 4, 19, "different types"),
    ("        if (meta.m8) { }", 4, 13, "must be bool"),
    ("        meta.m8 = meta.m8 +;", 4, 28, "syntax error"),
    ("        meta.m8 = (bit<8>)hdr.eth;", 4, 19, "cannot cast"),
    ("        meta.m8 = meta.m16[20:3];", 4, 19, "outside bit<16>"),
])
def test_error_names_file_line_and_column(tmp_path, body, line_offset, column, words):
    err = error_of(tmp_path, ingress(body))
    assert err.file.endswith("prog.p4")
    assert (err.line, err.column) == (HEAD_LINES + line_offset, column)
    assert words in err.message
    assert str(err).startswith(f"{err.file}:{err.line}:{err.column}: error: ")


def test_unsupported_construct_is_a_located_error(tmp_path):
    text = HEAD + "control I(inout headers hdr, inout meta_t meta, inout standard_metadata_t sm) {\n" \
        "    table t {\n        key = { hdr.eth.dst: exact; }\n        actions = { NoAction; }\n" \
        "        psa_direct_counter = 32w128;\n    }\n    apply { t.apply(); }\n}" + TAIL
    err = error_of(tmp_path, text)
    assert "table property `psa_direct_counter` is not supported" in err.message
    assert err.line == text.splitlines().index("        psa_direct_counter = 32w128;") + 1


def test_error_inside_an_included_file_names_that_file(tmp_path):
    (tmp_path / "extra.p4").write_text("\n\nconst bit<8> BAD = undefined_name;\n")
    text = ingress("").replace("struct headers", '#include "extra.p4"\nstruct headers')
    err = error_of(tmp_path, text)
    assert (err.file.endswith("extra.p4"), err.line, err.column) == (True, 3, 20)


def test_missing_include_is_reported_by_cpp_with_its_location(tmp_path):
    err = error_of(tmp_path, '#include "nope.p4"\n' + ingress(""))
    assert err.line == 1 and "nope.p4" in err.message


def test_missing_file_is_a_p4error(tmp_path):
    with pytest.raises(P4Error, match="no such file"):
        compile_file(str(tmp_path / "absent.p4"))


def test_includes_resolve_to_p4sims_own_v1model(tmp_path):
    path = tmp_path / "p.p4"
    path.write_text(ingress(""))
    text = preprocess(str(path))
    assert "p4sim/include/v1model.p4" in text and "standard_metadata_t" in text


def test_type_names_and_generics_parse(tmp_path):
    program = parse_text("""
        extern E<T> { E(bit<32> n); T get<U>(in U x); }
        header h_t { bit<8> a; }
        typedef bit<8> byte_t;
        control X(inout h_t h) { apply { byte_t b = h.a; @atomic { bit<8> c = b >> 2 > 1 ? 8w1 : 8w0; } } }
    """, "inline.p4")
    assert [type(d).__name__ for d in program.declarations] == \
        ["ExternDecl", "HeaderDecl", "TypedefDecl", "ControlDecl"]


TABLES = """
    action fwd(bit<9> port) { sm.egress_spec = port; }
    @name("renamed") action other() { }
    direct_counter(CounterType.packets) hits;
    table routes {
        key = { hdr.eth.dst : exact @name("dst_mac"); hdr.eth.type : ternary; hdr.eth.isValid() : exact; }
        actions = { fwd; @defaultonly other; NoAction; }
        const default_action = other();
        counters = hits;
        size = 64;
        entries = {
            (0x1, 0x0800 &&& 0xFF00, true) : fwd(2);
            (0x2, _, true) : fwd(3);
        }
    }
"""


def test_program_info_uses_p4c_names_and_evaluates_entries(tmp_path):
    info = compile_text(tmp_path, ingress("        routes.apply();", TABLES)).info
    t = info.tables["I.routes"]
    assert t.match_fields == (MatchField("dst_mac", 48, "exact"), MatchField("hdr.eth.type", 16, "ternary"),
                              MatchField("hdr.eth.$valid$", 1, "exact"))
    assert t.actions == (ActionRef("I.fwd"), ActionRef("I.renamed", "DEFAULT_ONLY"), ActionRef("NoAction"))
    assert (t.default_action, t.const_default_action, t.size) == ("I.renamed", True, 64)
    assert t.const_entries == (ConstEntry((("exact", 1), ("ternary", 0x0800, 0xFF00), ("exact", 1)), "I.fwd", (2,)),
                               ConstEntry((("exact", 2), None, ("exact", 1)), "I.fwd", (3,)))
    assert not t.entries_are_const
    assert t.direct_counter == "I.hits" and info.counters["I.hits"].direct_table == "I.routes"
    assert set(info.actions) == {"I.fwd", "I.renamed", "NoAction"}
    assert [p.name for p in info.actions["I.fwd"].params] == ["port"]


def test_default_action_must_be_listed(tmp_path):
    decls = TABLES.replace("const default_action = other();", "default_action = nosuch();")
    err = error_of(tmp_path, ingress("        routes.apply();", decls))
    assert "not in the actions" in err.message


def test_externs_and_controller_headers_reach_program_info(tmp_path):
    text = ingress("        r.write(0, 1); c.count(1);",
                   "    register<bit<32>>(16) r;\n    counter(8, CounterType.bytes) c;\n"
                   "    meter(4, MeterType.packets) m;")
    text = text.replace("header eth_t", '@controller_header("packet_in") header pin_t { bit<9> port; bit<7> pad; }\nheader eth_t')
    info = compile_text(tmp_path, text).info
    assert (info.registers["I.r"].bitwidth, info.registers["I.r"].size) == (32, 16)
    assert (info.counters["I.c"].unit, info.counters["I.c"].size) == ("BYTES", 8)
    assert info.meters["I.m"].unit == "PACKETS"
    assert [(f.name, f.bitwidth) for f in info.controller_headers["packet_in"].fields] == [("port", 9), ("pad", 7)]


def test_header_that_is_not_whole_bytes_is_rejected(tmp_path):
    err = error_of(tmp_path, ingress("").replace("bit<16> type;", "bit<15> type;"))
    assert "whole number of bytes" in err.message and err.line == 3


def test_annotations_keep_their_text_for_p4info(tmp_path):
    decls = '    @brief("next hop") @p4runtime_translation("sdn_port", string) @id(0x01000007)\n' \
            '    table t { key = { hdr.eth.dst : exact; } actions = { NoAction; } }'
    t = compile_text(tmp_path, ingress("        t.apply();", decls)).info.tables["I.t"]
    assert t.annotations == ('@brief("next hop")', '@p4runtime_translation("sdn_port", string)', "@id(16777223)")


def test_table_without_default_action_gets_default_only_noaction(tmp_path):
    decls = "    action a() { }\n    table t { key = { hdr.eth.dst : exact; } actions = { a; } }"
    t = compile_text(tmp_path, ingress("        t.apply();", decls)).info.tables["I.t"]
    assert t.default_action == "NoAction"
    assert t.actions == (ActionRef("I.a"), ActionRef("NoAction", "DEFAULT_ONLY"))


def test_field_list_index_may_be_a_named_constant(tmp_path):
    """p4c accepts `@field_list(NAME)` with NAME a global const (v1model-special-ops-bmv2.p4 does)."""
    text = ingress("clone_preserving_field_list(CloneType.I2E, 5, KEEP);").replace(
        "struct meta_t { bit<8> m8;", "const bit<8> KEEP = 3;\nstruct meta_t { @field_list(KEEP, 4) bit<8> m8;")
    prog = compile_text(tmp_path, text)
    assert prog.checked.field_lists == {3: ["m8"], 4: ["m8"]}


def test_field_list_index_that_is_no_constant_is_a_located_error(tmp_path):
    text = ingress("").replace("struct meta_t { bit<8> m8;", "struct meta_t { @field_list(NOPE) bit<8> m8;")
    with pytest.raises(P4Error, match="@field_list index 'NOPE'"):
        compile_text(tmp_path, text)


def test_the_lexer_finds_the_tokens_lark_s_own_lexer_finds():
    """The parser runs lark's terminal regex in a loop of its own (lark's lexer is slow on large
    programs): on the programs here, the same tokens at the same places as lark's lexer."""
    from p4sim.frontend.parser import _grammar
    from p4sim.frontend.preprocess import SourceMap

    grammar = _grammar()
    for path in [REPO_ROOT / "p4src/allreduce.p4", *sorted((REPO_ROOT / "tests/p4programs").glob("*.p4"))]:
        text = preprocess(str(path))
        ours = [(t.type, t.value, t.line, t.column, t.start_pos, t.end_pos)
                for t in grammar.tokens(text, SourceMap.of(text, str(path)))]
        lark_s = [(t.type, t.value, t.line, t.column, t.start_pos, t.end_pos) for t in grammar.lark.lex(text)]
        assert len(ours) > 100 and ours == lark_s, path
