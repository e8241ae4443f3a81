"""p4sim gives BMv2 1.15.0's own answers: the recorded traces in ../shared/reference/bmv2-1.15.0.

Each folder holds a small v1model program, its control-plane setup (setup.json, BMv2's
units and priorities), the input packets and what simple_switch 1.15.0 sent for each,
recorded one packet at a time on one switch process. The test loads the program,
applies the setup, replays the inputs in order on one Switch (state is shared across
packets, as it was in BMv2) and asserts every output frame byte for byte, per port in
order, and the registers and counters read back at the end.

Packets marked "bmv2_crashed" (a run-time out-of-bounds header-stack index: simple_switch
dies with std::out_of_range) cannot be matched. There p4sim follows the P4_16 spec
(section 8.18, "Accessing elements of a header stack"): an out-of-bounds write has no
effect and an out-of-bounds read gives an unspecified value, which p4sim makes 0 (the
fields of a fresh invalid header). So the test asserts the packet comes out of the port
the program chose, with the write skipped or the read giving 0, and then, as the
recorder did after BMv2's crash, starts a fresh switch with the same setup.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from p4sim import Switch, compile_file
from p4sim.ir import priority_from_bmv2
from p4sim.state import CloneSession, TableEntry

TRACES = ("bound_action_args", "checksums_hashes", "clone_resubmit_recirculate",
          "compound_assign_loops", "header_union", "inout_functions", "list_struct_init",
          "meters_counters", "multicast_rid", "registers_drop_exit", "stack_oob",
          "table_matching", "uninit_and_errors", "varbit")

# What p4sim sends for the packets that crashed BMv2 (see the module docstring), by
# (program, packet number): the program's output with the out-of-bounds write skipped
# (stack_oob #8: s[9].v = 0x77) or the out-of-bounds read giving 0 (#11: rd = s[200].v).
SPEC_ANSWERS = {
    ("stack_oob", 8): [(1, "00000000000200000000000188b90309aa200103100120007461696c")],
    ("stack_oob", 11): [(1, "00000000000200000000000188b904c800200103100120007461696c")],
}


def _reference_dir() -> Path | None:
    """<repo root>/../shared/reference/bmv2-1.15.0, looked up from the nearest ancestor
    that has it (a git worktree sits one level deeper than the main checkout)."""
    root = Path(__file__).resolve().parents[2]
    for base in root.parents:
        candidate = base / "shared" / "reference" / "bmv2-1.15.0"
        if candidate.is_dir():
            return candidate
    return None


REFERENCE = _reference_dir()


def _int(v: Any) -> int:
    return int(v, 0) if isinstance(v, str) else int(v)


def _apply_setup(sw: Switch, setup: dict) -> None:
    """setup.json (target-neutral, BMv2 units) into the switch's runtime state."""
    state, info = sw.state, sw.program.info
    for t in setup.get("tables", []):
        table = state.tables[t["table"]]
        match = []
        for f in table.info.match_fields:
            m = t["match"].get(f.name)
            match.append(None if m is None else (m[0], *(_int(x) for x in m[1:])))
        params = info.actions[t["action"]].params
        args = tuple(_int(t["params"][p.name]) for p in params)
        prio = priority_from_bmv2(t["priority"]) if "priority" in t else 0
        table.insert(TableEntry(tuple(match), t["action"], args, prio))
    for d in setup.get("default_actions", []):
        params = info.actions[d["action"]].params
        state.tables[d["table"]].set_default(d["action"], tuple(_int(d["params"][p.name]) for p in params))
    for g in setup.get("multicast_groups", []):
        state.multicast_groups[g["id"]] = [(r["port"], r["rid"]) for r in g["replicas"]]
    for c in setup.get("clone_sessions", []):
        state.clone_sessions[c["id"]] = CloneSession([(c["port"], 0)])
    for r in setup.get("registers", []):
        state.registers[r["name"]].write(r["index"], _int(r["value"]))
    for m in setup.get("meters", []):
        # BMv2 packet meters: rates in packets per microsecond, bursts in packets.
        (cir, cburst), (pir, pburst) = m["rates"]
        state.meters[m["name"]].set_config(m["index"], float(cir) * 1e6, int(cburst),
                                           float(pir) * 1e6, int(pburst))


def _fresh_switch(program, setup: dict) -> Switch:
    sw = Switch(program, seed=1)
    _apply_setup(sw, setup)
    return sw


@pytest.mark.parametrize("name", TRACES)
def test_p4sim_sends_what_bmv2_sent(name: str) -> None:
    if REFERENCE is None:
        pytest.skip("../shared/reference/bmv2-1.15.0 is absent: the BMv2 traces are not on this machine")
    folder = REFERENCE / name
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    program = compile_file(str(folder / f"{name}.p4"))
    setup = json.loads((folder / "setup.json").read_text())
    trace = json.loads((folder / "trace.json").read_text())
    sw = _fresh_switch(program, setup)
    for i, pkt in enumerate(trace["packets"]):
        outs = sw.process(pkt["in_port"], bytes.fromhex(pkt["in_hex"]))
        assert sw.stats["errors"] == 0, f"{name} #{i}: p4sim failed on the packet"
        got = sorted(((port, data.hex()) for port, data in outs), key=lambda o: o[0])
        if pkt.get("bmv2_crashed"):
            assert got == SPEC_ANSWERS[(name, i)], f"{name} #{i} ({pkt.get('comment')})"
            sw = _fresh_switch(program, setup)       # BMv2 was restarted here
            continue
        want = [(o["port"], o["hex"]) for o in pkt["out"]]
        assert got == want, f"{name} #{i} ({pkt.get('comment')})"
    for reg, values in trace.get("registers_after", {}).items():
        assert sw.state.registers[reg].values == values, reg
    for cname, cells in trace.get("counters_after", {}).items():
        if cname in sw.state.counters:
            c = sw.state.counters[cname]
            got_cells = [{"packets": p, "bytes": b} for p, b in zip(c.packets, c.bytes)]
        else:                                         # direct: indexed by entry handle = insertion order
            table = program.info.counters[cname].direct_table
            got_cells = [{"packets": e.packets, "bytes": e.bytes} for e in sw.state.tables[table].entries()]
        assert got_cells == cells, cname
