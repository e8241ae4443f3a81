"""Register access through the target's adapter: P4Runtime on p4sim, and the Thrift
runtime CLI on BMv2 (the commands it is sent and the output it prints, BMv2's format,
played here by a small stand-in on PATH when BMv2 is not installed)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from controller.allreduce import jobs_on_switch
from controller.control import push_pipeline
from controller.errors import ControllerError
from controller.install import clear_slots
from controller.registers import P4RuntimeRegisters, ThriftRegisters
from controller.switch import Switch

POOL = 512

# Prints what BMv2's runtime_CLI prints for the register commands, keeping the cells in a
# JSON file; anything else gets BMv2's error line.
STAND_IN = r'''#!{python}
import json, sys
state_path = {state!r}
assert sys.argv[1:] == ["--thrift-port", "9099"], sys.argv
cells = json.load(open(state_path))
for line in sys.stdin:
    cmd, *args = line.split()
    if cmd == "register_read" and args[0] in cells:
        print("RuntimeCmd: " + args[0] + "= " + ", ".join(str(v) for v in cells[args[0]]))
    elif cmd == "register_write" and args[0] in cells:
        cells[args[0]][int(args[1])] = int(args[2])
        print("RuntimeCmd: ")
    elif cmd == "register_reset" and args[0] in cells:
        cells[args[0]] = [0] * len(cells[args[0]])
        print("RuntimeCmd: ")
    else:
        print("RuntimeCmd: Error: Invalid register name (" + args[0] + ")")
json.dump(cells, open(state_path, "w"))
'''


@pytest.fixture
def thrift_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "cells.json"
    state.write_text('{"MyIngress.slot_count": [0, 0, 0, 0]}')
    exe = tmp_path / "bin" / "simple_switch_CLI"
    exe.parent.mkdir()
    exe.write_text(STAND_IN.format(python=sys.executable, state=str(state)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    return state


def test_p4runtime_registers_write_read_and_reset_cells(switch, pipeline):
    push_pipeline(switch, pipeline)
    regs = P4RuntimeRegisters(switch)
    regs.write("MyIngress.slot_seq", {0: 7, 1023: 0xFFFFFFFF})
    values = regs.read("MyIngress.slot_seq")
    assert (values[0], values[1023], sum(values)) == (7, 0xFFFFFFFF, 7 + 0xFFFFFFFF)
    regs.reset("MyIngress.slot_seq", [0])
    assert regs.read("MyIngress.slot_seq")[1023] == 0xFFFFFFFF and regs.read("slot_seq")[0] == 0
    regs.reset("MyIngress.slot_seq")
    assert not any(regs.read("MyIngress.slot_seq"))


def test_clear_slots_goes_through_the_p4runtime_adapter_on_p4sim(switch, pipeline, topo):
    push_pipeline(switch, pipeline)
    (job,), _ = jobs_on_switch(topo, "s1", POOL)
    for name in ("MyIngress.slot_seen", "MyIngress.slot_need"):
        switch.registers.write(name, {job.register_indices[0]: 1, job.register_indices[-1]: 1})
    clear_slots(switch, job)
    assert not any(switch.registers.read("MyIngress.slot_seen"))
    assert not any(switch.registers.read("MyIngress.slot_need"))


def test_unknown_register_names_the_ones_the_program_has(switch, pipeline):
    push_pipeline(switch, pipeline)
    with pytest.raises(ControllerError, match="no register 'nope'.*MyIngress.slot_values"):
        switch.registers.read("nope")


def test_thrift_adapter_reads_writes_and_resets_with_bmv2_cli_commands(server, pipeline, thrift_cli):
    with Switch("s1", server.addr, target="bmv2", thrift_port=9099) as sw:
        push_pipeline(sw, pipeline)
        assert isinstance(sw.registers, ThriftRegisters)
        sw.registers.write("slot_count", {1: 5, 3: 9})
        assert sw.registers.read("MyIngress.slot_count") == [0, 5, 0, 9]
        sw.registers.reset("MyIngress.slot_count", [3])
        assert sw.registers.read("MyIngress.slot_count") == [0, 5, 0, 0]
        sw.registers.reset("MyIngress.slot_count")
        assert sw.registers.read("MyIngress.slot_count") == [0, 0, 0, 0]


def test_thrift_adapter_reports_the_cli_error(server, pipeline, thrift_cli):
    with Switch("s1", server.addr, target="bmv2", thrift_port=9099) as sw:
        push_pipeline(sw, pipeline)
        with pytest.raises(ControllerError, match="Invalid register name"):
            sw.registers.read("MyIngress.slot_seq")


def test_thrift_adapter_without_the_cli_says_what_to_install(server, pipeline, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")   # nor beside the interpreter
    with Switch("s1", server.addr, target="bmv2", thrift_port=9099) as sw:
        push_pipeline(sw, pipeline)
        with pytest.raises(ControllerError, match="simple_switch_CLI not found"):
            sw.registers.read("MyIngress.slot_count")


def test_unknown_target_is_refused_at_start_up():
    with pytest.raises(ControllerError, match="unknown target 'tofino'"):
        Switch("s1", "127.0.0.1:1", target="tofino")
    proc = subprocess.run([sys.executable, "-m", "controller", "counters", "--target", "tofino"],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
