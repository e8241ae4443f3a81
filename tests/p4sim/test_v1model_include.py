"""p4sim's core.p4 and v1model.p4 declare what p4c 1.2.4.0's declare: no more, no less.

A program p4c accepts must find every name it uses in our headers, and must be free to
declare any name p4c's leave free, as the P4 tutorials' flowcache solution declares its own
PortId_t. The expected declarations were read from p4c 1.2.4's p4include/core.p4 and
p4include/v1model.p4: by default V1MODEL_VERSION is 20180101; a program that defines it
>= 20200408 before the include gets index type parameters on counter, meter and register,
and the PortId_t typedef. tests/p4programs/l2_monitor.p4 declares its own PortId_t and
the other names p4sim once declared beyond p4c's, and is run here packet by packet.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from p4sim import Switch, compile_file
from p4sim.errors import P4Error
from p4sim.frontend import ast
from p4sim.frontend.checker import annotation_text, expr_text
from p4sim.frontend.parser import parse_text
from p4sim.frontend.preprocess import preprocess
from p4sim.state import CloneSession, TableEntry

CORE = [
    "error {NoError, PacketTooShort, NoMatch, StackOutOfBounds, HeaderTooShort, ParserTimeout, "
    "ParserInvalidArgument}",
    "extern packet_in {void extract<T>(out T hdr); "
    "void extract<T>(out T variableSizeHeader, in bit<32> variableFieldSizeInBits); "
    "T lookahead<T>(); void advance(in bit<32> sizeInBits); bit<32> length()}",
    "extern packet_out {void emit<T>(in T hdr)}",
    "extern void verify(in bool check, in error toSignal)",
    '@noWarn("unused") action NoAction()',
    "match_kind {exact, ternary, lpm}",
    "extern bool static_assert(bool check, string message)",
    "extern bool static_assert(bool check)",
]


def v1model(version: int) -> list[str]:
    """p4c's v1model.p4 declarations for a V1MODEL_VERSION."""
    typed = version >= 20200408
    port = "PortId_t" if typed else "bit<9>"
    index, params = ("I", "<I>") if typed else ("bit<32>", "")
    return [
        "match_kind {range, optional, selector}",
        f"const bit<32> __v1model_version = {version}",
        *(["typedef bit<9> PortId_t"] if typed else []),
        '@metadata @name("standard_metadata") struct standard_metadata_t {'
        f"{port} ingress_port; {port} egress_spec; {port} egress_port; "
        "bit<32> instance_type; bit<32> packet_length; "
        '@alias("queueing_metadata.enq_timestamp") bit<32> enq_timestamp; '
        '@alias("queueing_metadata.enq_qdepth") bit<19> enq_qdepth; '
        '@alias("queueing_metadata.deq_timedelta") bit<32> deq_timedelta; '
        '@alias("queueing_metadata.deq_qdepth") bit<19> deq_qdepth; '
        '@alias("intrinsic_metadata.ingress_global_timestamp") bit<48> ingress_global_timestamp; '
        '@alias("intrinsic_metadata.egress_global_timestamp") bit<48> egress_global_timestamp; '
        '@alias("intrinsic_metadata.mcast_grp") bit<16> mcast_grp; '
        '@alias("intrinsic_metadata.egress_rid") bit<16> egress_rid; '
        "bit<1> checksum_error; error parser_error; "
        '@alias("intrinsic_metadata.priority") bit<3> priority}',
        "enum CounterType {packets, bytes, packets_and_bytes}",
        "enum MeterType {packets, bytes}",
        f"extern counter{params} {{counter(bit<32> size, CounterType type); void count(in {index} index)}}",
        "extern direct_counter {direct_counter(CounterType type); void count()}",
        f"extern meter{params} {{meter(bit<32> size, MeterType type); "
        f"void execute_meter<T>(in {index} index, out T result)}}",
        "extern direct_meter<T> {direct_meter(MeterType type); void read(out T result)}",
        f"extern register<T{', I' if typed else ''}> {{register(bit<32> size); "
        f"@noSideEffects void read(out T result, in {index} index); void write(in {index} index, in T value)}}",
        "extern action_profile {action_profile(bit<32> size)}",
        "extern void random<T>(out T result, in T lo, in T hi)",
        "extern void digest<T>(in bit<32> receiver, in T data)",
        "enum HashAlgorithm {crc32, crc32_custom, crc16, crc16_custom, random, identity, csum16, xor16}",
        '@deprecated("Please use mark_to_drop(standard_metadata) instead.") extern void mark_to_drop()',
        "@pure extern void mark_to_drop(inout standard_metadata_t standard_metadata)",
        "@pure extern void hash<O, T, D, M>(out O result, in HashAlgorithm algo, in T base, in D data, in M max)",
        "extern action_selector {action_selector(HashAlgorithm algorithm, bit<32> size, bit<32> outputWidth)}",
        "enum CloneType {I2E, E2E}",
        '@deprecated("Please use verify_checksum/update_checksum instead.") '
        "extern Checksum16 {Checksum16(); bit<16> get<D>(in D data)}",
        "extern void verify_checksum<T, O>(in bool condition, in T data, in O checksum, HashAlgorithm algo)",
        "@pure extern void update_checksum<T, O>(in bool condition, in T data, inout O checksum, "
        "HashAlgorithm algo)",
        "extern void verify_checksum_with_payload<T, O>(in bool condition, in T data, in O checksum, "
        "HashAlgorithm algo)",
        "@noSideEffects extern void update_checksum_with_payload<T, O>(in bool condition, in T data, "
        "inout O checksum, HashAlgorithm algo)",
        "extern void clone(in CloneType type, in bit<32> session)",
        "@deprecated(\"Please use 'resubmit_preserving_field_list' instead\") extern void resubmit<T>(in T data)",
        "extern void resubmit_preserving_field_list(bit<8> index)",
        "@deprecated(\"Please use 'recirculate_preserving_field_list' instead\") "
        "extern void recirculate<T>(in T data)",
        "extern void recirculate_preserving_field_list(bit<8> index)",
        "@deprecated(\"Please use 'clone_preserving_field_list' instead\") "
        "extern void clone3<T>(in CloneType type, in bit<32> session, in T data)",
        "extern void clone_preserving_field_list(in CloneType type, in bit<32> session, bit<8> index)",
        "extern void truncate(in bit<32> length)",
        "extern void assert(in bool check)",
        "extern void assume(in bool check)",
        "extern void log_msg(string msg)",
        "extern void log_msg<T>(string msg, in T data)",
        "parser Parser<H, M>(packet_in b, out H parsedHdr, inout M meta, "
        "inout standard_metadata_t standard_metadata)",
        "control VerifyChecksum<H, M>(inout H hdr, inout M meta)",
        "@pipeline control Ingress<H, M>(inout H hdr, inout M meta, inout standard_metadata_t standard_metadata)",
        "@pipeline control Egress<H, M>(inout H hdr, inout M meta, inout standard_metadata_t standard_metadata)",
        "control ComputeChecksum<H, M>(inout H hdr, inout M meta)",
        "@deparser control Deparser<H>(packet_out b, in H hdr)",
        "package V1Switch<H, M>(Parser<H, M> p, VerifyChecksum<H, M> vr, Ingress<H, M> ig, Egress<H, M> eg, "
        "ComputeChecksum<H, M> ck, Deparser<H> dep)",
    ]


# --- rendering our headers' declarations in one canonical line each -------------------

def type_text(t: ast.TypeRef | None) -> str:
    if isinstance(t, ast.NamedTypeRef) and t.args:
        return f"{t.name}<{', '.join(type_text(a) for a in t.args)}>"
    return "void" if t is None else expr_text(t)


def annotated(annotations: list[ast.Annotation], text: str) -> str:
    return " ".join([annotation_text(a) for a in annotations] + [text])


def generics(names: list[str]) -> str:
    return f"<{', '.join(names)}>" if names else ""


def params_text(params: list[ast.Param]) -> str:
    return ", ".join(" ".join(x for x in (p.direction, type_text(p.type_ref), p.name) if x) for p in params)


def method_text(m: ast.MethodDecl) -> str:
    ret = "" if m.ret is None else type_text(m.ret) + " "
    return annotated(m.annotations, f"{ret}{m.name}{generics(m.type_params)}({params_text(m.params)})")


def declaration_text(d: ast.Node) -> str:
    if isinstance(d, ast.ErrorDecl):
        return f"error {{{', '.join(d.members)}}}"
    if isinstance(d, ast.MatchKindDecl):
        return f"match_kind {{{', '.join(d.members)}}}"
    if isinstance(d, ast.EnumDecl):
        return f"enum {d.name} {{{', '.join(name for name, _ in d.members)}}}"
    if isinstance(d, ast.TypedefDecl):
        return f"typedef {type_text(d.type_ref)} {d.name}"
    if isinstance(d, ast.ConstDecl):
        return f"const {type_text(d.type_ref)} {d.name} = {expr_text(d.value)}"
    if isinstance(d, ast.ActionDecl):
        return annotated(d.annotations, f"action {d.name}({params_text(d.params)})")
    if isinstance(d, ast.MethodDecl):
        return annotated(d.annotations, "extern " + method_text(ast.MethodDecl(d.name, d.ret, d.type_params, d.params)))
    if isinstance(d, ast.ExternDecl):
        methods = "; ".join(method_text(m) for m in d.methods)
        return annotated(d.annotations, f"extern {d.name}{generics(d.type_params)} {{{methods}}}")
    if isinstance(d, ast.HeaderDecl):
        fields = "; ".join(annotated(f.annotations, f"{type_text(f.type_ref)} {f.name}") for f in d.fields)
        return annotated(d.annotations, f"{d.kind} {d.name} {{{fields}}}")
    if isinstance(d, ast.BlockTypeDecl):
        return annotated(d.annotations, f"{d.kind} {d.name}{generics(d.type_params)}({params_text(d.params)})")
    raise AssertionError(f"unexpected declaration in our headers: {d}")


def declarations(tmp_path: Path, prelude: str) -> list[str]:
    source = tmp_path / "only_includes.p4"
    source.write_text(prelude + "#include <v1model.p4>\n")
    program = parse_text(preprocess(str(source)), str(source))
    return [declaration_text(d) for d in program.declarations]


# --- the tests -------------------------------------------------------------------------

def test_headers_declare_what_p4c_declares_by_default(tmp_path):
    assert declarations(tmp_path, "") == CORE + v1model(20180101)


def test_version_20200408_adds_index_types_and_port_typedef(tmp_path):
    assert declarations(tmp_path, "#define V1MODEL_VERSION 20200408\n") == CORE + v1model(20200408)


def test_meter_colour_macros_are_defined(tmp_path):
    source = tmp_path / "colours.p4"
    source.write_text("#include <v1model.p4>\nconst bit<2> G = V1MODEL_METER_COLOR_GREEN;\n"
                      "const bit<2> Y = V1MODEL_METER_COLOR_YELLOW;\nconst bit<2> R = V1MODEL_METER_COLOR_RED;\n")
    consts = parse_text(preprocess(str(source)), str(source)).declarations[-3:]
    assert [(c.name, c.value.value) for c in consts] == [("G", 0), ("Y", 1), ("R", 2)]


PROGRAM = """\
{prelude}#include <core.p4>
#include <v1model.p4>
header h_t {{ bit<8> idx; bit<32> value; }}
struct headers_t {{ h_t h; }}
struct meta_t {{ }}
parser MyParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {{
    state start {{ pkt.extract(hdr.h); transition accept; }}
}}
control NoChecksum(inout headers_t hdr, inout meta_t meta) {{ apply {{ }} }}
control MyIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {{
    {locals}
    apply {{ {apply} }}
}}
control MyEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {{ apply {{ }} }}
control MyDeparser(packet_out pkt, in headers_t hdr) {{ apply {{ pkt.emit(hdr.h); }} }}
V1Switch(MyParser(), NoChecksum(), MyIngress(), MyEgress(), NoChecksum(), MyDeparser()) main;
"""


def write_program(tmp_path: Path, prelude: str = "", locals_: str = "", apply: str = "") -> str:
    path = tmp_path / "prog.p4"
    path.write_text(PROGRAM.format(prelude=prelude, locals=locals_, apply=apply))
    return str(path)


def test_program_without_a_version_may_declare_its_own_port_type(tmp_path):
    # As flowcache does; p4c 1.2.4 accepts it because its v1model.p4 leaves PortId_t free.
    prog = write_program(tmp_path, "typedef bit<9> PortId_t;\n",
                         "action to(PortId_t port) { sm.egress_spec = port; }",
                         "to((PortId_t)hdr.h.idx);")
    assert Switch(compile_file(prog)).process(0, bytes([3, 0, 0, 0, 9])) == [(3, bytes([3, 0, 0, 0, 9]))]


def test_port_type_is_unknown_without_the_version(tmp_path):
    prog = write_program(tmp_path, locals_="action to(PortId_t port) { sm.egress_spec = port; }")
    with pytest.raises(P4Error, match="PortId_t"):
        compile_file(prog)


def test_version_20200408_registers_and_counters_take_their_index_type(tmp_path):
    # The index is a bit<8> header field, the type argument I of register<T, I> and counter<I>.
    prog = write_program(
        tmp_path, "#define V1MODEL_VERSION 20200408\n",
        "register<bit<32>, bit<8>>(256) sums; counter<bit<8>>(256, CounterType.packets) seen;",
        "bit<32> total; sums.read(total, hdr.h.idx); total = total + hdr.h.value; "
        "sums.write(hdr.h.idx, total); hdr.h.value = total; seen.count(hdr.h.idx); "
        "sm.egress_spec = (PortId_t)1;")
    switch = Switch(compile_file(prog))
    assert switch.process(0, bytes([7, 0, 0, 0, 5])) == [(1, bytes([7, 0, 0, 0, 5]))]
    assert switch.process(0, bytes([7, 0, 0, 0, 6])) == [(1, bytes([7, 0, 0, 0, 11]))]
    assert switch.state.registers["MyIngress.sums"].values[7] == 11
    assert switch.state.counters["MyIngress.seen"].packets[7] == 2


# --- tests/p4programs/l2_monitor.p4: the declarations that made flowcache fail ----------

MONITOR_PORT = 5
KNOWN_A, KNOWN_B, STRANGER = "00:00:00:00:0a:01", "00:00:00:00:0b:01", "00:00:00:00:0c:01"


def mac(addr: str) -> int:
    return int(addr.replace(":", ""), 16)


@pytest.fixture
def monitor(make_switch) -> Switch:
    """l2_monitor.p4 with A on port 1 and B on port 2 known, group 1 flooding ports 1-3,
    and clone session 7 sending mirrored copies to the monitor port."""
    sw = make_switch("l2_monitor")
    for addr, port in ((KNOWN_A, 1), (KNOWN_B, 2)):
        sw.state.tables["MyIngress.dmac"].insert(TableEntry((("exact", mac(addr)),), "MyIngress.forward", (port,)))
        sw.state.tables["MyIngress.smac"].insert(TableEntry((("exact", mac(addr)),), "MyIngress.known_source"))
    sw.state.multicast_groups[1] = [(1, 0), (2, 0), (3, 0)]
    sw.state.clone_sessions[7] = CloneSession([(MONITOR_PORT, 0)])
    return sw


def frame(dst: str, src: str) -> bytes:
    return bytes(Ether(dst=dst, src=src, type=0x0800) / Raw(b"l2 monitor payload"))


def test_known_source_to_known_destination_goes_to_its_port_only(monitor):
    assert monitor.process(1, frame(KNOWN_B, KNOWN_A)) == [(2, frame(KNOWN_B, KNOWN_A))]


def test_unknown_destination_floods_all_but_the_ingress_port(monitor):
    sent = frame("00:00:00:00:0d:01", KNOWN_B)
    assert sorted(monitor.process(2, sent)) == [(1, sent), (3, sent)]


def test_unknown_source_is_mirrored_tagged_with_its_ingress_port(monitor):
    sent = frame(KNOWN_A, STRANGER)
    # The tag's port comes from meta.ingress_port, a PortId_t kept by @field_list(1).
    tag = (3).to_bytes(2, "big") + (0x0800).to_bytes(2, "big")
    mirrored = bytes(Ether(dst=KNOWN_A, src=STRANGER, type=0x88B5) / Raw(tag + b"l2 monitor payload"))
    assert sorted(monitor.process(3, sent)) == [(1, sent), (MONITOR_PORT, mirrored)]


def test_frames_are_counted_per_ingress_port(monitor):
    for port in (1, 1, 2):
        monitor.process(port, frame(KNOWN_B if port == 1 else KNOWN_A, KNOWN_A if port == 1 else KNOWN_B))
    counts = monitor.state.counters["MyIngress.frames_in"].packets
    assert (counts[1], counts[2], counts[3]) == (2, 1, 0)


# --- core.p4's static_assert, decided at compile time -----------------------------------

def test_static_assert_that_holds_is_true_and_leaves_nothing_to_run(tmp_path):
    prog = write_program(
        tmp_path, locals_="const bool V1_OK = static_assert(V1MODEL_VERSION >= 20180101, \"v1model too old\");",
        apply="static_assert(V1_OK); sm.egress_spec = 2;")
    assert Switch(compile_file(prog)).process(0, bytes(5)) == [(2, bytes(5))]


@pytest.mark.parametrize(("check", "message"), [
    ("static_assert(V1MODEL_VERSION >= 20200408, \"needs the typed externs\");", "needs the typed externs"),
    ("static_assert(1 == 2);", "1 == 2"),
])
def test_static_assert_that_fails_stops_the_compile_with_its_message(tmp_path, check, message):
    prog = write_program(tmp_path, apply=check)
    with pytest.raises(P4Error, match=f"prog.p4:12:.*static_assert failed: {message}"):
        compile_file(prog)
