"""Differential testing of p4sim's backends on generated programs (tests/p4sim/p4fuzz.py), in
CI: a fixed seed, programs until the time budget is spent (at least MIN_PROGRAMS). Each
program runs with random packets and table entries on every backend in BACKENDS and on the
Python backend with tracing on; packets out, registers and error counts must agree, and no
packet may make a switch fail. `make fuzz-p4sim SEED=... MINUTES=...` runs longer.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SEED = 22
BUDGET_S = 45.0
MIN_PROGRAMS = 10

_spec = importlib.util.spec_from_file_location("p4fuzz", Path(__file__).with_name("p4fuzz.py"))
p4fuzz = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("p4fuzz", p4fuzz)          # its dataclasses look their module up
_spec.loader.exec_module(p4fuzz)


def test_generated_programs_run_alike_on_every_backend(tmp_path):
    n, failures = p4fuzz.fuzz(SEED, BUDGET_S, tmp_path, at_least=MIN_PROGRAMS)
    assert n >= MIN_PROGRAMS
    assert failures == [], "\n".join(failures)


def test_generator_is_deterministic_and_varied():
    a, b = p4fuzz.generate(f"{SEED}:0"), p4fuzz.generate(f"{SEED}:0")
    assert (a.source, a.packets, a.entries) == (b.source, b.packets, b.entries)
    sources = {p4fuzz.generate(f"{SEED}:{i}").source for i in range(20)}
    assert len(sources) == 20
    text = "".join(sources)
    for construct in (" ++ ", " |+| ", " |-| ", " ? ", "[", "(int<", " >> ", "fn0(", "r.write", "push_front"):
        assert construct in text, construct
