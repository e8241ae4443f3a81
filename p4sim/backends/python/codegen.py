"""The code generator: one checked program in, one Python module's source out.

Headers and structs become __slots__ classes, parser states and controls become
functions with P4's bit-width arithmetic inlined; tables call state.TableState.lookup.
The generated module's free names (state objects, hash functions, the per-packet
context PK) are bound by pipeline.Switch when it loads the program.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import P4Error, internal_error
from ...frontend.checker import V1SWITCH_BLOCKS, CheckedProgram
from .blocks import BlockGen
from .common import Ctx, attr, cls_name, py_ident
from .expressions import ExprGen
from .externs import ExternGen
from .layout import LayoutGen
from .statements import StmtGen

_ENTRY = {"parser": "PARSER", "verify_checksum": "VERIFY", "ingress": "INGRESS", "egress": "EGRESS",
          "compute_checksum": "COMPUTE", "deparser": "DEPARSER"}


@dataclass
class CompiledCode:
    """The generated Python module and what the pipeline must bind before exec."""
    source: str
    bindings: dict[str, tuple[str, str]]   # module name -> (kind of state: "table", "register", ..., P4Info name)
    field_lists: dict[int, list[str]]  # index -> metadata attribute names
    sm_fields: list[str]


def compile_program(cp: CheckedProgram, trace: bool = False, optimize: bool = True) -> CompiledCode:
    gen = _Compiler(cp, trace, optimize)
    try:
        return gen.run()
    except P4Error:
        raise
    except Exception as err:
        raise internal_error("compiling", err, gen.where, cp.info.source_file) from None


class _Compiler(LayoutGen, BlockGen, StmtGen, ExternGen, ExprGen):
    def run(self) -> CompiledCode:
        cp = self.cp
        for t in cp.structs:
            self.struct_class(t)
        for t in cp.structs:
            if t.kind == "header":
                self.header_io(t)
        for f in cp.functions:
            self.function(f)
        for a in cp.top_actions:
            self.action(a, Ctx("action"), "")
        for name, info in cp.blocks.items():
            if info.kind == "parser":
                self.parser(info)
            else:
                self.control(info)
        for role in V1SWITCH_BLOCKS:
            decl = cp.blocks[cp.pipeline[role]].decl
            empty = role != "parser" and not decl.body.stmts and not cp.blocks[decl.name].frame_vars
            # An empty control is not called at all: None tells the pipeline to skip it.
            self.emit(f"{_ENTRY[role]} = {'None' if empty else ('P_' if role == 'parser' else 'C_') + py_ident(decl.name)}")
        self.emit(f"NEW_HDR = {cls_name(cp.headers_type)}")
        self.emit(f"NEW_META = {cls_name(cp.meta_type)}")
        self.emit(f"NEW_SM = {cls_name(cp.sm_type)}")
        info = cp.info
        # O_ objects are the program's extern instances, TS_ its tables.
        bindings = {f"TS_{py_ident(n)}": ("table", n) for n in info.tables}
        bindings.update({py_ident(f"O_{n}"): ("register", n) for n in info.registers})
        bindings.update({py_ident(f"O_{n}"): ("counter", n) for n, c in info.counters.items() if c.direct_table is None})
        bindings.update({py_ident(f"O_{n}"): ("meter", n) for n, m in info.meters.items() if m.direct_table is None})
        bindings.update({py_ident(f"VS_{n}"): ("value_set", n) for n in info.value_sets})
        bindings.update({f"AP_{py_ident(n)}": ("action_profile", n) for n in info.action_profiles})
        return CompiledCode("\n".join(self.lines) + "\n", bindings,
                            {i: [attr(n) for n in names] for i, names in cp.field_lists.items()},
                            [attr(n) for n in cp.sm_type.fields])
