"""P4Info generation checked field by field against what p4c writes for the same objects."""
from __future__ import annotations

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from p4sim import compile_file, ir
from p4sim.p4info import build_p4info, jenkins_hash, to_text


def every_kind_program() -> ir.ProgramInfo:
    """basic.p4's names (so ids can be checked against p4c's output) plus one of everything."""
    info = ir.ProgramInfo(source_file="every.p4")
    info.actions = {
        "NoAction": ir.ActionInfo("NoAction"),
        "MyIngress.drop": ir.ActionInfo("MyIngress.drop"),
        "MyIngress.ipv4_forward": ir.ActionInfo(
            "MyIngress.ipv4_forward",
            (ir.Param("dstAddr", 48), ir.Param("port", 9, ("@brief(\"out\")",)))),
        "MyIngress.pinned": ir.ActionInfo("MyIngress.pinned", (), ("@id(0x77)", "@name(\"pinned\")")),
    }
    info.tables = {
        "MyIngress.ipv4_lpm": ir.TableInfo(
            "MyIngress.ipv4_lpm",
            (ir.MatchField("hdr.ipv4.dstAddr", 32, "lpm"),),
            (ir.ActionRef("MyIngress.ipv4_forward"), ir.ActionRef("MyIngress.drop"),
             ir.ActionRef("NoAction", "DEFAULT_ONLY")),
            size=1024, default_action="MyIngress.drop",
            direct_counter="MyIngress.lpm_hits", support_timeout=True),
        "MyIngress.acl": ir.TableInfo(
            "MyIngress.acl",
            (ir.MatchField("hdr.ipv4.srcAddr", 32, "ternary"),
             ir.MatchField("meta.port", 16, "range"),
             ir.MatchField("meta.vlan", 12, "optional"),
             ir.MatchField("hdr.ipv4.protocol", 8, "exact")),
            (ir.ActionRef("MyIngress.drop", "TABLE_ONLY"), ir.ActionRef("NoAction")),
            size=64, default_action="NoAction", const_default_action=True,
            const_entries=(ir.ConstEntry((None, None, None, ("exact", 6)), "MyIngress.drop", ()),),
            entries_are_const=True, direct_meter="MyIngress.acl_meter"),
    }
    info.counters = {
        "MyIngress.lpm_hits": ir.CounterInfo("MyIngress.lpm_hits", "BOTH",
                                             direct_table="MyIngress.ipv4_lpm"),
        "MyIngress.bad_packets": ir.CounterInfo("MyIngress.bad_packets", "PACKETS", size=8),
    }
    info.meters = {
        "MyIngress.acl_meter": ir.MeterInfo("MyIngress.acl_meter", "BYTES",
                                            direct_table="MyIngress.acl"),
        "MyIngress.rate": ir.MeterInfo("MyIngress.rate", "PACKETS", size=4),
    }
    info.registers = {"MyIngress.sums": ir.RegisterInfo("MyIngress.sums", 32, 256)}
    info.controller_headers = {
        "packet_in": ir.ControllerHeader("packet_in", "packet_in_t", (ir.Param("ingress_port", 9),
                                                                      ir.Param("_pad", 7))),
        "packet_out": ir.ControllerHeader("packet_out", "packet_out_t", (ir.Param("egress_port", 9),)),
    }
    info.digests = {"learn_t": ir.DigestInfo("learn_t", (ir.Param("mac", 48), ir.Param("port", 9)))}
    return info


def hashed(prefix: int, name: str) -> int:
    return (prefix << 24) | (jenkins_hash(name) & 0xFFFFFF)


def by_name(messages) -> dict:
    return {m.preamble.name: m for m in messages}


@pytest.fixture(scope="module")
def p4info() -> p4info_pb2.P4Info:
    return build_p4info(every_kind_program())


def test_ids_match_p4c_output_for_basic_p4(p4info):
    # Ids from the P4 tutorials' basic.p4info.txt, written by p4c.
    tables, actions = by_name(p4info.tables), by_name(p4info.actions)
    assert tables["MyIngress.ipv4_lpm"].preamble.id == 37375156
    assert actions["NoAction"].preamble.id == 21257015
    assert actions["MyIngress.drop"].preamble.id == 25652968
    assert actions["MyIngress.ipv4_forward"].preamble.id == 28792405


def test_controller_header_id_hashes_the_header_type_as_p4c_does():
    # p4c (since 2021) gives packet_in_header_t's packet_in the id 81826293.
    info = ir.ProgramInfo("x.p4")
    info.controller_headers = {"packet_in": ir.ControllerHeader("packet_in", "packet_in_header_t",
                                                                (ir.Param("ingress_port", 9),))}
    (cpm,) = build_p4info(info).controller_packet_metadata
    assert (cpm.preamble.id, cpm.preamble.name, cpm.preamble.alias) == (81826293, "packet_in", "packet_in")


def test_id_annotation_gets_type_prefix_and_is_not_copied(p4info):
    pinned = by_name(p4info.actions)["MyIngress.pinned"]
    assert pinned.preamble.id == 0x01000077
    assert list(pinned.preamble.annotations) == []


def test_every_resource_type_uses_its_p4ids_prefix(p4info):
    P = p4info_pb2.P4Ids
    assert by_name(p4info.counters)["MyIngress.bad_packets"].preamble.id == hashed(P.COUNTER, "MyIngress.bad_packets")
    assert by_name(p4info.direct_counters)["MyIngress.lpm_hits"].preamble.id == hashed(P.DIRECT_COUNTER, "MyIngress.lpm_hits")
    assert by_name(p4info.meters)["MyIngress.rate"].preamble.id == hashed(P.METER, "MyIngress.rate")
    assert by_name(p4info.direct_meters)["MyIngress.acl_meter"].preamble.id == hashed(P.DIRECT_METER, "MyIngress.acl_meter")
    assert by_name(p4info.registers)["MyIngress.sums"].preamble.id == hashed(P.REGISTER, "MyIngress.sums")
    assert by_name(p4info.controller_packet_metadata)["packet_in"].preamble.id == hashed(P.CONTROLLER_HEADER, "packet_in_t")
    assert by_name(p4info.digests)["learn_t"].preamble.id == hashed(P.DIGEST, "learn_t")


def test_aliases_are_shortest_unique_suffixes(p4info):
    assert by_name(p4info.tables)["MyIngress.ipv4_lpm"].preamble.alias == "ipv4_lpm"
    assert by_name(p4info.actions)["NoAction"].preamble.alias == "NoAction"


def test_alias_keeps_enough_components_to_be_unique():
    info = ir.ProgramInfo("x.p4")
    info.actions = {n: ir.ActionInfo(n) for n in ("MyIngress.drop", "MyEgress.drop", "MyEgress.fwd")}
    actions = by_name(build_p4info(info).actions)
    assert actions["MyIngress.drop"].preamble.alias == "MyIngress.drop"
    assert actions["MyEgress.fwd"].preamble.alias == "fwd"


def test_hash_collision_probes_to_next_id_in_name_order():
    # "c.t1626" and "c.t3872" share their low 24 hash bits.
    assert jenkins_hash("c.t1626") & 0xFFFFFF == jenkins_hash("c.t3872") & 0xFFFFFF
    info = ir.ProgramInfo("x.p4")
    info.actions = {n: ir.ActionInfo(n) for n in ("c.t3872", "c.t1626")}
    actions = by_name(build_p4info(info).actions)
    first = hashed(p4info_pb2.P4Ids.ACTION, "c.t1626")
    assert actions["c.t1626"].preamble.id == first
    assert actions["c.t3872"].preamble.id == first + 1


def test_table_fields(p4info):
    t = by_name(p4info.tables)["MyIngress.acl"]
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields] == [
        (1, "hdr.ipv4.srcAddr", 32, p4info_pb2.MatchField.TERNARY),
        (2, "meta.port", 16, p4info_pb2.MatchField.RANGE),
        (3, "meta.vlan", 12, p4info_pb2.MatchField.OPTIONAL),
        (4, "hdr.ipv4.protocol", 8, p4info_pb2.MatchField.EXACT)]
    drop, noaction = t.action_refs
    assert drop.id == 25652968 and drop.scope == p4info_pb2.ActionRef.TABLE_ONLY
    assert list(drop.annotations) == ["@tableonly"]
    assert noaction.id == 21257015 and noaction.scope == p4info_pb2.ActionRef.TABLE_AND_DEFAULT
    assert t.const_default_action_id == 21257015
    assert t.size == 64
    # p4c 1.2.4.0 writes is_const_table but neither has_initial_entries nor initial_default_action.
    assert t.is_const_table and not t.has_initial_entries
    assert list(t.direct_resource_ids) == [by_name(p4info.direct_meters)["MyIngress.acl_meter"].preamble.id]
    assert t.idle_timeout_behavior == p4info_pb2.Table.NO_TIMEOUT


def test_lpm_table_with_timeout_and_direct_counter(p4info):
    t = by_name(p4info.tables)["MyIngress.ipv4_lpm"]
    assert t.idle_timeout_behavior == p4info_pb2.Table.NOTIFY_CONTROL
    assert t.const_default_action_id == 0 and not t.is_const_table
    assert not t.HasField("initial_default_action")
    assert list(t.direct_resource_ids) == [by_name(p4info.direct_counters)["MyIngress.lpm_hits"].preamble.id]
    assert list(t.action_refs[2].annotations) == ["@defaultonly"]


def test_action_only_control_code_calls_is_listed_without_params():
    # p4c binds the arguments of a directly called action at compile time (firewall.p4's
    # compute_hashes), so P4Info lists it with no params; in a table it keeps them.
    info = ir.ProgramInfo("x.p4")
    info.actions = {n: ir.ActionInfo(n, (ir.Param("port", 9),)) for n in ("c.direct", "c.fwd")}
    info.tables = {"c.t": ir.TableInfo("c.t", (ir.MatchField("k", 8, "exact"),), (ir.ActionRef("c.fwd"),),
                                       default_action="c.fwd", default_args=(3,))}
    actions = by_name(build_p4info(info).actions)
    assert list(actions["c.direct"].params) == []
    assert [(p.id, p.name, p.bitwidth) for p in actions["c.fwd"].params] == [(1, "port", 9)]


@pytest.mark.parametrize(("change", "written"), [
    (lambda info: None, False),
    (lambda info: info.actions.update({"c.a": ir.ActionInfo("c.a")}), False),
    (lambda info: setattr(info, "control_calls_extern_function", True), True),
    (lambda info: info.registers.update({"c.r": ir.RegisterInfo("c.r", 8, 4)}), True),
    (lambda info: info.tables.update({"c.t": ir.TableInfo("c.t", (), (ir.ActionRef("NoAction"),))}), True),
])
def test_type_info_is_written_as_p4c_writes_it(change, written):
    # p4c 1.2.4.0 writes an empty `type_info {}` once a table, a register, an action param, a
    # controller header, a digest or a control's extern function call touched it, else nothing.
    info = ir.ProgramInfo("x.p4")
    info.actions = {"NoAction": ir.ActionInfo("NoAction")}
    change(info)
    assert build_p4info(info).HasField("type_info") is written


def test_action_params_numbered_from_one_with_widths(p4info):
    a = by_name(p4info.actions)["MyIngress.ipv4_forward"]
    assert [(p.id, p.name, p.bitwidth) for p in a.params] == [(1, "dstAddr", 48), (2, "port", 9)]
    assert list(a.params[1].annotations) == []    # @brief goes to doc, not annotations


def test_counters_meters_registers(p4info):
    c = by_name(p4info.counters)["MyIngress.bad_packets"]
    assert (c.spec.unit, c.size) == (p4info_pb2.CounterSpec.PACKETS, 8)
    dc = by_name(p4info.direct_counters)["MyIngress.lpm_hits"]
    assert (dc.spec.unit, dc.direct_table_id) == (p4info_pb2.CounterSpec.BOTH, 37375156)
    m = by_name(p4info.meters)["MyIngress.rate"]
    assert (m.spec.unit, m.size) == (p4info_pb2.MeterSpec.PACKETS, 4)
    dm = by_name(p4info.direct_meters)["MyIngress.acl_meter"]
    assert dm.spec.unit == p4info_pb2.MeterSpec.BYTES
    assert dm.direct_table_id == by_name(p4info.tables)["MyIngress.acl"].preamble.id
    r = by_name(p4info.registers)["MyIngress.sums"]
    assert (r.size, r.type_spec.bitstring.bit.bitwidth) == (256, 32)


def test_controller_headers_and_digests(p4info):
    pin = by_name(p4info.controller_packet_metadata)["packet_in"]
    assert list(pin.preamble.annotations) == ['@controller_header("packet_in")']
    assert [(m.id, m.name, m.bitwidth) for m in pin.metadata] == [(1, "ingress_port", 9), (2, "_pad", 7)]
    d = by_name(p4info.digests)["learn_t"]
    assert d.type_spec.struct.name == "learn_t"
    members = p4info.type_info.structs["learn_t"].members
    assert [(m.name, m.type_spec.bitstring.bit.bitwidth) for m in members] == [("mac", 48), ("port", 9)]
    assert p4info.pkg_info.arch == "v1model"


def test_text_format_round_trips(p4info):
    text = to_text(p4info)
    assert text.startswith("pkg_info {")
    assert text_format.Parse(text, p4info_pb2.P4Info()) == p4info


def test_id_with_wrong_prefix_is_refused():
    info = ir.ProgramInfo("x.p4")
    info.actions = {"a": ir.ActionInfo("a", (), ("@id(0x02000001)",))}
    with pytest.raises(ValueError, match="wrong 8-bit prefix"):
        build_p4info(info)


def test_serializable_enums_of_listed_fields_go_to_type_info():
    # As p4c's TypeSpecConverter writes them: the underlying width, and each member's value in
    # the whole bytes of that width. A param P4Info does not list (an action only control code
    # calls) brings no enum.
    opcode = ir.SerializableEnum("Opcode_t", 8, (("NO_OP", 0), ("SEND", 1)))
    reason = ir.SerializableEnum("Reason_t", 12, (("UNKNOWN", 0x102),))
    unused = ir.SerializableEnum("Unused_t", 8, (("X", 1),))
    info = ir.ProgramInfo("x.p4")
    info.actions = {"c.set": ir.ActionInfo("c.set", (ir.Param("op", 8, enum=opcode),)),
                    "c.direct": ir.ActionInfo("c.direct", (ir.Param("u", 8, enum=unused),))}
    info.tables = {"c.t": ir.TableInfo("c.t", (ir.MatchField("meta.op", 8, "exact", enum=opcode),),
                                       (ir.ActionRef("c.set"),), default_action="c.set", default_args=(0,))}
    info.controller_headers = {"packet_in": ir.ControllerHeader(
        "packet_in", "packet_in_t", (ir.Param("reason", 12, enum=reason), ir.Param("_pad", 4)))}
    enums = build_p4info(info).type_info.serializable_enums
    assert sorted(enums) == ["Opcode_t", "Reason_t"]
    assert enums["Opcode_t"].underlying_type.bitwidth == 8
    assert [(m.name, m.value) for m in enums["Opcode_t"].members] == [("NO_OP", b"\x00"), ("SEND", b"\x01")]
    assert [(m.name, m.value) for m in enums["Reason_t"].members] == [("UNKNOWN", b"\x01\x02")]


def test_parser_value_sets_are_listed_as_p4c_lists_them():
    # A bit<W> value_set has one unnamed exact match; a struct one, a named match per field.
    info = ir.ProgramInfo("x.p4")
    info.value_sets = {
        "P.special": ir.ValueSetInfo("P.special", (ir.MatchField("", 8, "exact"),), 4),
        "P.pairs": ir.ValueSetInfo("P.pairs", (ir.MatchField("a", 16, "exact"), ir.MatchField("b", 8, "ternary")), 2),
    }
    special, pairs = build_p4info(info).value_sets
    assert (special.preamble.id, special.preamble.name, special.preamble.alias, special.size) == (
        hashed(p4info_pb2.P4Ids.VALUE_SET, "P.special"), "P.special", "special", 4)
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in special.match] == [(1, "", 8, p4info_pb2.MatchField.EXACT)]
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in pairs.match] == [
        (1, "a", 16, p4info_pb2.MatchField.EXACT), (2, "b", 8, p4info_pb2.MatchField.TERNARY)]


def test_enum_fields_of_a_controller_header_reach_type_info(tmp_path):
    # The tutorials' flowcache controller reads PuntReason_t's members from type_info.
    source = tmp_path / "punt.p4"
    source.write_text("""#include <core.p4>
#include <v1model.p4>
enum bit<8> PuntReason_t { FLOW_UNKNOWN = 1, UNRECOGNIZED_OPCODE = 2 }
@controller_header("packet_in")
header packet_in_t { bit<16> input_port; PuntReason_t punt_reason; }
struct H { packet_in_t packet_in; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) { state start { transition accept; } }
control V(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    apply { hdr.packet_in.setValid(); hdr.packet_in.punt_reason = PuntReason_t.FLOW_UNKNOWN; }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.packet_in); } }
V1Switch(P(), V(), I(), E(), V(), D()) main;
""")
    p4info = build_p4info(compile_file(str(source)).info)
    (cpm,) = p4info.controller_packet_metadata
    assert [(m.name, m.bitwidth) for m in cpm.metadata] == [("input_port", 16), ("punt_reason", 8)]
    members = p4info.type_info.serializable_enums["PuntReason_t"].members
    assert [(m.name, m.value) for m in members] == [("FLOW_UNKNOWN", b"\x01"), ("UNRECOGNIZED_OPCODE", b"\x02")]


def test_table_of_size_zero_is_listed_with_the_default_size():
    # p4c's getTableSize maps `size = 0` to v1model's default, 1024.
    info = ir.ProgramInfo("x.p4")
    info.actions = {"NoAction": ir.ActionInfo("NoAction")}
    info.tables = {"c.t": ir.TableInfo("c.t", (ir.MatchField("k", 8, "exact"),), (ir.ActionRef("NoAction"),), size=0)}
    (t,) = build_p4info(info).tables
    assert t.size == 1024


def test_direct_counters_follow_their_tables_and_an_unbound_one_is_left_out():
    # p4c adds a direct counter with the table that owns it (p4RuntimeArchStandard's table
    # properties), so table order decides; one that no table names is not in P4Info.
    info = ir.ProgramInfo("x.p4")
    info.actions = {"NoAction": ir.ActionInfo("NoAction")}
    info.counters = {n: ir.CounterInfo(n, "PACKETS", direct_table=t)
                     for n, t in (("c.second", "c.t2"), ("c.first", "c.t1"), ("c.spare", ""))}
    info.tables = {t: ir.TableInfo(t, (ir.MatchField("k", 8, "exact"),), (ir.ActionRef("NoAction"),),
                                   direct_counter=c) for t, c in (("c.t1", "c.first"), ("c.t2", "c.second"))}
    assert [c.preamble.name for c in build_p4info(info).direct_counters] == ["c.first", "c.second"]
