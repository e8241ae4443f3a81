"""Action profiles and selectors (ecmp_selector.p4) through P4Runtime, as BMv2 runs them.

Members and groups go in with p4runtime-shell; outputs are compared byte for byte with
Scapy-built packets. BMv2 picks a group's member as `get_nth(hash % group size)` over the
group's member handles in ascending order (behavioral-model src/bm_sim/action_profile.cpp,
ActionProfile::GroupMgr::get_from_hash); PI creates BMv2 members in the order P4Runtime
inserts them and BMv2 gives each the lowest free handle, so the order is insertion order,
not member id. The hash is the selector's algorithm over the `selector` keys packed MSB
first, as for hash() (bm_sim/calculations.cpp).
"""
from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from p4.config.v1 import p4info_pb2
from p4runtime_sh.p4runtime import P4RuntimeWriteException

from p4sim import P4Error, compile_file
from p4sim.p4info import build_p4info, jenkins_hash
from p4sim.runtime.pipeline_config import encode_value
from tests.p4sim.oracles import ROUTER_MAC, concat, crc16, ip, routed, udp_packet
from tests.p4sim.conftest import pushed_switch
from tests.p4sim.oracles import mac as mac_int

PROGRAM = Path(__file__).resolve().parents[1] / "p4programs" / "ecmp_selector.p4"
TABLE, PROFILE, ACTION = "MyIngress.ecmp_routes", "MyIngress.ecmp_selector", "MyIngress.set_nhop"
# member id -> (next-hop MAC, port); inserted in this order, so BMv2's handles are 0, 1, 2.
MEMBERS = {30: ("00:00:00:00:03:30", 3), 10: ("00:00:00:00:01:10", 1), 20: ("00:00:00:00:02:20", 2)}


@pytest.fixture
def shell(tmp_path, p4runtime_shell):
    """A p4sim switch pushed ecmp_selector.p4 by p4runtime-shell, with MEMBERS installed."""
    sh = p4runtime_shell
    with pushed_switch(sh, PROGRAM, tmp_path) as (switch, _):
        for member_id, (mac, out_port) in MEMBERS.items():
            m = sh.ActionProfileMember(PROFILE)(member_id=member_id, action=ACTION)
            m.action["dstAddr"], m.action["port"] = mac, str(out_port)
            m.insert()
        yield sh, switch


def route(sh, prefix: str, plen: int, *, group_id: int = 0, member_id: int = 0) -> None:
    te = sh.TableEntry(TABLE)
    te.match["hdr.ipv4.dstAddr"] = f"{prefix}/{plen}"
    if group_id:
        te.group_id = group_id
    else:
        te.member_id = member_id
    te.insert()


def group(sh, group_id: int, members: list[int]):
    g = sh.ActionProfileGroup(PROFILE)(group_id=group_id)
    for m in members:
        g.add(m)
    return g


def chosen(src: str, sport: int, dport: int, members: list[int]) -> int:
    """The member BMv2 runs: crc16(srcAddr, protocol, srcPort, dstPort) % size, in handle order."""
    h = crc16(concat((ip(src), 32), (17, 8), (sport, 16), (dport, 16)))
    return members[h % len(members)]


def test_group_spreads_flows_by_the_selector_hash_in_member_handle_order(shell):
    sh, switch = shell
    group(sh, 1, [10, 20, 30]).insert()
    route(sh, "10.0.0.0", 8, group_id=1)
    handle_order = [30, 10, 20]                    # insertion order, not member id order
    used = set()
    for sport in range(1000, 1032):
        sent = udp_packet("192.168.1.7", "10.2.3.4", sport=sport, dport=80)
        member = chosen("192.168.1.7", sport, 80, handle_order)
        mac, port = MEMBERS[member]
        expected = [(port, routed(sent, mac, src_mac=ROUTER_MAC))]
        assert switch.process(5, bytes(sent)) == expected
        assert switch.process(5, bytes(sent)) == expected     # the same flow, the same member
        used.add(member)
    assert used == {10, 20, 30}


def test_two_member_group_and_modify_to_one_member_moves_every_flow(shell):
    sh, switch = shell
    g = group(sh, 7, [20, 10])
    g.insert()
    route(sh, "10.0.0.0", 8, group_id=7)
    flows = [udp_packet("172.16.0.9", "10.0.0.1", sport=s, dport=53) for s in range(2000, 2016)]
    ports = {switch.process(1, bytes(p))[0][0] for p in flows}
    assert ports == {MEMBERS[chosen("172.16.0.9", s, 53, [10, 20])][1] for s in range(2000, 2016)} == {1, 2}
    g.clear()
    g.add(20)
    g.modify()
    assert {switch.process(1, bytes(p))[0][0] for p in flows} == {2}


def test_entry_pointing_to_one_member_and_miss_drops(shell):
    sh, switch = shell
    route(sh, "10.9.0.0", 16, member_id=30)
    sent = udp_packet("192.168.1.7", "10.9.1.1", sport=1, dport=2)
    assert switch.process(4, bytes(sent)) == [(3, routed(sent, MEMBERS[30][0]))]
    assert switch.process(4, bytes(udp_packet("192.168.1.7", "11.0.0.1"))) == []


def test_members_groups_and_entries_read_back(shell):
    sh, _ = shell
    group(sh, 1, [10, 30]).insert()
    route(sh, "10.0.0.0", 8, group_id=1)
    route(sh, "10.9.0.0", 16, member_id=20)
    members = {m.member_id: [p.value for p in m.msg().action.params] for m in
               sh.ActionProfileMember(PROFILE).read()}
    assert members == {k: [encode_value(mac_int(mac)), encode_value(port)] for k, (mac, port) in MEMBERS.items()}
    [g] = list(sh.ActionProfileGroup(PROFILE).read())
    assert (g.group_id, sorted(m.member_id for m in g.members)) == (1, [10, 30])
    refs = sorted((e.match["hdr.ipv4.dstAddr"].lpm.prefix_len, e.group_id, e.member_id)
                  for e in sh.TableEntry(TABLE).read())
    assert refs == [(8, 1, None), (16, None, 20)]


def codes(err: P4RuntimeWriteException) -> list[int]:
    return [e.canonical_code for _, e in err.errors]


def test_bad_member_and_group_ids_get_pi_status_codes(shell):
    """PI's DeviceMgr: an entry naming an unknown member or group is INVALID_ARGUMENT; a group
    naming an unknown member is NOT_FOUND; a member still in a group cannot be deleted."""
    sh, switch = shell
    with pytest.raises(P4RuntimeWriteException) as err:
        route(sh, "10.0.0.0", 8, member_id=99)
    assert codes(err.value) == [grpc.StatusCode.INVALID_ARGUMENT.value[0]]
    with pytest.raises(P4RuntimeWriteException) as err:
        route(sh, "10.0.0.0", 8, group_id=5)
    assert codes(err.value) == [grpc.StatusCode.INVALID_ARGUMENT.value[0]]
    with pytest.raises(P4RuntimeWriteException) as err:
        group(sh, 2, [10, 99]).insert()
    assert codes(err.value) == [grpc.StatusCode.NOT_FOUND.value[0]]
    group(sh, 2, [10]).insert()
    with pytest.raises(P4RuntimeWriteException) as err:
        sh.ActionProfileMember(PROFILE)(member_id=10).delete()
    assert codes(err.value) == [grpc.StatusCode.FAILED_PRECONDITION.value[0]]
    with pytest.raises(P4RuntimeWriteException) as err:
        again = sh.ActionProfileMember(PROFILE)(member_id=30, action=ACTION)
        again.action["dstAddr"], again.action["port"] = MEMBERS[30][0], "9"
        again.insert()
    assert codes(err.value) == [grpc.StatusCode.ALREADY_EXISTS.value[0]]
    assert switch.state.tables[TABLE].entries() == []


def test_p4info_lists_the_selector_as_p4c_writes_it(p4program):
    p4info = build_p4info(p4program("ecmp_selector").info)
    [table] = p4info.tables
    [profile] = p4info.action_profiles
    assert profile.preamble.id == (0x11 << 24) | (jenkins_hash(PROFILE) & 0xFFFFFF)
    assert (profile.preamble.name, profile.preamble.alias) == (PROFILE, "ecmp_selector")
    assert (list(profile.table_ids), profile.with_selector, profile.size, profile.max_group_size) == \
        ([table.preamble.id], True, 64, 0)
    assert table.implementation_id == profile.preamble.id
    # Selector keys are hashed, not matched: p4c leaves them out of the match fields.
    assert [(m.name, m.match_type) for m in table.match_fields] == [("hdr.ipv4.dstAddr", p4info_pb2.MatchField.LPM)]


SELECTOR_WITHOUT_PROFILE = PROGRAM.read_text().replace("        implementation = ecmp_selector;\n", "")


@pytest.mark.parametrize("source,message", [
    (SELECTOR_WITHOUT_PROFILE, "has `selector` keys but no action_selector implementation"),
    (PROGRAM.read_text().replace("implementation = ecmp_selector;", "implementation = set_nhop;"),
     "`implementation` must name an action_profile or action_selector instance"),
])
def test_selector_misuse_is_a_located_error(tmp_path, source, message):
    path = tmp_path / "ecmp_bad.p4"
    path.write_text(source)
    with pytest.raises(P4Error) as err:
        compile_file(str(path))
    assert message in err.value.message
    assert (err.value.file, err.value.line > 0) == (str(path), True)
