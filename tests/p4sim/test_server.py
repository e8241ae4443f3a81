"""The P4Runtime server on 127.0.0.1, driven with raw p4runtime stubs and p4runtime-shell.

A small stand-in switch (the state API plus a packet_in/packet_out echo) keeps these
tests about the server: validation, status codes, arbitration and packet I/O.
"""
from __future__ import annotations

import json
import queue
import threading
import time

import grpc
import pytest
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.p4runtime import P4RuntimeWriteException

from p4sim import ir
from p4sim.runtime import entities as p4sim_entities
from p4sim.errors import P4Error
from p4sim.p4info import build_p4info, to_text
from p4sim.runtime.p4runtime import P4RuntimeService, serve
from p4sim.state import SwitchState

CPU_PORT = 64
Update = p4runtime_pb2.Update
Pipe = p4runtime_pb2.SetForwardingPipelineConfigRequest


def program_info() -> ir.ProgramInfo:
    info = ir.ProgramInfo("test.p4")
    info.actions = {n: ir.ActionInfo(n, p) for n, p in [
        ("NoAction", ()), ("c.drop", ()), ("c.set_port", (ir.Param("port", 9),)),
        ("c.set_mac", (ir.Param("mac", 48), ir.Param("port", 9)))]}
    info.tables = {t.name: t for t in [
        ir.TableInfo("c.fwd", (ir.MatchField("hdr.eth.dst", 48, "exact"),),
                     (ir.ActionRef("c.set_port"), ir.ActionRef("c.drop"),
                      ir.ActionRef("NoAction", "DEFAULT_ONLY")),
                     size=4, direct_counter="c.fwd_hits"),
        ir.TableInfo("c.route", (ir.MatchField("hdr.ip.dst", 32, "lpm"),),
                     (ir.ActionRef("c.set_mac"), ir.ActionRef("c.drop", "TABLE_ONLY"),
                      ir.ActionRef("NoAction")), support_timeout=True),
        ir.TableInfo("c.acl", (ir.MatchField("hdr.ip.src", 32, "ternary"),
                               ir.MatchField("hdr.udp.sport", 16, "range"),
                               ir.MatchField("meta.vlan", 12, "optional")),
                     (ir.ActionRef("c.drop"), ir.ActionRef("NoAction")), direct_meter="c.acl_meter"),
        ir.TableInfo("c.fixed", (ir.MatchField("hdr.ip.proto", 8, "exact"),),
                     (ir.ActionRef("c.drop"), ir.ActionRef("NoAction")),
                     const_default_action=True, entries_are_const=True,
                     const_entries=(ir.ConstEntry((("exact", 17),), "c.drop", ()),)),
    ]}
    info.counters = {"c.fwd_hits": ir.CounterInfo("c.fwd_hits", "BOTH", direct_table="c.fwd"),
                     "c.bad": ir.CounterInfo("c.bad", "BOTH", size=4)}
    info.meters = {"c.acl_meter": ir.MeterInfo("c.acl_meter", "BYTES", direct_table="c.acl"),
                   "c.rate": ir.MeterInfo("c.rate", "PACKETS", size=2)}
    info.registers = {"c.sums": ir.RegisterInfo("c.sums", 32, 8)}
    pad = ir.Param("_pad", 7)
    info.controller_headers = {
        "packet_in": ir.ControllerHeader("packet_in", "packet_in_t", (ir.Param("ingress_port", 9), pad)),
        "packet_out": ir.ControllerHeader("packet_out", "packet_out_t", (ir.Param("egress_port", 9), pad))}
    info.digests = {"learn_t": ir.DigestInfo("learn_t", (ir.Param("mac", 48), ir.Param("port", 9)))}
    return info


class FakeProgram:
    def __init__(self, info: ir.ProgramInfo) -> None:
        self.info = info

    def device_config(self) -> bytes:
        return json.dumps({"format": "fake", "source_file": self.info.source_file}).encode()


def load_fake_program(data: bytes) -> FakeProgram:
    if data == b"bad":
        raise P4Error("syntax error", "bad.p4", 3, 7)
    return FakeProgram(program_info())


class FakeSwitch:
    """The Switch contract with a fixed behaviour: a PacketOut leaves on its egress_port,
    anything else goes to the CPU with its ingress port in packet_in."""

    def __init__(self) -> None:
        self.state: SwitchState | None = None
        self.lock = threading.RLock()
        self.processed: list[tuple[int, bytes]] = []

    def load(self, program: FakeProgram) -> None:
        self.state = SwitchState(program.info)

    def process(self, port: int, data: bytes) -> list[tuple[int, bytes]]:
        self.processed.append((port, data))
        if port == CPU_PORT:
            return [(int.from_bytes(data[:2], "big") >> 7, data[2:])]
        return [(CPU_PORT, (port << 7).to_bytes(2, "big") + data)]


class Client:
    """A raw-stub P4Runtime client with its stream and arbitration done."""

    def __init__(self, port: int, election_id: tuple[int, int] = (0, 1)) -> None:
        self.election_id = election_id
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self._requests: queue.Queue = queue.Queue()
        self._responses: queue.Queue = queue.Queue()
        self._stream = self.stub.StreamChannel(iter(self._requests.get, None))
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = 0
        req.arbitration.election_id.high, req.arbitration.election_id.low = election_id
        self.send(req)
        self.arbitration = self.next("arbitration").arbitration

    def _receive(self) -> None:
        try:
            for msg in self._stream:
                self._responses.put(msg)
        except grpc.RpcError as err:
            self._responses.put(err)

    def send(self, req: p4runtime_pb2.StreamMessageRequest) -> None:
        self._requests.put(req)

    def next(self, kind: str) -> p4runtime_pb2.StreamMessageResponse:
        while True:
            msg = self._responses.get(timeout=10)
            if isinstance(msg, grpc.RpcError):
                raise msg
            if msg.HasField(kind):
                return msg

    def push(self, data: bytes = b"prog", action=Pipe.VERIFY_AND_COMMIT, cookie: int = 0) -> None:
        req = Pipe(device_id=0, action=action)
        req.election_id.high, req.election_id.low = self.election_id
        req.config.p4info.CopyFrom(P4INFO)
        req.config.p4_device_config = data
        req.config.cookie.cookie = cookie
        self.stub.SetForwardingPipelineConfig(req)

    def write(self, *updates: Update) -> None:
        req = p4runtime_pb2.WriteRequest(device_id=0, updates=updates)
        req.election_id.high, req.election_id.low = self.election_id
        self.stub.Write(req)

    def read(self, *entities: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        req = p4runtime_pb2.ReadRequest(device_id=0, entities=entities)
        return [e for resp in self.stub.Read(req) for e in resp.entities]

    def close(self) -> None:
        self._requests.put(None)
        self.channel.close()
        self._thread.join()


P4INFO = build_p4info(program_info())
IDS = {o.preamble.name: o.preamble.id for kind in ("tables", "actions", "counters", "direct_counters",
                                                  "meters", "direct_meters", "registers", "digests")
       for o in getattr(P4INFO, kind)}


@pytest.fixture
def running():
    """A server on a free loopback port with an empty (--no-p4) switch."""
    switch = FakeSwitch()
    sent: queue.Queue = queue.Queue()    # (port, data) the switch transmitted
    service = P4RuntimeService(switch, load_fake_program, device_id=0, cpu_port=CPU_PORT,
                               transmit=lambda port, data: sent.put((port, data)))
    server, port = serve(service, "127.0.0.1:0")
    clients: list[Client] = []

    def connect(election_id=(0, 1)) -> Client:
        clients.append(Client(port, election_id))
        return clients[-1]

    try:
        yield service, switch, sent, connect, port
    finally:
        for c in clients:
            c.close()
        server.stop(None)
        service.close()


@pytest.fixture
def client(running):
    connect = running[3]
    c = connect()
    c.push()
    return c


# --- builders ------------------------------------------------------------------

def table_entry(table: str, *match, action: str | None = None, params=(), priority: int = 0,
                **extra) -> p4runtime_pb2.TableEntry:
    """match items: ("exact", v) / ("lpm", v, plen) / ("ternary", v, m) / ("range", lo, hi) /
    ("optional", v) as bytes, with the field id given by position (1-based) as first element."""
    e = p4runtime_pb2.TableEntry(table_id=IDS[table], priority=priority, **extra)
    for field_id, kind, *values in match:
        fm = e.match.add(field_id=field_id)
        if kind in ("exact", "optional"):
            getattr(fm, kind).value = values[0]
        elif kind == "lpm":
            fm.lpm.value, fm.lpm.prefix_len = values
        elif kind == "ternary":
            fm.ternary.value, fm.ternary.mask = values
        else:
            fm.range.low, fm.range.high = values
    if action is not None:
        e.action.action.action_id = IDS[action]
        for pid, v in enumerate(params, start=1):
            e.action.action.params.add(param_id=pid, value=v)
    return e


def update(kind: int, **entity) -> Update:
    return Update(type=kind, entity=p4runtime_pb2.Entity(**entity))


def write_errors(err: grpc.RpcError) -> list[tuple[int, int, str]]:
    """(update index, canonical code, message) of each failed update, parsed by p4runtime-shell
    (which lists only the failures; the server names the update index in the message)."""
    out = []
    for _, e in P4RuntimeWriteException(err).errors:
        index, _, message = e.message.partition(": ")
        out.append((int(index.removeprefix("update ")), e.canonical_code, message))
    return out


def rejected(client: Client, *updates: Update) -> list[tuple[int, int, str]]:
    with pytest.raises(grpc.RpcError) as info:
        client.write(*updates)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    return write_errors(info.value)


def entries(client: Client, table: str = "") -> list[p4runtime_pb2.TableEntry]:
    query = p4runtime_pb2.TableEntry(table_id=IDS[table] if table else 0)
    return [e.table_entry for e in client.read(p4runtime_pb2.Entity(table_entry=query))]


MAC = bytes.fromhex("000000000a01")


# --- pipeline --------------------------------------------------------------------

def test_capabilities_reports_api_version(running):
    connect = running[3]
    resp = connect().stub.Capabilities(p4runtime_pb2.CapabilitiesRequest())
    assert resp.p4runtime_api_version == "1.4.1"


def test_write_before_pipeline_is_failed_precondition(running):
    c = running[3]()
    with pytest.raises(grpc.RpcError) as info:
        c.write(update(Update.INSERT, table_entry=table_entry("c.fwd", (1, "exact", MAC), action="c.drop")))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_bad_device_config_is_invalid_argument_with_p4error_location(running):
    c = running[3]()
    with pytest.raises(grpc.RpcError) as info:
        c.push(b"bad")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "bad.p4:3:7: error: syntax error"
    assert running[0].pipeline is None


def unknown_table(p4info) -> None:
    p4info.tables[0].preamble.name = "c.nope"


def extra_action_in_table(p4info) -> None:
    p4info.tables[0].action_refs.add(id=IDS["c.set_mac"])


def narrower_match_field(p4info) -> None:
    p4info.tables[0].match_fields[0].bitwidth = 47


@pytest.mark.parametrize("mismatch", [unknown_table, extra_action_in_table, narrower_match_field])
def test_p4info_that_does_not_match_the_program_is_refused(running, mismatch):
    c = running[3]()
    req = Pipe(device_id=0, action=Pipe.VERIFY_AND_COMMIT)
    req.election_id.low = 1
    req.config.p4info.CopyFrom(P4INFO)
    mismatch(req.config.p4info)
    req.config.p4_device_config = b"prog"
    with pytest.raises(grpc.RpcError) as info:
        c.stub.SetForwardingPipelineConfig(req)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert running[0].pipeline is None


def test_verify_changes_nothing_and_save_then_commit_installs(running):
    service, _, _, connect, _ = running
    c = connect()
    c.push(action=Pipe.VERIFY)
    assert service.pipeline is None
    c.push(action=Pipe.VERIFY_AND_SAVE, cookie=7)
    assert service.pipeline is None
    c.push(action=Pipe.COMMIT)
    assert service.pipeline.cookie == 7


def test_get_config_response_types(client):
    Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
    client.push(cookie=42)
    full = client.stub.GetForwardingPipelineConfig(Get(device_id=0, response_type=Get.ALL)).config
    assert full.p4info == P4INFO and full.p4_device_config == b"prog" and full.cookie.cookie == 42
    only = client.stub.GetForwardingPipelineConfig(Get(device_id=0, response_type=Get.COOKIE_ONLY)).config
    assert not only.HasField("p4info") and only.p4_device_config == b"" and only.cookie.cookie == 42
    dev = client.stub.GetForwardingPipelineConfig(
        Get(device_id=0, response_type=Get.DEVICE_CONFIG_AND_COOKIE)).config
    assert not dev.HasField("p4info") and dev.p4_device_config == b"prog"


def test_wrong_device_id_is_not_found(client):
    req = p4runtime_pb2.ReadRequest(device_id=9)
    with pytest.raises(grpc.RpcError) as info:
        list(client.stub.Read(req))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_write_for_another_device_or_a_role_is_refused(client):
    req = p4runtime_pb2.WriteRequest(device_id=9)
    req.election_id.low = 1
    with pytest.raises(grpc.RpcError) as info:
        client.stub.Write(req)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    req.device_id, req.role = 0, "other"
    with pytest.raises(grpc.RpcError) as info:
        client.stub.Write(req)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_reconcile_keeps_table_entries_and_groups(client):
    client.write(update(Update.INSERT, table_entry=table_entry("c.fwd", (1, "exact", MAC),
                                                               action="c.set_port", params=[b"\x03"])),
                 update(Update.INSERT, packet_replication_engine_entry={
                     "multicast_group_entry": {"multicast_group_id": 5, "replicas": [{"egress_port": 1}]}}))
    client.push(action=Pipe.RECONCILE_AND_COMMIT)
    assert [e.match[0].exact.value for e in entries(client, "c.fwd")] == [b"\x0a\x01"]
    client.push()          # VERIFY_AND_COMMIT starts from fresh state
    assert entries(client, "c.fwd") == []


# --- tables ----------------------------------------------------------------------

def test_exact_insert_read_modify_delete(client):
    e = table_entry("c.fwd", (1, "exact", MAC), action="c.set_port", params=[b"\x00\x03"])
    client.write(update(Update.INSERT, table_entry=e))
    (got,) = entries(client, "c.fwd")
    # Read answers in canonical form: no leading zero bytes.
    assert got.match[0].exact.value == b"\x0a\x01"
    assert got.action.action.action_id == IDS["c.set_port"]
    assert got.action.action.params[0].value == b"\x03"
    e.action.action.params[0].value = b"\x01\x00"
    client.write(update(Update.MODIFY, table_entry=e))
    assert entries(client, "c.fwd")[0].action.action.params[0].value == b"\x01\x00"
    client.write(update(Update.DELETE, table_entry=table_entry("c.fwd", (1, "exact", MAC))))
    assert entries(client, "c.fwd") == []


def test_short_and_zero_padded_byte_strings_name_the_same_entry(client):
    # P4Runtime 1.4: canonical (no leading zeros) and padded forms are both accepted.
    client.write(update(Update.INSERT, table_entry=table_entry("c.fwd", (1, "exact", b"\x0a\x01"),
                                                               action="c.drop")))
    padded_beyond_width = b"\x00" * 4 + MAC
    errors = rejected(client, update(Update.INSERT, table_entry=table_entry(
        "c.fwd", (1, "exact", padded_beyond_width), action="c.drop")))
    assert errors[0][1] == code_pb2.ALREADY_EXISTS
    client.write(update(Update.DELETE, table_entry=table_entry("c.fwd", (1, "exact", MAC))))
    assert entries(client, "c.fwd") == []


def test_wildcard_read_returns_entries_of_every_table(client):
    client.write(update(Update.INSERT, table_entry=table_entry("c.fwd", (1, "exact", MAC), action="c.drop")),
                 update(Update.INSERT, table_entry=table_entry("c.route", (1, "lpm", b"\x0a\x00\x00\x00", 8),
                                                               action="c.drop")))
    got = {e.table_id for e in entries(client)}
    assert got == {IDS["c.fwd"], IDS["c.route"], IDS["c.fixed"]}   # c.fixed: its const entry


def test_lpm_ternary_range_optional_round_trip(client):
    route = table_entry("c.route", (1, "lpm", b"\x0a\x01\x00\x00", 16), action="c.set_mac",
                        params=[MAC, b"\x02"])
    acl = table_entry("c.acl", (1, "ternary", b"\x0a\x00\x00\x00", b"\xff\x00\x00\x00"),
                      (2, "range", b"\x00\x10", b"\x00\x20"), (3, "optional", b"\x05"),
                      action="c.drop", priority=10)
    acl_low = table_entry("c.acl", (2, "range", b"\x00\x01", b"\x00\x02"), action="NoAction", priority=1)
    client.write(update(Update.INSERT, table_entry=route), update(Update.INSERT, table_entry=acl),
                 update(Update.INSERT, table_entry=acl_low))
    (r,) = entries(client, "c.route")
    assert (r.match[0].lpm.value, r.match[0].lpm.prefix_len) == (b"\x0a\x01\x00\x00", 16)
    by_priority = {e.priority: e for e in entries(client, "c.acl")}
    high = by_priority[10]
    assert [m.field_id for m in high.match] == [1, 2, 3]
    assert (high.match[0].ternary.value, high.match[0].ternary.mask) == (b"\x0a\x00\x00\x00", b"\xff\x00\x00\x00")
    assert (high.match[1].range.low, high.match[1].range.high) == (b"\x10", b"\x20")
    assert high.match[2].optional.value == b"\x05"
    assert [m.field_id for m in by_priority[1].match] == [2]
    # the same key at another priority is another entry; deleting needs the priority
    client.write(update(Update.DELETE, table_entry=table_entry(
        "c.acl", (2, "range", b"\x00\x01", b"\x00\x02"), priority=1)))
    assert [e.priority for e in entries(client, "c.acl")] == [10]


def test_read_of_one_entry_by_match(client):
    for last in (1, 2):
        client.write(update(Update.INSERT, table_entry=table_entry(
            "c.fwd", (1, "exact", bytes([0, 0, 0, 0, 0, last])), action="c.drop")))
    (got,) = client.read(p4runtime_pb2.Entity(table_entry=table_entry("c.fwd", (1, "exact", b"\x02"))))
    assert got.table_entry.match[0].exact.value == b"\x02"


def test_default_entry_modify_read_and_reset(client):
    default = table_entry("c.fwd", action="c.set_port", params=[b"\x07"], is_default_action=True)
    client.write(update(Update.MODIFY, table_entry=default))
    query = p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=IDS["c.fwd"],
                                                                      is_default_action=True))
    (got,) = client.read(query)
    assert got.table_entry.is_default_action
    assert got.table_entry.action.action.action_id == IDS["c.set_port"]
    assert got.table_entry.action.action.params[0].value == b"\x07"
    client.write(update(Update.MODIFY, table_entry=table_entry("c.fwd", is_default_action=True)))
    (got,) = client.read(query)
    assert got.table_entry.action.action.action_id == IDS["NoAction"]


def test_direct_counter_written_and_read_with_entry(client):
    e = table_entry("c.fwd", (1, "exact", MAC), action="c.drop")
    client.write(update(Update.INSERT, table_entry=e))
    client.write(update(Update.MODIFY, direct_counter_entry={
        "table_entry": e, "data": {"packet_count": 5, "byte_count": 500}}))
    query = table_entry("c.fwd", counter_data={})
    query.counter_data.SetInParent()
    (got,) = client.read(p4runtime_pb2.Entity(table_entry=query))
    assert (got.table_entry.counter_data.packet_count, got.table_entry.counter_data.byte_count) == (5, 500)
    (dc,) = client.read(p4runtime_pb2.Entity(direct_counter_entry={"table_entry": e}))
    assert dc.direct_counter_entry.data.packet_count == 5


def test_direct_meter_config_round_trip(client):
    e = table_entry("c.acl", (3, "optional", b"\x01"), action="c.drop", priority=1)
    client.write(update(Update.INSERT, table_entry=e))
    config = {"cir": 100, "cburst": 10, "pir": 200, "pburst": 20}
    client.write(update(Update.MODIFY, direct_meter_entry={"table_entry": e, "config": config}))
    (got,) = client.read(p4runtime_pb2.Entity(direct_meter_entry={"table_entry": e}))
    c = got.direct_meter_entry.config
    assert (c.cir, c.cburst, c.pir, c.pburst) == (100, 10, 200, 20)


# --- externs and PRE -------------------------------------------------------------

def test_register_write_one_index_and_read_all(client):
    client.write(update(Update.MODIFY, register_entry={
        "register_id": IDS["c.sums"], "index": {"index": 3}, "data": {"bitstring": b"\x01\x02"}}))
    got = client.read(p4runtime_pb2.Entity(register_entry={"register_id": IDS["c.sums"]}))
    values = [int.from_bytes(e.register_entry.data.bitstring, "big") for e in got]
    assert values == [0, 0, 0, 0x102, 0, 0, 0, 0]
    assert [e.register_entry.index.index for e in got] == list(range(8))


def test_large_read_comes_in_several_responses(client, monkeypatch):
    monkeypatch.setattr(p4sim_entities, "READ_CHUNK", 3)
    req = p4runtime_pb2.ReadRequest(device_id=0, entities=[
        p4runtime_pb2.Entity(register_entry={"register_id": IDS["c.sums"]})])
    responses = list(client.stub.Read(req))
    assert [len(r.entities) for r in responses] == [3, 3, 2]
    assert [e.register_entry.index.index for r in responses for e in r.entities] == list(range(8))


def test_register_value_wider_than_register_is_out_of_range(client):
    errors = rejected(client, update(Update.MODIFY, register_entry={
        "register_id": IDS["c.sums"], "index": {"index": 0}, "data": {"bitstring": b"\x01\x00\x00\x00\x00"}}))
    assert errors[0][1] == code_pb2.OUT_OF_RANGE


def test_counter_write_sets_and_read_reports(client):
    client.write(update(Update.MODIFY, counter_entry={
        "counter_id": IDS["c.bad"], "index": {"index": 1}, "data": {"packet_count": 3, "byte_count": 99}}))
    (got,) = client.read(p4runtime_pb2.Entity(counter_entry={"counter_id": IDS["c.bad"], "index": {"index": 1}}))
    assert (got.counter_entry.data.packet_count, got.counter_entry.data.byte_count) == (3, 99)
    assert len(client.read(p4runtime_pb2.Entity(counter_entry={"counter_id": IDS["c.bad"]}))) == 4


def test_meter_config_round_trip(client):
    client.write(update(Update.MODIFY, meter_entry={
        "meter_id": IDS["c.rate"], "index": {"index": 1},
        "config": {"cir": 1, "cburst": 2, "pir": 3, "pburst": 4}}))
    got = client.read(p4runtime_pb2.Entity(meter_entry={"meter_id": IDS["c.rate"]}))
    assert not got[0].meter_entry.HasField("config")
    assert got[1].meter_entry.config.pir == 3


def test_multicast_group_lifecycle(client):
    group = {"multicast_group_id": 1, "replicas": [{"egress_port": 1, "instance": 0},
                                                    {"egress_port": 2, "instance": 1}]}
    pre = {"multicast_group_entry": group}
    client.write(update(Update.INSERT, packet_replication_engine_entry=pre))
    (got,) = client.read(p4runtime_pb2.Entity(packet_replication_engine_entry={"multicast_group_entry": {}}))
    replicas = got.packet_replication_engine_entry.multicast_group_entry.replicas
    assert [(r.egress_port, r.instance) for r in replicas] == [(1, 0), (2, 1)]
    assert rejected(client, update(Update.INSERT, packet_replication_engine_entry=pre))[0][1] == \
        code_pb2.ALREADY_EXISTS
    client.write(update(Update.DELETE, packet_replication_engine_entry=pre))
    assert rejected(client, update(Update.MODIFY, packet_replication_engine_entry=pre))[0][1] == \
        code_pb2.NOT_FOUND


def test_clone_session_insert_and_read(client):
    session = {"session_id": 100, "replicas": [{"egress_port": CPU_PORT}], "packet_length_bytes": 128}
    client.write(update(Update.INSERT, packet_replication_engine_entry={"clone_session_entry": session}))
    assert client.read(p4runtime_pb2.Entity(packet_replication_engine_entry={"clone_session_entry": {}}))[0] \
        .packet_replication_engine_entry.clone_session_entry.packet_length_bytes == 128


# --- errors: code per case, and nothing changes -------------------------------------

@pytest.mark.parametrize("case, entry, code", [
    ("unknown table id", lambda: p4runtime_pb2.TableEntry(table_id=0x02000001), code_pb2.INVALID_ARGUMENT),
    ("value wider than field", lambda: table_entry("c.fwd", (1, "exact", b"\x01" + MAC), action="c.drop"),
     code_pb2.OUT_OF_RANGE),
    ("missing exact field", lambda: table_entry("c.fwd", action="c.drop"), code_pb2.INVALID_ARGUMENT),
    ("ternary value outside mask", lambda: table_entry(
        "c.acl", (1, "ternary", b"\x0a\x00\x00\x01", b"\xff\x00\x00\x00"), action="c.drop", priority=1),
     code_pb2.INVALID_ARGUMENT),
    ("lpm prefix too long", lambda: table_entry("c.route", (1, "lpm", b"\x0a\x00\x00\x00", 33),
                                                action="c.drop"), code_pb2.INVALID_ARGUMENT),
    ("lpm bits beyond prefix", lambda: table_entry("c.route", (1, "lpm", b"\x0a\x00\x00\x01", 8),
                                                   action="c.drop"), code_pb2.INVALID_ARGUMENT),
    ("missing priority", lambda: table_entry("c.acl", (3, "optional", b"\x01"), action="c.drop"),
     code_pb2.INVALID_ARGUMENT),
    ("action not in table", lambda: table_entry("c.fwd", (1, "exact", MAC), action="c.set_mac",
                                                params=[MAC, b"\x01"]), code_pb2.INVALID_ARGUMENT),
    ("default-only action in an entry", lambda: table_entry("c.fwd", (1, "exact", MAC), action="NoAction"),
     code_pb2.INVALID_ARGUMENT),
    ("missing action param", lambda: table_entry("c.fwd", (1, "exact", MAC), action="c.set_port"),
     code_pb2.INVALID_ARGUMENT),
    ("const table", lambda: table_entry("c.fixed", (1, "exact", b"\x06"), action="c.drop"),
     code_pb2.PERMISSION_DENIED),
    ("unknown match field id", lambda: table_entry("c.fwd", (9, "exact", MAC), action="c.drop"),
     code_pb2.INVALID_ARGUMENT),
])
def test_invalid_insert_is_rejected_with_code_and_changes_nothing(client, case, entry, code):
    before = entries(client)
    errors = rejected(client, update(Update.INSERT, table_entry=entry()))
    assert [(i, c) for i, c, _ in errors] == [(0, code)], case
    assert entries(client) == before


def test_duplicate_insert_is_already_exists_and_delete_of_missing_is_not_found(client):
    e = table_entry("c.fwd", (1, "exact", MAC), action="c.drop")
    client.write(update(Update.INSERT, table_entry=e))
    assert rejected(client, update(Update.INSERT, table_entry=e))[0][1] == code_pb2.ALREADY_EXISTS
    other = table_entry("c.fwd", (1, "exact", b"\x09"), action="c.drop")
    assert rejected(client, update(Update.DELETE, table_entry=other))[0][1] == code_pb2.NOT_FOUND
    assert rejected(client, update(Update.MODIFY, table_entry=other))[0][1] == code_pb2.NOT_FOUND


def test_batch_continues_on_error_and_reports_each_update(client):
    good = table_entry("c.fwd", (1, "exact", MAC), action="c.drop")
    bad = table_entry("c.fwd", (1, "exact", b"\x01"), action="c.set_port")   # param missing
    good2 = table_entry("c.fwd", (1, "exact", b"\x02"), action="c.drop")
    with pytest.raises(grpc.RpcError) as info:
        client.write(update(Update.INSERT, table_entry=good), update(Update.INSERT, table_entry=bad),
                     update(Update.INSERT, table_entry=good2))
    assert [(i, c) for i, c, _ in write_errors(info.value)] == [(1, code_pb2.INVALID_ARGUMENT)]
    assert len(entries(client, "c.fwd")) == 2


def test_modify_of_const_default_action_is_refused(client):
    errors = rejected(client, update(Update.MODIFY, table_entry=table_entry(
        "c.fixed", action="c.drop", is_default_action=True)))
    assert errors[0][1] == code_pb2.PERMISSION_DENIED


def test_full_table_is_resource_exhausted(client):
    for last in range(4):
        client.write(update(Update.INSERT, table_entry=table_entry(
            "c.fwd", (1, "exact", bytes([last + 1])), action="c.drop")))
    errors = rejected(client, update(Update.INSERT, table_entry=table_entry(
        "c.fwd", (1, "exact", b"\x09"), action="c.drop")))
    assert errors[0][1] == code_pb2.RESOURCE_EXHAUSTED


def test_modify_with_bad_meter_config_changes_nothing(client):
    e = table_entry("c.acl", (3, "optional", b"\x01"), action="c.drop", priority=1)
    client.write(update(Update.INSERT, table_entry=e))
    changed = table_entry("c.acl", (3, "optional", b"\x01"), action="NoAction", priority=1,
                          meter_config={"cir": 10, "pir": 5})
    assert rejected(client, update(Update.MODIFY, table_entry=changed))[0][1] == code_pb2.INVALID_ARGUMENT
    (got,) = entries(client, "c.acl")
    assert got.action.action.action_id == IDS["c.drop"]


# --- arbitration -----------------------------------------------------------------

def test_backup_client_is_told_and_cannot_write(running):
    connect = running[3]
    primary = connect((0, 5))
    primary.push()
    backup = connect((0, 2))
    assert primary.arbitration.status.code == code_pb2.OK
    assert backup.arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert (backup.arbitration.election_id.high, backup.arbitration.election_id.low) == (0, 5)
    with pytest.raises(grpc.RpcError) as info:
        backup.write(update(Update.INSERT, table_entry=table_entry("c.fwd", (1, "exact", MAC), action="c.drop")))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert entries(backup, "c.fwd") == []      # reads are allowed to backups


def test_higher_election_id_takes_over_and_old_primary_becomes_backup(running):
    connect = running[3]
    first = connect((0, 1))
    second = connect((0, 9))
    assert second.arbitration.status.code == code_pb2.OK
    demoted = first.next("arbitration").arbitration
    assert demoted.status.code == code_pb2.ALREADY_EXISTS
    second.push()
    with pytest.raises(grpc.RpcError) as info:
        first.push()
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_primary_leaving_promotes_the_backup(running):
    connect = running[3]
    first = connect((0, 9))
    second = connect((0, 1))
    first.close()
    assert second.next("arbitration").arbitration.status.code == code_pb2.OK


# --- packet I/O, digests, idle timeout --------------------------------------------

def test_packet_out_gets_controller_header_and_leaves_on_its_port(running):
    service, switch, sent, connect, _ = running
    c = connect()
    c.push()
    req = p4runtime_pb2.StreamMessageRequest()
    req.packet.payload = b"hello"
    req.packet.metadata.add(metadata_id=1, value=b"\x03")
    c.send(req)
    assert sent.get(timeout=10) == (3, b"hello")
    assert switch.processed == [(CPU_PORT, (3 << 7).to_bytes(2, "big") + b"hello")]


def test_packet_to_cpu_port_becomes_packet_in_with_metadata(running):
    service, switch, _, connect, _ = running
    c = connect()
    c.push()
    service.handle_outputs(switch.process(7, b"payload"))
    msg = c.next("packet").packet
    assert msg.payload == b"payload"
    assert [(m.metadata_id, m.value) for m in msg.metadata] == [(1, b"\x07"), (2, b"\x00")]


def test_packet_out_with_unknown_metadata_gets_stream_error(running):
    c = running[3]()
    c.push()
    req = p4runtime_pb2.StreamMessageRequest()
    req.packet.payload = b"x"
    req.packet.metadata.add(metadata_id=9, value=b"\x01")
    c.send(req)
    err = c.next("error").error
    assert err.canonical_code == code_pb2.INVALID_ARGUMENT
    assert err.packet_out.packet_out.payload == b"x"


def test_digest_is_sent_once_enabled(running):
    service, _, _, connect, _ = running
    c = connect()
    c.push()
    service.digest("learn_t", (0xA01, 3))     # not enabled yet: dropped
    c.write(update(Update.INSERT, digest_entry={"digest_id": IDS["learn_t"], "config": {"max_list_size": 1}}))
    service.digest("learn_t", (0xA02, 4))
    d = c.next("digest").digest
    assert d.digest_id == IDS["learn_t"]
    assert [[m.bitstring for m in data.struct.members] for data in d.data] == [[b"\x0a\x02", b"\x04"]]


def test_expired_entry_of_timeout_table_is_notified(client):
    e = table_entry("c.route", (1, "lpm", b"\x0a\x00\x00\x00", 8), action="c.drop", idle_timeout_ns=1)
    client.write(update(Update.INSERT, table_entry=e))
    note = client.next("idle_timeout_notification").idle_timeout_notification
    (got,) = note.table_entry
    assert got.table_id == IDS["c.route"] and got.idle_timeout_ns == 1
    assert got.match[0].lpm.prefix_len == 8


def test_expired_entry_is_notified_again_only_after_a_hit(running):
    service, switch, _, connect, _ = running
    c = connect()
    c.push()
    first = table_entry("c.route", (1, "lpm", b"\x0a\x00\x00\x00", 8), action="c.drop", idle_timeout_ns=1)
    c.write(update(Update.INSERT, table_entry=first))
    assert [e.match[0].lpm.value for e in c.next("idle_timeout_notification").idle_timeout_notification
            .table_entry] == [b"\x0a\x00\x00\x00"]
    second = table_entry("c.route", (1, "lpm", b"\x0b\x00\x00\x00", 8), action="c.drop", idle_timeout_ns=1)
    c.write(update(Update.INSERT, table_entry=second))
    assert [e.match[0].lpm.value for e in c.next("idle_timeout_notification").idle_timeout_notification
            .table_entry] == [b"\x0b\x00\x00\x00"]
    with switch.lock:      # a hit, as the pipeline records it
        (hit,) = [e for e in switch.state.tables["c.route"].entries() if e.match[0][1] == 0x0A000000]
        hit.last_hit_ns = time.monotonic_ns()
    assert [e.match[0].lpm.value for e in c.next("idle_timeout_notification").idle_timeout_notification
            .table_entry] == [b"\x0a\x00\x00\x00"]


def test_idle_timeout_on_table_without_support_is_refused(client):
    errors = rejected(client, update(Update.INSERT, table_entry=table_entry(
        "c.fwd", (1, "exact", MAC), action="c.drop", idle_timeout_ns=10)))
    assert errors[0][1] == code_pb2.INVALID_ARGUMENT


# --- the real client library ------------------------------------------------------

@pytest.fixture
def shell(running, tmp_path, p4runtime_shell):
    """p4runtime-shell connected and pipeline pushed; its global client torn down after."""
    sh = p4runtime_shell
    port = running[4]
    p4info_path, bin_path = tmp_path / "test.p4info.txt", tmp_path / "test.json"
    p4info_path.write_text(to_text(P4INFO))
    bin_path.write_bytes(b"prog")
    sh.setup(device_id=0, grpc_addr=f"127.0.0.1:{port}", election_id=(0, 1),
             config=sh.FwdPipeConfig(str(p4info_path), str(bin_path)), verbose=False)
    try:
        yield sh
    finally:
        sh.teardown()


def test_p4runtime_shell_inserts_and_reads_table_entries(shell):
    te = shell.TableEntry("c.acl")(action="c.drop")
    te.match["hdr.ip.src"] = "10.0.0.0&&&255.0.0.0"
    te.match["hdr.udp.sport"] = "16..32"
    te.priority = 5
    te.insert()
    te = shell.TableEntry("c.route")(action="c.set_mac")
    te.match["hdr.ip.dst"] = "10.1.0.0/16"
    te.action["mac"] = "00:00:00:00:0a:01"
    te.action["port"] = "2"
    te.insert()
    (got,) = shell.TableEntry("c.route").read()
    assert got.match["hdr.ip.dst"].lpm.prefix_len == 16
    assert got.action["port"].value == b"\x02"
    assert len(list(shell.TableEntry("c.acl").read())) == 1


def test_p4runtime_shell_sees_write_errors_per_update(shell):
    te = shell.TableEntry("c.fwd")(action="c.drop")
    te.match["hdr.eth.dst"] = "00:00:00:00:00:01"
    te.insert()
    with pytest.raises(P4RuntimeWriteException) as info:
        te.insert()
    assert [(i, e.canonical_code) for i, e in info.value.errors] == [(0, code_pb2.ALREADY_EXISTS)]


def test_p4runtime_shell_multicast_and_counters(shell):
    mcg = shell.MulticastGroupEntry(7)
    mcg.add(1, 0).add(2, 0)
    mcg.insert()
    (got,) = list(shell.MulticastGroupEntry(7).read())
    assert [r.egress_port for r in got.replicas] == [1, 2]
    counter = shell.CounterEntry("c.bad")
    counter.index = 2
    counter.data.packet_count = 11
    counter.modify()
    (read,) = [c for c in shell.CounterEntry("c.bad").read() if c.index == 2]
    assert read.data.packet_count == 11

