"""Register access through the target's adapter: P4Runtime on p4sim, and BMv2's Thrift runtime
on BMv2 (played by p4sim serving it with --thrift-port, as simple_switch_grpc does), spoken in
this process whatever `simple_switch_CLI` is first on PATH: here, one that cannot even start,
as BMv2's own did under a Python without thrift."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from controller.allreduce import SLOT_REGISTERS, jobs_on_switch
from controller.control import push_pipeline
from controller.errors import ControllerError
from controller.install import clear_slots
from controller.registers import P4RuntimeRegisters, ThriftRegisters
from controller.switch import Switch
from topologies.spec import star

from .conftest import free_port

POOL = 512
REPO = Path(__file__).resolve().parents[2]
BROKEN_CLI = """#!/bin/sh
echo "ModuleNotFoundError: No module named 'thrift'" >&2
exit 1
"""


@pytest.fixture
def broken_cli_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A simple_switch_CLI first on PATH that fails as BMv2's did under a Python without thrift."""
    exe = tmp_path / "bin" / "simple_switch_CLI"
    exe.parent.mkdir()
    exe.write_text(BROKEN_CLI)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    assert subprocess.run(["simple_switch_CLI"], capture_output=True).returncode == 1
    return exe


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


def test_thrift_adapter_reads_writes_and_resets_whatever_cli_is_on_path(bmv2_like_server, pipeline,
                                                                        broken_cli_on_path):
    with Switch("s1", bmv2_like_server.addr, target="bmv2", thrift_port=bmv2_like_server.thrift_port) as sw:
        push_pipeline(sw, pipeline)
        assert isinstance(sw.registers, ThriftRegisters)
        sw.registers.write("slot_seq", {1: 5, 3: 9, 1023: 0xFFFFFFFF})      # 32-bit cells
        assert sw.registers.read("MyIngress.slot_seq")[:4] == [0, 5, 0, 9]
        sw.registers.reset("MyIngress.slot_seq", [3])
        cells = sw.registers.read("MyIngress.slot_seq")
        assert (cells[:4], cells[1023], sum(cells)) == ([0, 5, 0, 0], 0xFFFFFFFF, 5 + 0xFFFFFFFF)
        # The same cells over P4Runtime (p4sim serves both): Thrift wrote the switch's own state.
        assert P4RuntimeRegisters(sw).read("MyIngress.slot_seq") == cells
        sw.registers.reset("MyIngress.slot_seq")
        assert not any(sw.registers.read("MyIngress.slot_seq"))


def test_clear_slots_goes_through_the_thrift_adapter_on_bmv2(bmv2_like_server, pipeline, broken_cli_on_path):
    with Switch("s1", bmv2_like_server.addr, target="bmv2", thrift_port=bmv2_like_server.thrift_port) as sw:
        push_pipeline(sw, pipeline)
        (job,), _ = jobs_on_switch(star(4), "s1", POOL)
        first, last = job.register_indices[0], job.register_indices[-1]
        for name in SLOT_REGISTERS:
            sw.registers.write(name, {first: 1, last: 1})
        clear_slots(sw, job)
        assert not any(any(P4RuntimeRegisters(sw).read(name)) for name in SLOT_REGISTERS)


def test_thrift_adapter_reports_the_runtimes_refusal(bmv2_like_server, pipeline):
    with Switch("s1", bmv2_like_server.addr, target="bmv2", thrift_port=bmv2_like_server.thrift_port) as sw:
        push_pipeline(sw, pipeline)
        with pytest.raises(ControllerError, match=r"s1: BMv2's Thrift runtime on 127.0.0.1:\d+ refused the "
                                                  r"register operation: INVALID_INDEX"):
            sw.registers.write("MyIngress.slot_count", {POOL * 2 + 5: 1})


def test_thrift_adapter_without_a_runtime_says_where_it_looked(server, pipeline):
    port = free_port()
    with Switch("s1", server.addr, target="bmv2", thrift_port=port) as sw:
        push_pipeline(sw, pipeline)
        with pytest.raises(ControllerError, match=rf"s1: BMv2's Thrift runtime on 127.0.0.1:{port} is not reachable"):
            sw.registers.read("MyIngress.slot_count")


def test_registers_command_reads_over_thrift_on_the_topologys_bmv2(bmv2_like_server, pipeline, broken_cli_on_path,
                                                                    tmp_path):
    """`python -m controller registers` takes the target from the topology a fabric wrote, and on
    BMv2 reads through Thrift (P4Runtime register reads are UNIMPLEMENTED there)."""
    with Switch("s1", bmv2_like_server.addr, target="bmv2", thrift_port=bmv2_like_server.thrift_port) as sw:
        push_pipeline(sw, pipeline)
        sw.registers.write("MyIngress.slot_seq", {2: 77})
    wrong_port = free_port()

    def registers(thrift_port: int) -> subprocess.CompletedProcess:
        topo = star(2, grpc_port=bmv2_like_server.port, thrift_port=thrift_port)
        topo.target = "bmv2"
        topo.dump(tmp_path / "topology.json")
        return subprocess.run([sys.executable, "-m", "controller", "registers", "slot_seq", "--index", "1", "2",
                               "--topo", str(tmp_path / "topology.json")], cwd=REPO, capture_output=True,
                              text=True, timeout=120, env=os.environ | {"TARGET": "p4sim"})
    done = registers(bmv2_like_server.thrift_port)
    assert done.returncode == 0 and json.loads(done.stdout) == {"1": 0, "2": 77}, done.stderr
    # p4sim also serves P4Runtime register reads: a wrong Thrift port shows which way the command went.
    done = registers(wrong_port)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == (f"error: s1: BMv2's Thrift runtime on 127.0.0.1:{wrong_port} is not "
                                            f"reachable: Could not connect to any of [('127.0.0.1', {wrong_port})]")


def test_unknown_target_is_refused_at_start_up():
    with pytest.raises(ControllerError, match="unknown target 'tofino'"):
        Switch("s1", "127.0.0.1:1", target="tofino")
    proc = subprocess.run([sys.executable, "-m", "controller", "counters", "--target", "tofino"],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
