"""Every program in tests/p4programs compiles, builds a P4Info, reloads from its device
config, is listed in the folder's README and is driven by at least one packet test.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from p4sim import Program, Switch
from p4sim.p4info import build_p4info
from tests.p4sim.conftest import PROGRAMS_DIR

PROGRAMS = sorted(p.stem for p in PROGRAMS_DIR.glob("*.p4"))
TESTS_DIR = Path(__file__).resolve().parent


def test_corpus_has_at_least_forty_programs():
    assert len(PROGRAMS) >= 40


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_compiles_builds_p4info_and_reloads(p4program, name):
    program = p4program(name)
    info = build_p4info(program.info)
    assert {t.preamble.name for t in info.tables} == set(program.info.tables)
    Switch(Program.from_device_config(program.device_config()))


def test_every_program_is_listed_in_the_readme_and_used_by_a_test():
    readme = (PROGRAMS_DIR / "README.md").read_text()
    listed = set(re.findall(r"`(\w+)\.p4`", readme))
    tests = "\n".join(p.read_text() for p in TESTS_DIR.glob("test_*.py"))
    used = set(re.findall(r'make_switch\("(\w+)"', tests)) | set(re.findall(r'p4program\("(\w+)"', tests))
    assert [n for n in PROGRAMS if n not in listed] == []
    assert [n for n in PROGRAMS if n not in used] == []
