"""p4sim as a drop-in for simple_switch_grpc with its Thrift port: the controller's BMv2 mode
(pipeline and entries over P4Runtime, registers over BMv2's Thrift runtime) runs unchanged
against it, both runtimes share one state, and `python -m p4sim --thrift-port` serves it.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from controller.allreduce import SLOT_REGISTERS, jobs_on_switch
from controller.install import clear_slots
from controller.control import install_table_entries, push_pipeline, read_table_entries
from controller.entries import TableEntry
from controller.registers import ThriftRegisters
from controller.switch import Pipeline, Switch as ControllerSwitch
from p4sim import Program, Switch, compile_file
from p4sim.p4info import build_p4info
from p4sim.runtime.p4runtime import P4RuntimeService, serve
from p4sim.ir import BMV2_PRIORITY_TOP as PRIORITY_MAX
from p4sim.runtime.thrift import serve_thrift
from topologies.spec import star

from tests.controller.conftest import free_port
from tests.p4sim.test_thrift import ipv4_frame, run_cli

REPO = Path(__file__).resolve().parents[2]
POOL = 512


@pytest.fixture
def bmv2_like(p4program) -> Iterator:
    """An in-process p4sim started like simple_switch_grpc --no-p4 with a Thrift port, and a
    controller session to it in BMv2 mode. Yields (controller switch, p4sim switch, thrift port)."""
    switch = Switch(None)
    service = P4RuntimeService(switch, Program.from_device_config)
    grpc_server, grpc_port = serve(service, "127.0.0.1:0")
    thrift = serve_thrift(switch, 0)
    try:
        with ControllerSwitch("s1", f"127.0.0.1:{grpc_port}", target="bmv2", thrift_port=thrift.port,
                              election_id=(0, 1)) as sw:
            yield sw, switch, thrift.port
    finally:
        thrift.stop()
        grpc_server.stop(None)
        service.close()


def pipeline_of(program: Program, name: str) -> Pipeline:
    return Pipeline(name, build_p4info(program.info), program.device_config())


def test_controller_bmv2_mode_clears_slots_through_the_thrift_runtime(bmv2_like):
    sw, switch, _ = bmv2_like
    push_pipeline(sw, pipeline_of(compile_file(str(REPO / "p4src" / "allreduce.p4")), "allreduce"))
    assert isinstance(sw.registers, ThriftRegisters)
    (job,), _ = jobs_on_switch(star(4), "s1", POOL)
    first, last = job.register_indices[0], job.register_indices[-1]
    for name in SLOT_REGISTERS:
        sw.registers.write(name, {first: 3, last: 1})
    count = switch.state.registers["MyIngress.slot_count"].values
    assert (count[first], count[last]) == (3, 1)          # Thrift wrote p4sim's own cells
    assert sw.registers.read("slot_count")[first] == 3
    clear_slots(sw, job)
    for name in SLOT_REGISTERS:
        assert not any(switch.state.registers[name].values)
        assert not any(sw.registers.read(name))


def test_p4runtime_and_thrift_entries_are_one_table_with_one_priority_order(bmv2_like, p4program):
    sw, switch, thrift_port = bmv2_like
    push_pipeline(sw, pipeline_of(p4program("ternary_acl"), "ternary_acl"))
    any_proto = {"hdr.ipv4.dstAddr": ["10.0.0.0", "255.0.0.0"]}
    install_table_entries(sw, [TableEntry("MyIngress.acl", "MyIngress.permit", {"port": 1},
                                          match=any_proto, priority=10)])
    out = run_cli(thrift_port, "table_dump MyIngress.acl\n"
                               "table_add MyIngress.acl MyIngress.permit 0&&&0 10.0.0.5&&&255.255.255.255 "
                               "17&&&255 => 2 5\n")
    assert f"Priority: {PRIORITY_MAX - 10}" in out and "Action entry: MyIngress.permit - 0001" in out
    assert "Entry has been added with handle 1" in out
    # BMv2 priority 5 is far smaller (stronger) than the P4Runtime entry's, so it wins its packets.
    assert switch.process(0, ipv4_frame("10.0.0.5"))[0][0] == 2
    assert switch.process(0, ipv4_frame("10.0.0.6"))[0][0] == 1
    entries = read_table_entries(sw, "MyIngress.acl")
    assert sorted(e.priority for e in entries) == [10, PRIORITY_MAX - 5]
    run_cli(thrift_port, "table_delete MyIngress.acl 0\n")
    assert [e.priority for e in read_table_entries(sw, "MyIngress.acl")] == [PRIORITY_MAX - 5]
    assert switch.process(0, ipv4_frame("10.0.0.6")) == []    # the default action denies


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"p4sim exited with {proc.returncode}: {proc.stderr.read()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    pytest.fail(f"p4sim did not listen on {port} within {timeout:g} s")


def test_python_m_p4sim_with_thrift_port_serves_simple_switch_cli():
    thrift_port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "p4sim", str(REPO / "tests" / "p4programs" / "ipv4_router.p4"),
                             "--grpc-server-addr", f"127.0.0.1:{free_port()}", "--thrift-port", str(thrift_port)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_port(thrift_port, proc)
        out = run_cli(thrift_port, "table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.0.0/8 => "
                                   "00:00:00:00:00:09 9\ntable_dump MyIngress.ipv4_lpm\nswitch_info\n")
        assert "Entry has been added with handle 0" in out and "0a000000/8" in out
        assert f"{thrift_port}" in out
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


def test_a_thrift_port_in_use_is_one_line_error_not_a_traceback():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "p4sim", "--no-p4", "--grpc-server-addr",
                               f"127.0.0.1:{free_port()}", "--thrift-port", str(port)],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"p4sim: cannot listen on 127.0.0.1:{port} for Thrift" in proc.stderr
