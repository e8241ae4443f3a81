"""Bad P4 input gives one clear `file:line:col: error: ...` message, never a traceback.

Each case is a small v1model program with one mistake; `⟦` and `⟧` mark the span the
message must point into (for a syntax error: the unexpected token). The API must raise
P4Error at that place; both CLIs (`p4sim compile` and the switch) must exit non-zero
with exactly that message on stderr.
"""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PROGRAM = """\
#include <core.p4>
#include <v1model.p4>

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}
struct headers { ethernet_t eth; }
struct metadata { }

parser MyParser(packet_in pkt, out headers hdr, inout metadata meta,
                inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.eth);
        transition accept;
    }
}
control MyVerifyChecksum(inout headers hdr, inout metadata meta) { apply { } }
control MyIngress(inout headers hdr, inout metadata meta,
                  inout standard_metadata_t standard_metadata) {
    action forward(bit<9> port) { standard_metadata.egress_spec = port; }
%(declarations)s
    apply {
%(statements)s
    }
}
control MyEgress(inout headers hdr, inout metadata meta,
                 inout standard_metadata_t standard_metadata) { apply { } }
control MyComputeChecksum(inout headers hdr, inout metadata meta) { apply { } }
control MyDeparser(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(MyParser(), MyVerifyChecksum(), MyIngress(), MyEgress(),
         MyComputeChecksum(), MyDeparser()) main;
"""


@dataclass(frozen=True)
class BadProgram:
    """A program text with its error span located: 1-based line, first and last column."""
    text: str
    line: int
    first_column: int
    last_column: int
    message_pattern: str      # a regex the message must match (case-insensitive)


def bad_program(message_pattern: str, declarations: str = "", statements: str = "") -> BadProgram:
    marked = PROGRAM % {"declarations": declarations, "statements": statements}
    start, end = marked.index("⟦"), marked.index("⟧")
    text = marked.replace("⟦", "").replace("⟧", "")
    line = marked.count("\n", 0, start) + 1
    first = start - marked.rfind("\n", 0, start)
    assert marked.count("\n", start, end) == 0, "a span stays on one line"
    return BadProgram(text, line, first, first + (end - start - 2), message_pattern)


CASES = {
    "syntax_error": bad_program(
        r"syntax|unexpected|expected",
        statements="        hdr.eth.etherType = hdr.eth.etherType + ⟦;⟧"),
    "unknown_name": bad_program(
        r"no_such_port",
        statements="        standard_metadata.egress_spec = ⟦no_such_port⟧;"),
    "unknown_field": bad_program(
        r"etherTipe",
        statements="        hdr.eth.etherType = ⟦hdr.eth.etherTipe⟧;"),
    "width_mismatch": bad_program(
        r"16.*8|8.*16",
        statements="        ⟦bit<8> narrow = hdr.eth.etherType⟧;"),
    "missing_include": bad_program(
        r"nope\.p4",
        declarations='⟦#include "nope.p4"⟧'),
    "unsupported_construct": bad_program(
        r"support|implement",
        declarations="""\
    table pick {
        key = { hdr.eth.dstAddr : exact; }
        actions = { forward; }
        ⟦psa_direct_counter = 32w128⟧;
    }""",
        statements="        pick.apply();"),
}

LOCATED_ERROR = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<column>\d+): error: (?P<message>.+)$")


@pytest.fixture(params=sorted(CASES))
def bad_file(request, tmp_path: Path) -> tuple[Path, BadProgram]:
    case = CASES[request.param]
    path = tmp_path / f"{request.param}.p4"
    path.write_text(case.text)
    return path, case


def assert_points_into_span(line: int, column: int, case: BadProgram) -> None:
    assert line == case.line
    assert case.first_column <= column <= case.last_column, \
        f"column {column} outside {case.first_column}..{case.last_column}"


def test_api_raises_one_located_p4error(bad_file):
    from p4sim import P4Error, compile_file

    path, case = bad_file
    with pytest.raises(P4Error) as caught:
        compile_file(str(path))
    err = caught.value
    assert Path(err.file).resolve() == path.resolve()
    assert_points_into_span(err.line, err.column, case)
    assert re.search(case.message_pattern, err.message, re.IGNORECASE), err.message
    assert str(err) == f"{err.file}:{err.line}:{err.column}: error: {err.message}"


def test_error_in_an_included_file_names_that_file(tmp_path: Path):
    from p4sim import P4Error, compile_file

    (tmp_path / "headers.p4").write_text("header h_t {\n    bit<8> a;\n    mac_t b;\n}\n")
    main = tmp_path / "main.p4"
    main.write_text('#include <core.p4>\n#include "headers.p4"\n')
    with pytest.raises(P4Error) as caught:
        compile_file(str(main))
    err = caught.value
    assert (Path(err.file).resolve(), err.line, err.column) == ((tmp_path / "headers.p4").resolve(), 3, 5)
    assert "mac_t" in err.message


def run_cli(*args: str) -> subprocess.CompletedProcess:
    # A bad program must fail before the switch binds anything; loopback just in case.
    return subprocess.run([sys.executable, "-m", "p4sim", *args], capture_output=True, text=True,
                          timeout=60, check=False, cwd=Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("command", ["compile", "switch"])
def test_cli_exits_nonzero_with_exactly_one_located_message(bad_file, tmp_path, command):
    path, case = bad_file
    if command == "compile":
        result = run_cli("compile", str(path), "-o", str(tmp_path / "out"))
    else:
        result = run_cli("--grpc-server-addr", "127.0.0.1:0", str(path))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    errors = [m for m in map(LOCATED_ERROR.match, result.stderr.splitlines()) if m]
    assert len(errors) == 1, result.stderr
    (error,) = errors
    assert Path(error["file"]).resolve() == path.resolve()
    assert_points_into_span(int(error["line"]), int(error["column"]), case)
    assert re.search(case.message_pattern, error["message"], re.IGNORECASE), error["message"]


def test_span_markers_locate_the_error_text():
    """The fixtures themselves: each span covers the text the comment says it does."""
    case = CASES["unknown_name"]
    line = case.text.splitlines()[case.line - 1]
    assert line[case.first_column - 1:case.last_column] == "no_such_port"
    syntax = CASES["syntax_error"]
    assert syntax.text.splitlines()[syntax.line - 1][syntax.first_column - 1] == ";"
