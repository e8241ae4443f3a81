"""Issue 5, item 5, on p4sim running allreduce.p4 (tests/p4sim/test_server.py covers the same
codes on a stand-in program): a lower election id is refused every write; malformed or
inconsistent writes get their P4Runtime code and change nothing (all state read back);
`python -m p4sim` listens on loopback unless told otherwise.
"""
from __future__ import annotations

import ipaddress
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from controller.fabric import setup_switch
from controller.switch import Pipeline
from controller.switch import Switch as ControllerSwitch
from tests.controller.conftest import free_port
from tests.p4sim.test_server import Client, update, write_errors
from tests.reliability.conftest import InProcessP4sim
from topologies.spec import star

REPO = Path(__file__).resolve().parents[2]
Update = p4runtime_pb2.Update
Pipe = p4runtime_pb2.SetForwardingPipelineConfigRequest


def ids(pipeline: Pipeline) -> dict[str, int]:
    return {o.preamble.name: o.preamble.id for kind in ("tables", "actions", "registers", "counters")
            for o in getattr(pipeline.p4info, kind)}


def push(client: Client, pipeline: Pipeline) -> None:
    req = Pipe(device_id=0, action=Pipe.VERIFY_AND_COMMIT)
    req.election_id.high, req.election_id.low = client.election_id
    req.config.p4info.CopyFrom(pipeline.p4info)
    req.config.p4_device_config = pipeline.device_config
    client.stub.SetForwardingPipelineConfig(req)


def everything(server: InProcessP4sim) -> dict:
    """The switch's whole runtime state: entries and default of every table, groups, registers, counters."""
    state = server.switch.state
    return {"tables": {name: (sorted((e.match, e.action, e.args, e.priority) for e in t.entries()),
                              (t.default_action, t.default_args)) for name, t in state.tables.items()},
            "groups": dict(state.multicast_groups),
            "registers": {name: list(r.values) for name, r in state.registers.items()},
            "counters": {name: (list(c.packets), list(c.bytes)) for name, c in state.counters.items()}}


@pytest.fixture
def configured(p4sim_server: InProcessP4sim, pipeline: Pipeline) -> Iterator[tuple[InProcessP4sim, Client]]:
    """allreduce.p4 set up by the controller for a 4-host star; a raw client as primary."""
    topo = star(4, grpc_port=p4sim_server.port)
    with ControllerSwitch("s1", p4sim_server.addr, election_id=(0, 1)) as sw:
        setup_switch(sw, topo, pipeline)
    client = Client(p4sim_server.port, (0, 20))
    try:
        yield p4sim_server, client
    finally:
        client.close()


def worker_entry(t: dict[str, int], *match: bytes, action: str = "MyIngress.admit_worker",
                 table: str = "MyIngress.inc_worker", params: tuple[bytes, ...] = ()) -> p4runtime_pb2.TableEntry:
    e = p4runtime_pb2.TableEntry(table_id=t[table])
    for field_id, value in enumerate(match, start=1):
        e.match.add(field_id=field_id).exact.value = value
    e.action.action.action_id = t[action]
    for param_id, value in enumerate(params, start=1):
        e.action.action.params.add(param_id=param_id, value=value)
    return e


def test_lower_election_id_is_refused_every_write_and_changes_nothing(configured, pipeline: Pipeline) -> None:
    server, primary = configured
    t = ids(pipeline)
    backup = Client(server.port, (0, 10))
    try:
        assert backup.arbitration.status.code == code_pb2.ALREADY_EXISTS
        before = everything(server)
        register_write = p4runtime_pb2.Entity()
        register_write.register_entry.register_id = t["MyIngress.slot_count"]
        register_write.register_entry.index.index = 3
        register_write.register_entry.data.bitstring = b"\x02"
        attempts = {
            "table insert": lambda: backup.write(update(Update.INSERT, table_entry=worker_entry(
                t, b"\x00\x01", b"\x07", b"\x05"))),
            "table delete": lambda: backup.write(update(Update.DELETE, table_entry=worker_entry(
                t, b"\x00\x01", b"\x00", b"\x01"))),
            "register write": lambda: backup.write(Update(type=Update.MODIFY, entity=register_write)),
            "pipeline push": lambda: push(backup, pipeline),
        }
        for what, attempt in attempts.items():
            with pytest.raises(grpc.RpcError) as info:
                attempt()
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, what
        assert everything(server) == before
    finally:
        backup.close()


BAD_WRITES = {
    # name: (update builder given the P4Info ids, the per-update canonical code)
    "unknown table id": (lambda t: update(Update.INSERT, table_entry=p4runtime_pb2.TableEntry(
        table_id=0x0200FFFF)), code_pb2.INVALID_ARGUMENT),
    "ingress_port value wider than 9 bits": (lambda t: update(Update.INSERT, table_entry=worker_entry(
        t, b"\x00\x01", b"\x07", b"\x02\x00")), code_pb2.OUT_OF_RANGE),
    "job_id value wider than 16 bits": (lambda t: update(Update.INSERT, table_entry=worker_entry(
        t, b"\x01\x00\x01", b"\x07", b"\x05")), code_pb2.OUT_OF_RANGE),
    "missing mandatory match field": (lambda t: update(Update.INSERT, table_entry=worker_entry(
        t, b"\x00\x01", b"\x07")), code_pb2.INVALID_ARGUMENT),
    "action of another table": (lambda t: update(Update.INSERT, table_entry=worker_entry(
        t, b"\x00\x01", b"\x07", b"\x05", action="MyIngress.l2_forward_to", params=(b"\x01",))),
        code_pb2.INVALID_ARGUMENT),
    "num_workers param wider than 8 bits": (lambda t: update(Update.INSERT, table_entry=worker_entry(
        t, b"\x00\x09", table="MyIngress.inc_job", action="MyIngress.set_job",
        params=(b"\x01\x00", b"\x00\x01", b"\x00", b"\x01"))), code_pb2.OUT_OF_RANGE),
    "duplicate insert with other params": (lambda t: update(Update.INSERT, table_entry=worker_entry(
        t, b"\x00\x01", table="MyIngress.inc_job", action="MyIngress.set_job",
        params=(b"\x01", b"\x00\x01", b"\x00", b"\x01"))), code_pb2.ALREADY_EXISTS),
    "delete of a missing entry": (lambda t: update(Update.DELETE, table_entry=worker_entry(
        t, b"\x00\x01", b"\x1f", b"\x05")), code_pb2.NOT_FOUND),
    "modify of a missing entry": (lambda t: update(Update.MODIFY, table_entry=worker_entry(
        t, b"\x00\x09", table="MyIngress.inc_job", action="MyIngress.drop_unknown_job")),
        code_pb2.NOT_FOUND),
}


@pytest.mark.parametrize("case", BAD_WRITES)
def test_bad_write_gets_its_code_and_changes_nothing(configured, pipeline: Pipeline, case: str) -> None:
    server, client = configured
    build, code = BAD_WRITES[case]
    before = everything(server)
    with pytest.raises(grpc.RpcError) as info:
        client.write(build(ids(pipeline)))
    assert info.value.code() == grpc.StatusCode.UNKNOWN        # a batch error, details per update
    assert [(i, c) for i, c, _ in write_errors(info.value)] == [(0, code)]
    assert everything(server) == before


def listening_addresses(port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Local addresses of the TCP sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for name, size in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                raw = b"".join(bytes.fromhex(addr[i:i + 8])[::-1] for i in range(0, 2 * size, 8))
                ip = ipaddress.ip_address(raw)
                found.add(ip.ipv4_mapped if getattr(ip, "ipv4_mapped", None) else ip)
    return found


def serving(args: list[str], port: int) -> set:
    """Start `python -m p4sim --no-p4 ARGS`, wait until it listens on `port`, stop it; its addresses."""
    proc = subprocess.Popen([sys.executable, "-m", "p4sim", "--no-p4", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            found = listening_addresses(port)
            if found or proc.poll() is not None:
                return found
            time.sleep(0.05)
        return set()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_p4sim_listens_on_loopback_unless_told_otherwise() -> None:
    if listening_addresses(9559):
        pytest.skip("port 9559 (p4sim's default) is in use by another switch")
    assert {str(a) for a in serving([], 9559)} == {"127.0.0.1"}
    free = free_port()      # told otherwise: another address (still loopback, as tests must stay)
    assert {str(a) for a in serving(["--grpc-server-addr", f"127.0.0.2:{free}"], free)} == {"127.0.0.2"}
