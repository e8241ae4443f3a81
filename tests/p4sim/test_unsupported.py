"""Every entry of p4sim/README.md's "Not supported" list gives a located error that names the
construct: the API raises P4Error at the marked span (test_bad_input.py checks that the
CLIs print such errors as one line, for any P4Error).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from p4sim import P4Error, compile_file

_spec = importlib.util.spec_from_file_location("p4sim_bad_input", Path(__file__).with_name("test_bad_input.py"))
bad_input = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("p4sim_bad_input", bad_input)     # its dataclasses look their module up
_spec.loader.exec_module(bad_input)
bad_program = bad_input.bad_program


def with_top(declaration: str, case):
    """The case with a one-line top-level declaration before the controls (the span moves down)."""
    text = case.text.replace("control MyVerifyChecksum", declaration + "\ncontrol MyVerifyChecksum", 1)
    return dataclasses.replace(case, text=text, line=case.line + 1)


TABLE = """\
    table pick {
        key = { %s; }
        actions = { forward; }
        %s;
    }"""
CASES = {
    # p4c's BMv2 backend has no implementation of them either.
    "program_extern_function": with_top("extern bit<8> crc8_of(in bit<16> v);", bad_program(
        r"extern function `crc8_of`.*declared by the program",
        declarations="    bit<8> x;", statements="        x = ⟦crc8_of(hdr.eth.etherType)⟧;")),
    "program_extern_object": with_top("extern Scrambler { Scrambler(); void run(); }", bad_program(
        r"extern `Scrambler`.*declared by the program", declarations="    ⟦Scrambler() s⟧;")),
    "generic_control_without_type_arguments": with_top("control Gen<T>(inout T x) { apply { } }", bad_program(
        r"Gen takes 1 type arguments, got 0.*does not infer", declarations="    ⟦Gen() g⟧;",
        statements="        g.apply(hdr.eth.etherType);")),
    "table_property": bad_program(
        r"table property `psa_idle_timeout`.*not supported",
        declarations=TABLE % ("hdr.eth.dstAddr : exact", "⟦psa_idle_timeout = true⟧"),
        statements="        pick.apply();"),
    "match_kind": with_top("match_kind { fuzzy }", bad_program(
        r"match kind `fuzzy`.*not supported",
        declarations=TABLE % ("⟦hdr.eth.dstAddr : fuzzy⟧", "size = 16"),
        statements="        pick.apply();")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_unsupported_construct_is_refused_where_it_is(tmp_path, name):
    case = CASES[name]
    path = tmp_path / f"{name}.p4"
    path.write_text(case.text)
    with pytest.raises(P4Error) as caught:
        compile_file(str(path))
    err = caught.value
    assert Path(err.file).resolve() == path.resolve()
    bad_input.assert_points_into_span(err.line, err.column, case)
    assert re.search(case.message_pattern, err.message), err.message
