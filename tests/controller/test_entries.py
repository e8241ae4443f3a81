"""The tutorials' runtime JSON and its P4Runtime messages, by allreduce.p4's P4Info names:
values as users write them (IPv4, MAC, hex) become P4Runtime's canonical bytes."""
from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from p4runtime_sh.context import Context

from controller.entries import (RuntimeConfig, TableEntry, normalized, parse_value,
                                table_entry_from_proto, table_entry_to_proto, to_bytes)
from controller.errors import ControllerError
from controller.switch import Pipeline


@pytest.fixture(scope="module")
def ctx(pipeline: Pipeline) -> Context:
    c = Context()
    c.set_p4info(pipeline.p4info)
    return c


def test_values_parse_as_ipv4_mac_hex_and_decimal():
    assert parse_value("10.0.0.254", 32) == int(ipaddress.IPv4Address("10.0.0.254"))
    assert parse_value("02:00:00:00:00:fe", 48) == int.from_bytes(bytes.fromhex("0200000000fe"), "big")
    assert parse_value("0xBEEF", 16) == 48879
    assert parse_value("17", 9) == 17 and parse_value(17, 9) == 17


@pytest.mark.parametrize("bad", ["10.0.0", "08:00:00", "seven", -1, 1.5, True])
def test_bad_values_are_refused_with_the_value_named(bad):
    with pytest.raises(ControllerError, match="bad value"):
        parse_value(bad, 48 if isinstance(bad, str) and ":" in bad else 32)


def test_canonical_bytes_have_no_leading_zeros_but_at_least_one_byte():
    assert [to_bytes(v) for v in (0, 1, 255, 256, 0x0200000000FE)] == [
        b"\x00", b"\x01", b"\xff", b"\x01\x00", bytes.fromhex("0200000000fe")]


def test_entry_to_proto_uses_p4info_ids_and_back_gives_full_names_and_ints(ctx):
    entry = TableEntry("inc_worker_addr", "set_worker_addr",   # unique suffixes, as in the shell
                       {"mac": "08:00:00:00:00:03", "ip": "10.0.0.3", "udp_port": 48879},
                       {"hdr.inc.job_id": 1, "meta.dest_worker": 2})
    msg = table_entry_to_proto(ctx, entry)
    assert msg.table_id == ctx.get_table_id("MyEgress.inc_worker_addr")
    assert msg.action.action.action_id == ctx.get_action_id("MyEgress.set_worker_addr")
    assert sorted(p.value for p in msg.action.action.params) == sorted(
        [bytes.fromhex("080000000003"), bytes([10, 0, 0, 3]), (48879).to_bytes(2, "big")])
    back = table_entry_from_proto(ctx, msg)
    assert back == TableEntry("MyEgress.inc_worker_addr", "MyEgress.set_worker_addr",
                              {"mac": 0x080000000003, "ip": 0x0A000003, "udp_port": 48879},
                              {"hdr.inc.job_id": 1, "meta.dest_worker": 2})
    assert normalized(ctx, entry) == back


def test_lpm_entry_keeps_its_prefix_length(ctx):
    entry = TableEntry("MyIngress.ipv4_lpm", "MyIngress.ipv4_forward",
                       {"dstAddr": "08:00:00:00:02:01", "port": 3}, {"hdr.ipv4.dstAddr": ["10.0.2.0", 24]})
    msg = table_entry_to_proto(ctx, entry)
    assert (msg.match[0].lpm.value, msg.match[0].lpm.prefix_len) == (bytes([10, 0, 2, 0]), 24)
    assert normalized(ctx, entry).match == {"hdr.ipv4.dstAddr": [0x0A000200, 24]}


@pytest.mark.parametrize("entry, message", [
    (TableEntry("MyIngress.l2_forward", "MyIngress.set_job", {}, {"hdr.ethernet.dstAddr": 1}),
     "not an action of table MyIngress.l2_forward"),
    (TableEntry("MyIngress.l2_forward", "MyIngress.l2_forward_to", {}, {"hdr.ethernet.dstAddr": 1}),
     "needs parameter 'port'"),
    (TableEntry("MyIngress.l2_forward", "MyIngress.l2_forward_to", {"port": 1, "vlan": 2},
                {"hdr.ethernet.dstAddr": 1}), "no parameter 'vlan'"),
    (TableEntry("MyIngress.l2_forward", "MyIngress.l2_forward_to", {"port": 1}, {"hdr.ip.dst": 1}),
     "no key 'hdr.ip.dst'.*hdr.ethernet.dstAddr"),
    (TableEntry("MyIngress.ipv4_lpm", "MyIngress.ipv4_forward", {"dstAddr": 1, "port": 1},
                {"hdr.ipv4.dstAddr": "10.0.0.1"}), "takes a pair"),
    (TableEntry("MyIngress.l2_forward", "MyIngress.nope", {}, {}), "no action 'MyIngress.nope'"),
])
def test_entries_the_program_cannot_take_are_refused_by_name(ctx, entry, message):
    with pytest.raises(ControllerError, match=message):
        table_entry_to_proto(ctx, entry)


def test_runtime_json_in_the_tutorials_format_loads(tmp_path: Path):
    path = tmp_path / "s1-runtime.json"
    path.write_text(json.dumps({
        "target": "bmv2", "p4info": "build/allreduce.p4info.txt", "bmv2_json": "build/allreduce.json",
        "table_entries": [
            {"table": "MyIngress.l2_forward", "default_action": True, "action_name": "MyIngress.l2_flood",
             "action_params": {"mcast_grp": 1}},
            {"table": "MyIngress.ipv4_lpm", "match": {"hdr.ipv4.dstAddr": ["10.0.2.0", 24]},
             "action_name": "MyIngress.ipv4_forward", "action_params": {"dstAddr": "08:00:00:00:02:00", "port": 3}}],
        "multicast_group_entries": [{"multicast_group_id": 1, "replicas": [
            {"egress_port": 1, "instance": 0}, {"egress_port": 2, "instance": 0}]}],
        "clone_session_entries": [{"clone_session_id": 5, "replicas": [{"egress_port": 510, "instance": 0}],
                                   "packet_length_bytes": 128}]}))
    config = RuntimeConfig.load(path)
    assert config.table_entries[0].default_action and config.table_entries[0].match == {}
    assert config.table_entries[1].match == {"hdr.ipv4.dstAddr": ["10.0.2.0", 24]}
    assert [r.egress_port for r in config.multicast_group_entries[0].replicas] == [1, 2]
    assert config.clone_session_entries[0].packet_length_bytes == 128
    assert RuntimeConfig.load(path).to_json()["table_entries"][1]["action_params"]["port"] == 3


def test_runtime_json_errors_say_where(tmp_path: Path):
    path = tmp_path / "bad.json"
    path.write_text('{"table_entries": [\n  {"table": }]}')
    with pytest.raises(ControllerError, match=r"bad.json:2:\d+: not valid JSON"):
        RuntimeConfig.load(path)
    path.write_text('{"table_entries": [{"match": {}}]}')
    with pytest.raises(ControllerError, match="bad table entry.*'table'"):
        RuntimeConfig.load(path)
