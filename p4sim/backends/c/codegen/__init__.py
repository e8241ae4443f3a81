"""The C code generator: one checked program in, one C translation unit out (compiled with
backends/c/runtime into one shared object), with the ids the state mirror needs.

Split by idea as backends/python's: layout (types, extract/emit), expressions, statements
(calls with copy-in/copy-out), externs, blocks (parsers, controls, tables); tied here, where
the pipeline's C struct (pl_t), the program's descriptor and its V1Switch entry points are
written before runtime/v1model_tm.h, the traffic manager, is included.
"""
from __future__ import annotations

from dataclasses import dataclass

from ....errors import P4Error, internal_error
from ....frontend.checker import V1SWITCH_BLOCKS, CheckedProgram
from ....frontend.types import BitType, BoolType, StructType
from ....frontend import ast
from .blocks import BlockGen, walk
from .common import CUnsupported, cid, stype, struct_name, unsupported, width_of
from .expressions import ExprGen
from .externs import ExternGen
from .layout import LayoutGen
from .statements import StmtGen

__all__ = ["CProgram", "CUnsupported", "TableLayout", "generate"]

TIMESTAMPS = ("ingress_global_timestamp", "egress_global_timestamp", "enq_timestamp")
MATCH_KINDS = {"exact": "P4S_MK_EXACT", "lpm": "P4S_MK_LPM", "ternary": "P4S_MK_TERNARY",
               "range": "P4S_MK_RANGE", "optional": "P4S_MK_OPTIONAL"}


@dataclass(frozen=True)
class TableLayout:
    """How a table's (or a value set's) entries cross the C API."""
    id: int
    widths: tuple[int, ...]         # per match field, bits
    kinds: tuple[str, ...]          # per match field, ir.MATCH_KINDS
    nargs: int                      # 64-bit words of action data an entry holds


@dataclass(frozen=True)
class CProgram:
    """The generated C and the C ids of the program's tables, actions and externs."""
    source: str
    tables: dict[str, TableLayout]
    actions: dict[str, int]
    registers: dict[str, int]
    counters: dict[str, int]                # indirect counters
    meters: dict[str, int]                  # indirect meters
    value_sets: dict[str, TableLayout]
    profiles: dict[str, int]
    digests: tuple[tuple[str, tuple[tuple[int, bool, bool], ...]], ...]  # name, (width, signed, bool) per field


def generate(cp: CheckedProgram) -> CProgram:
    """The program as C; CUnsupported (a P4Error) names the first construct it cannot do yet."""
    gen = _Compiler(cp)
    try:
        return gen.run()
    except P4Error:
        raise
    except Exception as err:
        raise internal_error("compiling to C", err, gen.where, cp.info.source_file) from None


def mode_of(kinds: list[str]) -> str:
    """state.TableState's lookup mode for these match kinds."""
    if all(k == "exact" for k in kinds):
        return "P4S_MODE_EXACT"
    if kinds.count("lpm") == 1 and all(k in ("exact", "lpm") for k in kinds):
        return "P4S_MODE_LPM"
    return "P4S_MODE_SCAN"


def words(width: int) -> int:
    return 2 if width > 64 else 1


class _Compiler(LayoutGen, BlockGen, StmtGen, ExternGen, ExprGen):
    def __init__(self, cp: CheckedProgram) -> None:
        super().__init__(cp)
        self.init_layout()
        self.init_externs()
        self.protos: list[str] = []
        self.funcs: list[str] = []
        self.exits: dict[int, bool] = {}
        info = cp.info
        self.table_ids = {n: i for i, n in enumerate(info.tables)}
        self.action_ids = {n: i for i, n in enumerate(info.actions)}
        self.register_ids = {n: i for i, n in enumerate(info.registers)}
        self.counter_ids = {n: i for i, n in enumerate(n for n, c in info.counters.items() if c.direct_table is None)}
        self.meter_ids = {n: i for i, n in enumerate(n for n, m in info.meters.items() if m.direct_table is None)}
        self.vset_ids = {n: i for i, n in enumerate(info.value_sets)}
        self.profile_ids = {n: i for i, n in enumerate(info.action_profiles)}
        self.digest_ids = {n: i for i, n in enumerate(info.digests)}

    # ids the generator parts ask for
    def table_id(self, name: str) -> int:
        return self.table_ids[name]

    def action_id(self, name: str) -> int:
        return self.action_ids[name]

    def register_ref(self, name: str) -> str:
        return f"R{self.register_ids[name]}"

    def counter_id(self, name: str) -> int:
        return self.counter_ids[name]

    def meter_id(self, name: str) -> int:
        return self.meter_ids[name]

    def vset_id(self, name: str) -> int:
        return self.vset_ids[name]

    def profile_id(self, name: str) -> int:
        return self.profile_ids[name]

    def digest_id(self, t: StructType) -> int:
        return self.digest_ids[t.name]

    def run(self) -> CProgram:
        cp = self.cp
        for t in cp.structs:
            self.struct_type(t)
        for f in cp.functions:
            self.where = f.node
            self.function(f)
        for a in cp.top_actions:
            self.where = a.node
            self.action(a, None, [])
        for info in cp.blocks.values():
            self.where = info.decl
            if info.kind == "parser":
                self.parser(info)
            else:
                self.control(info)
        entry = self.entry_points()
        desc, layouts = self.descriptor()
        source = "\n\n".join([
            f"/* Generated by p4sim's C backend from {cp.info.source_file}. */",
            '#include "p4s.h"',
            "typedef struct pl_t pl_t;",
            "\n\n".join(self.types),
            self.pipeline_struct(),
            "\n".join(self.protos),
            "\n\n".join(self.support),
            "\n\n".join(self.funcs),
            entry,
            desc,
            f"#define PIPE_TIME {int(self.reads_time())}",
            '#include "v1model_tm.h"',
        ]) + "\n"
        info = cp.info
        digests = tuple((name, tuple(self.digest_field(ft) for ft in self.digest_struct(name).fields.values()))
                        for name in info.digests)
        return CProgram(source, layouts["tables"], dict(self.action_ids), dict(self.register_ids),
                        dict(self.counter_ids), dict(self.meter_ids), layouts["value_sets"],
                        dict(self.profile_ids), digests)

    def reads_time(self) -> bool:
        """Does the program read standard_metadata's timestamps (a field, or the whole struct
        anywhere but as a call's argument or a member's base)?"""
        sm = self.cp.sm_type
        inside: set[int] = set()
        for node in walk(self.cp.program):
            if isinstance(node, ast.Member) and node.expr.type is sm:
                if node.name in TIMESTAMPS:
                    return True
                inside.add(id(node.expr))
            elif isinstance(node, ast.Call) and node.target is not None and (
                    node.target.kind in ("action", "function", "block_apply")
                    or node.target.name == "mark_to_drop"):
                inside.update(id(a) for a in node.args)
        return any(isinstance(n, (ast.NameRef, ast.Member)) and getattr(n, "type", None) is sm
                   and id(n) not in inside for n in walk(self.cp.program))

    def digest_struct(self, name: str) -> StructType:
        return next(t for t in self.cp.structs if t.name == name)

    @staticmethod
    def digest_field(t) -> tuple[int, bool, bool]:
        return (width_of(t), isinstance(t, BitType) and t.signed, isinstance(t, BoolType))

    def pipeline_struct(self) -> str:
        members = ["p4s_pipe pipe;", "hdr_t phv;"]
        members += [f"{elem} {field};" for elem, field in self.scratch.items()]
        for name, i in self.register_ids.items():
            r = self.cp.info.registers[name]
            members.append(f"{stype(BitType(r.bitwidth))} *R{i};")
        typedefs = (f"typedef {struct_name(self.cp.headers_type)} hdr_t;\n"
                    f"typedef {struct_name(self.cp.meta_type)} meta_t;\n"
                    f"typedef {struct_name(self.cp.sm_type)} sm_t;")
        return typedefs + "\n\nstruct pl_t {\n    " + "\n    ".join(members) + "\n};"

    def entry_points(self) -> str:
        cp = self.cp
        names = {role: cid(cp.blocks[cp.pipeline[role]].decl.name) for role in V1SWITCH_BLOCKS}
        inv = self.invalidate_fn(cp.headers_type)
        lines = [
            "static void PIPE_parser(pl_t *P, p4s_pkt *pkt, hdr_t *hdr, meta_t *meta, sm_t *sm) {",
            f"    P_{names['parser']}(P, pkt, hdr, meta, sm);", "}",
            "static void PIPE_verify(pl_t *P, hdr_t *hdr, meta_t *meta) {",
            f"    C_{names['verify_checksum']}(P, hdr, meta);", "}",
            "static void PIPE_ingress(pl_t *P, hdr_t *hdr, meta_t *meta, sm_t *sm) {",
            f"    C_{names['ingress']}(P, hdr, meta, sm);", "}",
            "static void PIPE_egress(pl_t *P, hdr_t *hdr, meta_t *meta, sm_t *sm) {",
            f"    C_{names['egress']}(P, hdr, meta, sm);", "}",
            "static void PIPE_compute(pl_t *P, hdr_t *hdr, meta_t *meta) {",
            f"    C_{names['compute_checksum']}(P, hdr, meta);", "}",
            "static void PIPE_deparser(pl_t *P, hdr_t *hdr) {",
            f"    C_{names['deparser']}(P, hdr);", "}",
            "static void PIPE_inv_hdr(hdr_t *hdr) {",
            f"    {inv + '(hdr);' if inv else '(void)hdr;'}", "}",
        ]
        # The metadata fields a clone, resubmit or recirculate keeps: a @field_list, or the
        # fields an old-style call listed.
        lists = {i: names_ for i, names_ in cp.field_lists.items()}
        lists.update({i: list(names_) for names_, i in self.synthetic_lists.items()})
        lines += ["static void PIPE_restore(int64_t fl, meta_t *dst, const meta_t *src) {", "    switch (fl) {"]
        for i, fields in sorted(lists.items()):
            lines.append(f"    case {i}:")
            lines += [f"        dst->{cid(f)} = src->{cid(f)};" for f in fields]
            lines.append("        break;")
        lines += ["    default:", "        break;", "    }", "}"]
        lines += ["static void PIPE_init(pl_t *P) {"]
        for name, i in self.register_ids.items():
            r = self.cp.info.registers[name]
            lines.append(f"    P->R{i} = ({stype(BitType(r.bitwidth))} *)P->pipe.registers[{i}].cells;")
        lines += ["    (void)P;", "}"]
        return "\n".join(lines)

    def descriptor(self) -> tuple[str, dict]:
        info = self.cp.info
        lines: list[str] = []
        tables, layouts = [], {}
        for name, t in info.tables.items():
            i = self.table_ids[name]
            kinds = [f.match_kind for f in t.match_fields]
            widths = [f.bitwidth for f in t.match_fields]
            for w in widths:
                if w > 128:
                    raise unsupported(None, f"table {name}: a key wider than 128 bits")
            nargs = max((sum(words(p.bitwidth) for p in info.actions[a].params)
                         for a in (r.name for r in t.actions)), default=0)
            lines += self.kind_arrays(f"T{i}", kinds, widths)
            tables.append(f"{{.nfields = {len(kinds)}, .nkw = {sum(words(w) for w in widths)}, .nargs = {nargs}, "
                          f".mode = {mode_of(kinds)}, .lpm_field = {kinds.index('lpm') if 'lpm' in kinds else 0}, "
                          f".kinds = T{i}_kinds, .widths = T{i}_widths, "
                          f".default_action = {self.action_ids.get(t.default_action, -1)}}}")
            layouts[name] = TableLayout(i, tuple(widths), tuple(kinds), nargs)
        vsets, vlayouts = [], {}
        for name, v in info.value_sets.items():
            i = self.vset_ids[name]
            kinds = [f.match_kind for f in v.match_fields]
            widths = [f.bitwidth for f in v.match_fields]
            lines += self.kind_arrays(f"V{i}", kinds, widths)
            vsets.append(f"{{.nfields = {len(kinds)}, .nkw = {sum(words(w) for w in widths)}, .nargs = 0, "
                         f".mode = P4S_MODE_SCAN, .lpm_field = 0, .kinds = V{i}_kinds, .widths = V{i}_widths, "
                         f".default_action = -1}}")
            vlayouts[name] = TableLayout(i, tuple(widths), tuple(kinds), 0)
        regs = list(info.registers.values())
        counters = [info.counters[n] for n in self.counter_ids]
        meters = [info.meters[n] for n in self.meter_ids]

        def array(ctype: str, name: str, values: list) -> None:
            lines.append(f"static const {ctype} {name}[] = {{{', '.join(map(str, values + [0]))}}};")

        array("uint32_t", "REG_SIZES", [r.size for r in regs])
        array("uint32_t", "REG_WIDTHS", [r.bitwidth for r in regs])
        array("uint32_t", "COUNTER_SIZES", [c.size for c in counters])
        array("uint32_t", "METER_SIZES", [m.size for m in meters])
        array("uint8_t", "METER_BYTES", [int(m.unit == "BYTES") for m in meters])
        lines.append("static const p4s_table_desc TABLES[] = {" + ", ".join(tables + ["{0}"]) + "};")
        lines.append("static const p4s_table_desc VSETS[] = {" + ", ".join(vsets + ["{0}"]) + "};")
        lines.append(
            "static const p4s_pipe_desc PIPE_DESC = {"
            f".ntables = {len(tables)}, .nregisters = {len(regs)}, .ncounters = {len(counters)}, "
            f".nmeters = {len(meters)}, .nvsets = {len(vsets)}, .nprofiles = {len(self.profile_ids)}, "
            ".tables = TABLES, .reg_sizes = REG_SIZES, .reg_widths = REG_WIDTHS, .counter_sizes = COUNTER_SIZES, "
            ".meter_sizes = METER_SIZES, .meter_bytes = METER_BYTES, .vsets = VSETS, .vset_sizes = NULL, "
            ".meta_size = sizeof(meta_t)};")
        return "\n".join(lines), {"tables": layouts, "value_sets": vlayouts}

    @staticmethod
    def kind_arrays(prefix: str, kinds: list[str], widths: list[int]) -> list[str]:
        return [f"static const uint8_t {prefix}_kinds[] = {{{', '.join([MATCH_KINDS[k] for k in kinds] + ['0'])}}};",
                f"static const uint16_t {prefix}_widths[] = {{{', '.join([str(w) for w in widths] + ['0'])}}};"]

