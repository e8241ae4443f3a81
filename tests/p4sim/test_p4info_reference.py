"""p4sim writes the P4Info that p4c 1.2.4.0 writes, program by program, byte for byte.

The references sit in shared/reference beside the repository (CI copies shared/ next to the
clone): p4c-1.2.4.0/NAME.p4info.txt for p4src/allreduce.p4 and tests/p4programs/NAME.p4, and
bmv2-1.15.0/NAME/NAME.p4info.txt beside the programs of BMv2's recorded traces. The whole
message is compared (names, ids, aliases, order, params, match fields, annotations, sizes,
registers, counters, meters, digests, type_info), then the text p4sim writes, so a controller
written against p4c's output runs on p4sim unchanged.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from p4sim import compile_file
from p4sim.p4info import build_p4info, to_text
from tests.p4sim.conftest import PROGRAMS_DIR, REPO_ROOT, reference_dir

P4C = reference_dir("p4c-1.2.4.0")
BMV2 = reference_dir("bmv2-1.15.0")
ABSENT = "shared/reference is not beside the repository (CI copies it next to the clone)"


def p4c_cases() -> list:
    """One case per reference p4c wrote: allreduce.p4 and each tests/p4programs program."""
    if P4C is None:
        return [pytest.param(None, None, marks=pytest.mark.skip(reason=ABSENT), id="p4c-references")]
    cases = []
    for ref in sorted(P4C.glob("*.p4info.txt")):
        name = ref.name.removesuffix(".p4info.txt")
        program = REPO_ROOT / "p4src" / "allreduce.p4" if name == "allreduce" else PROGRAMS_DIR / f"{name}.p4"
        cases.append(pytest.param(program, ref, id=name))
    return cases


def bmv2_cases() -> list:
    """The programs of BMv2's traces, each with the P4Info p4c wrote for it."""
    if BMV2 is None:
        return [pytest.param(None, None, marks=pytest.mark.skip(reason=ABSENT), id="bmv2-references")]
    return [pytest.param(d / f"{d.name}.p4", d / f"{d.name}.p4info.txt", id=d.name)
            for d in sorted(BMV2.iterdir()) if (d / f"{d.name}.p4info.txt").is_file()]


def assert_same_p4info(program: Path, reference: Path) -> None:
    expected_text = reference.read_text()
    expected = text_format.Parse(expected_text, p4info_pb2.P4Info())
    ours = build_p4info(compile_file(str(program), defines=build_defines(program, expected)).info)
    # Text first: on a mismatch pytest shows the lines that differ.
    assert text_format.MessageToString(ours) == text_format.MessageToString(expected)
    assert ours == expected
    assert to_text(ours) == expected_text


def build_defines(program: Path, reference: p4info_pb2.P4Info) -> tuple[str, ...]:
    """allreduce.p4's elements per packet (INC_K) is a build parameter that changes the size of
    slot_values, so it is compiled with the K its reference was made for, read back from that
    size (slot_values holds K cells per slot_seen cell); other programs take no defines."""
    if program.name != "allreduce.p4":
        return ()
    sizes = {r.preamble.name.rpartition(".")[2]: r.size for r in reference.registers}
    return (f"INC_K={sizes['slot_values'] // sizes['slot_seen']}",)


def test_every_p4c_reference_names_a_program_of_ours():
    if P4C is None:
        pytest.skip(ABSENT)
    names = {ref.name.removesuffix(".p4info.txt") for ref in P4C.glob("*.p4info.txt")}
    # issue 10: allreduce.p4 and the 11 tutorial-style programs; more come with their references.
    assert len(names) >= 12 and "allreduce" in names
    for case in p4c_cases():
        program, _ = case.values
        assert program.is_file(), f"{program} has a reference but no program"


@pytest.mark.parametrize(("program", "reference"), p4c_cases())
def test_p4info_equals_p4c_output(program: Path, reference: Path):
    assert_same_p4info(program, reference)


@pytest.mark.parametrize(("program", "reference"), bmv2_cases())
def test_p4info_of_bmv2_trace_program_equals_p4c_output(program: Path, reference: Path):
    assert_same_p4info(program, reference)
