"""Name, type and width checking of a parsed P4 program; builds ir.ProgramInfo.

Annotates the AST in place (every Expr gets .type, names get .decl, calls get
.target) so the compiler never resolves a name again. Errors are P4Error.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import ir
from ..errors import P4Error, internal_error
from . import ast
from .effects import order_side_effects
from .types import (ActionRunType, AnyType, ApplyResultType, BitType, BlockType, BoolType,
                    EnumType, ErrorType, ExternType, IntType, MatchKindType, StackType,
                    StringType, StructType, TableType, TupleType, Type, VarbitType, VoidType,
                    field_width, is_header)

BOOL, INT, VOID, ERROR, STRING = BoolType(), IntType(), VoidType(), ErrorType(), StringType()
U32 = BitType(32)
# BMv2's numbering of the core errors; a program's own errors follow.
CORE_ERRORS = ("NoError", "PacketTooShort", "NoMatch", "StackOutOfBounds", "HeaderTooShort",
               "ParserTimeout", "ParserInvalidArgument")
V1SWITCH_BLOCKS = ("parser", "verify_checksum", "ingress", "egress", "compute_checksum", "deparser")


@dataclass(eq=False)
class Sym:
    """What a name stands for."""
    kind: str        # const var param type action table instance extern_func function match_kind block
    name: str
    type: Type | None = None
    node: Any = None
    value: Any = None          # compile-time value of a const
    qname: str = ""            # name in P4Info (actions, tables, instances)
    pyname: str = ""           # name in the generated Python
    direction: str = ""        # for params
    frame: bool = False        # a control/parser-level variable, kept on the locals frame


@dataclass(frozen=True)
class Target:
    """What a Call calls, for the compiler."""
    kind: str        # action function extern_func method header_method stack_method table_apply block_apply
    name: str        # method or function name
    sym: Sym | None = None
    base: ast.Expr | None = None


@dataclass(eq=False)
class BlockInfo:
    """A parser or control declaration with its checked locals."""
    decl: Any
    kind: str                                    # "parser" or "control"
    frame_vars: list[Sym] = field(default_factory=list)
    actions: list[Sym] = field(default_factory=list)
    tables: list[Sym] = field(default_factory=list)
    instances: list[Sym] = field(default_factory=list)


@dataclass(eq=False)
class CheckedProgram:
    program: ast.Program
    info: ir.ProgramInfo
    structs: list[StructType]
    errors: dict[str, int]
    blocks: dict[str, BlockInfo]                 # by declaration name
    pipeline: dict[str, str]                     # V1SWITCH_BLOCKS role -> declaration name
    headers_type: StructType
    meta_type: StructType
    sm_type: StructType
    top_actions: list[Sym]
    functions: list[Sym]
    field_lists: dict[int, list[str]]            # @field_list index -> meta field names


class Scope:
    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.names: dict[str, Sym] = {}

    def lookup(self, name: str) -> Sym | None:
        s: Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def define(self, sym: Sym, pos: ast.Pos) -> Sym:
        if sym.name in self.names and self.names[sym.name].kind not in ("extern_func",):
            raise P4Error(f"`{sym.name}` is declared twice in the same scope", pos.file, pos.line, pos.column)
        self.names[sym.name] = sym
        return sym


def error_at(node: ast.Node, message: str) -> P4Error:
    p = node.pos
    return P4Error(message, p.file, p.line, p.column)


def annotation_text(a: ast.Annotation) -> str:
    if not a.args:
        return f"@{a.name}"
    return f"@{a.name}(" + ", ".join(expr_text(x) for x in a.args) + ")"


def annotation_value(annos: list[ast.Annotation], name: str) -> Any:
    """The first argument's literal value of annotation `name`, True if it has none, else None."""
    for a in annos:
        if a.name == name:
            if not a.args:
                return True
            x = a.args[0]
            return x.value if isinstance(x, (ast.StrLit, ast.IntLit, ast.BoolLit)) else expr_text(x)
    return None


def expr_text(e: Any) -> str:
    """Source-like text of an expression, as p4c names table keys."""
    if isinstance(e, ast.NameRef):
        return e.name
    if isinstance(e, ast.Member):
        return f"{expr_text(e.expr)}.{e.name}"
    if isinstance(e, ast.TypeMember):
        return f"{e.type_name}.{e.name}"
    if isinstance(e, ast.Index):
        return f"{expr_text(e.expr)}[{expr_text(e.index)}]"
    if isinstance(e, ast.Slice):
        return f"{expr_text(e.expr)}[{expr_text(e.hi)}:{expr_text(e.lo)}]"
    if isinstance(e, ast.Call):
        return f"{expr_text(e.func)}(" + ", ".join(expr_text(a) for a in e.args) + ")"
    if isinstance(e, ast.IntLit):
        return str(e.value)
    if isinstance(e, ast.StrLit):
        return '"' + e.value + '"'
    if isinstance(e, ast.BoolLit):
        return "true" if e.value else "false"
    if isinstance(e, ast.Binary):
        return f"{expr_text(e.left)} {e.op} {expr_text(e.right)}"
    if isinstance(e, ast.Unary):
        return f"{e.op}{expr_text(e.expr)}"
    if isinstance(e, ast.Cast):
        return f"({expr_text(e.type_ref)}){expr_text(e.expr)}"
    if isinstance(e, ast.SimpleTypeRef):
        return e.kind
    if isinstance(e, ast.BitTypeRef):
        return f"{'int' if e.signed else 'bit'}<{expr_text(e.width)}>" if e.width is not None else "bit"
    if isinstance(e, ast.NamedTypeRef):
        return e.name
    return type(e).__name__


def key_name(e: ast.Expr) -> str:
    """A table key as p4c names it in P4Info: `h.isValid()` is `h.$valid$`."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Member) and e.func.name == "isValid" and not e.args:
        return f"{expr_text(e.func.expr)}.$valid$"
    return expr_text(e)


def serializable_enum(t: Type) -> ir.SerializableEnum | None:
    """The P4Info description of `t` if it is a serializable enum, else None."""
    if isinstance(t, EnumType) and t.underlying is not None:
        return ir.SerializableEnum(t.name, t.underlying.width, tuple(t.members.items()))
    return None


def _annos(annos: list[ast.Annotation]) -> tuple[str, ...]:
    return tuple(annotation_text(a) for a in annos if a.name not in ("name",))


class Checker:
    """Walks declarations in order, as P4 requires declaration before use."""

    def __init__(self, program: ast.Program) -> None:
        self.program = program
        self.top = Scope()
        self.info = ir.ProgramInfo(program.source_file)
        self.structs: list[StructType] = []
        self.errors: dict[str, int] = {}
        self.blocks: dict[str, BlockInfo] = {}
        self.top_actions: list[Sym] = []
        self.functions: list[Sym] = []
        self.main: ast.Instantiation | None = None
        self.pristine: dict[str, Any] = {}          # unchecked copies, for sub-instances
        self.instantiated = _instantiated_types(program)
        self.sub_blocks: set[str] = set()
        self._block: BlockInfo | None = None       # parser/control being checked
        self._in_parser = False
        self._in_action = False
        self._loops = 0                             # for loops around the statement being checked
        self._ret_type: Type = VOID                 # of the function being checked
        self._uid = 0
        self._action_uses: list[tuple[str, str]] = []   # (block, action) as tables and apply name them
        self.where: ast.Node | None = None          # what is being checked, for internal errors
        for name in ("exact", "ternary", "lpm"):
            self.top.define(Sym("match_kind", name, MatchKindType()), ast.NOWHERE)

    def fresh(self, base: str) -> str:
        self._uid += 1
        return f"{base}_{self._uid}"

    # ---- entry point -----------------------------------------------------
    def check(self) -> CheckedProgram:
        for d in self.program.declarations:
            self.declaration(d)
        if self.main is None:
            raise P4Error("no `main` package instantiation (V1Switch(...) main;)",
                          self.program.source_file, 1, 1)
        pipeline = self.pipeline(self.main)
        self.drop_unused_blocks(set(pipeline.values()) | self.sub_blocks)
        self.order_like_p4c(pipeline)
        parser = self.blocks[pipeline["parser"]].decl
        if len(parser.params) != 4:
            raise error_at(parser, "the V1Switch parser takes (packet_in, out H, inout M, inout standard_metadata_t)")
        headers_t, meta_t, sm_t = (p.type for p in parser.params[1:])
        for role, t in (("headers", headers_t), ("metadata", meta_t), ("standard metadata", sm_t)):
            if not isinstance(t, StructType) or t.kind != "struct":
                raise error_at(parser, f"the parser's {role} parameter must be a struct, got {t}")
        field_lists: dict[int, list[str]] = {}
        for fname, annos in meta_t.field_annotations.items():
            for a in annos:
                if a.startswith("@field_list("):
                    for idx in a[len("@field_list("):-1].split(","):
                        field_lists.setdefault(self.field_list_index(idx.strip(), parser), []).append(fname)
        return CheckedProgram(self.program, self.info, self.structs, self.errors, self.blocks,
                              pipeline, headers_t, meta_t, sm_t, self.top_actions, self.functions,
                              field_lists)

    def field_list_index(self, text: str, where: ast.Node) -> int:
        """A @field_list argument: an integer literal or, as p4c allows, a global constant."""
        sym = self.top.lookup(text)
        if sym is not None and sym.kind == "const" and isinstance(sym.value, int):
            return sym.value
        try:
            return int(text, 0)
        except ValueError:
            raise error_at(where, f"@field_list index {text!r} is not an integer constant") from None

    def drop_unused_blocks(self, used: set[str]) -> None:
        """Like p4c, a parser or control nobody instantiates contributes nothing to P4Info."""
        for name in [n for n in self.blocks if n not in used]:
            del self.blocks[name]
            for table in (self.info.tables, self.info.actions, self.info.registers,
                          self.info.counters, self.info.meters):
                for key in [k for k in table if k.startswith(name + ".")]:
                    del table[key]

    def order_like_p4c(self, pipeline: dict[str, str]) -> None:
        """Order what P4Info lists as p4c does: control by control in V1Switch order, each
        control's in declaration order. A control's actions come after the top-level actions it
        uses (p4c copies those into it), and a top-level action is listed once."""
        top = {s.qname for s in self.top_actions}
        rank: dict[str, int] = {}
        actions: dict[str, ir.ActionInfo] = {}
        for i, role in enumerate(V1SWITCH_BLOCKS[1:]):
            block = self.blocks[pipeline[role]].decl.name
            for owner, qname in self._action_uses:
                if qname in top and (owner == block or owner.startswith(block + ".")):
                    actions.setdefault(qname, self.info.actions[qname])
            for qname in self.declared_names(self.blocks[block]):
                rank.setdefault(qname, i)
                if qname in self.info.actions:
                    actions.setdefault(qname, self.info.actions[qname])
        self.info.actions = {**actions, **self.info.actions}
        for kind in ("tables", "registers", "counters", "meters"):
            entries = getattr(self.info, kind)
            setattr(self.info, kind, dict(sorted(entries.items(), key=lambda kv: rank.get(kv[0], -1))))

    def declared_names(self, block: BlockInfo) -> list[str]:
        """Qualified names of a control's locals in order, a sub-control's in place of its instance."""
        names = []
        for d in block.decl.locals:
            qname = self.qualified(block.decl.name, d.name, getattr(d, "annotations", []))
            sub = self.blocks.get(qname) if isinstance(d, ast.Instantiation) else None
            names.extend(self.declared_names(sub) if sub is not None else [qname])
        return names

    def pipeline(self, main: ast.Instantiation) -> dict[str, str]:
        if not (isinstance(main.type_ref, ast.NamedTypeRef) and main.type_ref.name == "V1Switch"):
            raise error_at(main, "p4sim runs the v1model architecture: main must be a V1Switch")
        if len(main.args) != 6:
            raise error_at(main, f"V1Switch takes 6 blocks, got {len(main.args)}")
        roles = {}
        for role, arg in zip(V1SWITCH_BLOCKS, main.args):
            if not isinstance(arg, ast.Constructor) or arg.type_ref.name not in self.pristine:
                raise error_at(arg, f"V1Switch's {role} must be a parser or control instance like `MyParser()`")
            decl = self.pristine[arg.type_ref.name]
            if decl.ctor_params or arg.args or decl.type_params:
                if arg.type_ref.name in self.blocks:
                    raise error_at(arg, f"{decl.name} is instantiated twice with constructor arguments")
                self.instantiate_block(decl, decl.name, self.ctor_values(arg, decl, arg.args, self.top),
                                       self.type_values(arg, decl, arg.type_ref, self.top))
            want = "parser" if role == "parser" else "control"
            if self.blocks[arg.type_ref.name].kind != want:
                raise error_at(arg, f"V1Switch's {role} must be a {want}")
            roles[role] = arg.type_ref.name
        return roles

    # ---- declarations ----------------------------------------------------
    def declaration(self, d: ast.Node) -> None:
        self.where = d
        method = getattr(self, "decl_" + type(d).__name__, None)
        if method is None:
            raise error_at(d, f"unsupported declaration: {type(d).__name__}")
        method(d)

    def decl_HeaderDecl(self, d: ast.HeaderDecl) -> None:
        t = StructType(d.kind, d.name, annotations=tuple(annotation_text(a) for a in d.annotations))
        self.top.define(Sym("type", d.name, t, d), d.pos)
        for f in d.fields:
            ft = self.resolve_type(f.type_ref, self.top)
            if f.name in t.fields:
                raise error_at(f, f"field `{f.name}` declared twice in {d.name}")
            if d.kind == "header" and not (field_width(ft) or isinstance(ft, VarbitType)):
                raise error_at(f, f"header field `{f.name}` must be bit<W>, int<W>, varbit<W>, bool "
                                  f"or a serializable enum, got {ft}")
            if isinstance(ft, VarbitType) and t.varbit is not None:
                raise error_at(f, f"header {d.name} has two varbit fields")
            if d.kind == "header_union" and not is_header(ft):
                raise error_at(f, f"header_union member `{f.name}` must be a header")
            t.fields[f.name] = ft
            t.field_annotations[f.name] = tuple(annotation_text(a) for a in f.annotations)
        if d.kind == "header" and t.width % 8:
            raise error_at(d, f"header {d.name} is {t.width} bits; headers must be a whole number of bytes")
        self.structs.append(t)
        ch = annotation_value(d.annotations, "controller_header")
        if ch:
            fields = tuple(ir.Param(n, field_width(ft), enum=serializable_enum(ft)) for n, ft in t.fields.items())
            self.info.controller_headers[ch] = ir.ControllerHeader(ch, d.name, fields)

    def decl_TypedefDecl(self, d: ast.TypedefDecl) -> None:
        self.top.define(Sym("type", d.name, self.resolve_type(d.type_ref, self.top), d), d.pos)

    def decl_EnumDecl(self, d: ast.EnumDecl) -> None:
        underlying = None
        members: dict[str, int] = {}
        if d.width is not None:
            underlying = BitType(self.const_int(d.width, self.top))
        for i, (name, value) in enumerate(d.members):
            if underlying is not None:
                if value is None:
                    raise error_at(d, f"member {name} of serializable enum {d.name} needs a value")
                members[name] = self.const_int(value, self.top) & ((1 << underlying.width) - 1)
            else:
                members[name] = i
        self.top.define(Sym("type", d.name, EnumType(d.name, members, underlying), d), d.pos)

    def decl_ErrorDecl(self, d: ast.ErrorDecl) -> None:
        for m in d.members:
            if m not in self.errors:
                self.errors[m] = len(self.errors)

    def decl_MatchKindDecl(self, d: ast.MatchKindDecl) -> None:
        for m in d.members:
            self.top.names[m] = Sym("match_kind", m, MatchKindType())

    def decl_ConstDecl(self, d: ast.ConstDecl, scope: Scope | None = None) -> Sym:
        scope = scope or self.top
        t = self.resolve_type(d.type_ref, scope)
        self.expr(d.value, scope, t)
        self.assignable(t, d.value, d.value)
        value = self.const_value(d.value)
        if value is None:
            raise error_at(d.value, f"the value of const {d.name} is not a compile-time constant")
        if isinstance(t, BitType):
            value = _wrap(value, t)
        d.type = t
        return scope.define(Sym("const", d.name, t, d, value=value), d.pos)

    def decl_ExternDecl(self, d: ast.ExternDecl) -> None:
        self.top.define(Sym("type", d.name, ExternType(d), d), d.pos)
        inner = Scope(self.top)
        for tp in d.type_params:
            inner.names[tp] = Sym("type", tp, AnyType(tp))
        for m in d.methods:
            self.method_types(m, inner)

    def method_types(self, m: ast.MethodDecl, scope: Scope) -> None:
        inner = Scope(scope)
        for tp in m.type_params:
            inner.names[tp] = Sym("type", tp, AnyType(tp))
        for p in m.params:
            p.type = self.resolve_type(p.type_ref, inner)
        m.ret_type = VOID if m.ret is None else self.resolve_type(m.ret, inner)

    def decl_MethodDecl(self, d: ast.MethodDecl) -> None:
        self.method_types(d, self.top)
        old = self.top.names.get(d.name)
        if old is not None and old.kind == "extern_func":
            old.node.append(d)
        else:
            self.top.define(Sym("extern_func", d.name, None, [d]), d.pos)

    def decl_BlockTypeDecl(self, d: ast.BlockTypeDecl) -> None:
        self.top.define(Sym("type", d.name, AnyType(d.name), d), d.pos)

    def decl_Instantiation(self, d: ast.Instantiation) -> None:
        if d.name == "main":
            self.main = d
            return
        self.instance(d, self.top, "")

    def decl_ActionDecl(self, d: ast.ActionDecl) -> None:
        sym = self.action(d, self.top, "")
        self.top_actions.append(sym)

    def decl_FunctionDecl(self, d: ast.FunctionDecl) -> None:
        if d.type_params:            # generic: checked per list of type arguments, at its calls
            self.top.define(Sym("generic_function", d.name, None, copy.deepcopy(d), value={}), d.pos)
            return
        sym = self.top.define(Sym("function", d.name, None, d, pyname=f"F_{d.name}"), d.pos)
        self.check_function(d, self.top, sym)

    def check_function(self, d: ast.FunctionDecl, types: Scope, sym: Sym) -> None:
        scope = Scope(self.top)
        d.ret_type = sym.type = self.resolve_type(d.ret, types)
        for p in d.params:
            p.type = self.resolve_type(p.type_ref, types)
            p.decl_sym = scope.define(Sym("param", p.name, p.type, p, pyname=self.fresh("p_" + p.name),
                                          direction=p.direction), p.pos)
        saved = (self._ret_type, self._block, self._in_parser, self._in_action)
        self._ret_type, self._block, self._in_parser, self._in_action = d.ret_type, None, False, False
        self.block(d.body, scope)
        self._ret_type, self._block, self._in_parser, self._in_action = saved
        self.functions.append(sym)

    def instantiate_function(self, e: ast.Call, generic: Sym, scope: Scope) -> Sym:
        """The instance of a generic function for this call's type arguments (given, or
        taken from the arguments whose parameter type is a type parameter)."""
        d: ast.FunctionDecl = generic.node
        bound: dict[str, Type] = {}
        for tp, ta in zip(d.type_params, e.type_args):
            bound[tp] = self.resolve_type(ta, scope)
        for a, p in zip(e.args, d.params):
            if isinstance(p.type_ref, ast.NamedTypeRef) and p.type_ref.name in d.type_params \
                    and p.type_ref.name not in bound and not isinstance(a, ast.DontCare):
                t = self.expr(a, scope)
                if isinstance(t, (IntType, TupleType)):
                    raise error_at(a, f"cannot tell the type {p.type_ref.name} of `{d.name}` from this argument; "
                                      "give the type arguments")
                bound[p.type_ref.name] = t
        missing = [tp for tp in d.type_params if tp not in bound]
        if missing:
            raise error_at(e, f"cannot tell the type {', '.join(missing)} of `{d.name}`; give the type arguments")
        key = tuple(str(bound[tp]) for tp in d.type_params)
        if key not in generic.value:
            inst = copy.deepcopy(d)
            types = Scope(self.top)
            for tp in d.type_params:
                types.names[tp] = Sym("type", tp, bound[tp])
            sym = Sym("function", f"{d.name}<{', '.join(key)}>", None, inst,
                      pyname=f"F_{_py_ident(d.name)}_{len(generic.value)}")
            generic.value[key] = sym
            self.check_function(inst, types, sym)
        return generic.value[key]

    def decl_ParserDecl(self, d: ast.ParserDecl, sub: bool = False) -> None:
        declared = self.declare_block(d, "parser", sub)
        if declared is None:
            return
        info, scope = declared
        self._block, self._in_parser = info, True
        states = {"accept", "reject"}
        for st in d.states:
            if st.name in states:
                raise error_at(st, f"parser state `{st.name}` declared twice")
            states.add(st.name)
        if "start" not in states:
            raise error_at(d, f"parser {d.name} has no `start` state")
        for local in d.locals:
            self.local_decl(local, scope, d.name)
        for st in d.states:
            sc = Scope(scope)
            for s in st.stmts:
                self.stmt(s, sc)
            tr = st.transition
            for name in [tr.next_state] + [c.next_state for c in tr.cases]:
                if name is not None and name not in states:
                    raise error_at(tr, f"unknown parser state `{name}`")
            if tr.select is not None:
                for e in tr.select:
                    self.expr(e, sc)
                for case in tr.cases:
                    self.keyset(case.keyset, [e.type for e in tr.select], sc)
        self._block, self._in_parser = None, False

    def decl_ControlDecl(self, d: ast.ControlDecl, sub: bool = False) -> None:
        declared = self.declare_block(d, "control", sub)
        if declared is None:
            return
        info, scope = declared
        self._block = info
        for local in d.locals:
            self.local_decl(local, scope, d.name)
        self._ret_type = VOID
        self.block(d.body, scope)
        self._block = None

    def declare_block(self, d: Any, kind: str, sub: bool) -> tuple[BlockInfo, Scope] | None:
        """Register a parser or control; None when it waits for its constructor arguments
        (it is then checked per instance, once they are known)."""
        if not sub:
            # Checking annotates d in place: instances made later check an unchecked copy. A
            # block checked here that nothing can instantiate again needs none (nor its cost).
            again = d.ctor_params or d.type_params or d.name in self.instantiated
            self.pristine[d.name] = copy.deepcopy(d) if again else d
            self.top.define(Sym("type", d.name, BlockType(d), d), d.pos)
            if d.ctor_params or d.type_params:
                return None
        info = BlockInfo(d, kind)
        self.blocks[d.name] = info
        return info, self.block_params(d, info)

    def block_params(self, d: Any, info: BlockInfo) -> Scope:
        scope = Scope(self.top)
        for tp, t in zip(d.type_params, d.type_values or []):
            scope.names[tp] = Sym("type", tp, t)
        for p in d.params:
            p.type = self.resolve_type(p.type_ref, scope)
            p.decl_sym = scope.define(Sym("param", p.name, p.type, p, pyname="b_" + _py_ident(p.name),
                                          direction=p.direction), p.pos)
        for p, v in zip(d.ctor_params, d.ctor_values or []):
            p.type = self.resolve_type(p.type_ref, scope)
            scope.define(Sym("const", p.name, p.type, p, value=v), p.pos)
        return scope

    def ctor_values(self, d: ast.Node, decl: Any, args: list, scope: Scope) -> list:
        """The compile-time values of a parser's or control's constructor arguments."""
        if len(args) != len(decl.ctor_params):
            raise error_at(d, f"{decl.name} takes {len(decl.ctor_params)} constructor arguments, got {len(args)}")
        values = []
        for a, p in zip(args, decl.ctor_params):
            t = self.resolve_type(p.type_ref, self.top)
            self.expr(a, scope, t)
            self.assignable(t, a, a)
            v = self.const_value(a)
            if v is None:
                raise error_at(a, "constructor arguments must be compile-time constants")
            values.append(_wrap(int(v), t) if isinstance(t, BitType) else v)
        return values

    def type_values(self, where: ast.Node, decl: Any, type_ref: ast.TypeRef, scope: Scope) -> list:
        """The type arguments of a generic parser's or control's instance (`Sub<h_t>() s;`)."""
        args = type_ref.args if isinstance(type_ref, ast.NamedTypeRef) else []
        if len(args) != len(decl.type_params):
            raise error_at(where, f"{decl.name} takes {len(decl.type_params)} type arguments, got {len(args)}"
                           + (" (p4sim does not infer them)" if not args else ""))
        return [self.resolve_type(a, scope) for a in args]

    def instantiate_block(self, decl: Any, name: str, values: list, types: list | None = None) -> Any:
        """Check a fresh copy of a parser or control under an instance name."""
        clone = copy.deepcopy(self.pristine[decl.name])
        clone.name, clone.ctor_values, clone.type_values = name, values, types
        saved = (self._block, self._in_parser, self._in_action, self._ret_type)
        if isinstance(clone, ast.ParserDecl):
            self.decl_ParserDecl(clone, sub=True)
        else:
            self.decl_ControlDecl(clone, sub=True)
        self._block, self._in_parser, self._in_action, self._ret_type = saved
        return clone

    def local_decl(self, d: ast.Node, scope: Scope, owner: str) -> None:
        info = self._block
        if isinstance(d, ast.ConstDecl):
            self.decl_ConstDecl(d, scope)
        elif isinstance(d, ast.VarDecl):
            sym = self.var_decl(d, scope)
            sym.frame = True
            info.frame_vars.append(sym)
        elif isinstance(d, ast.Instantiation):
            info.instances.append(self.instance(d, scope, owner))
        elif isinstance(d, ast.ActionDecl):
            info.actions.append(self.action(d, scope, owner))
        elif isinstance(d, ast.TableDecl):
            info.tables.append(self.table(d, scope, owner))
        elif isinstance(d, ast.ValueSetDecl):
            self.value_set(d, scope, owner)
        else:
            raise error_at(d, f"unsupported declaration in {owner}: {type(d).__name__}")

    def qualified(self, owner: str, name: str, annos: list[ast.Annotation]) -> str:
        given = annotation_value(annos, "name")
        if isinstance(given, str):
            if given.startswith("."):
                return given[1:]
            name = given
        return f"{owner}.{name}" if owner else name

    # ---- instances, actions, tables -----------------------------------------
    def instance(self, d: ast.Instantiation, scope: Scope, owner: str) -> Sym:
        t = self.resolve_type(d.type_ref, scope)
        qname = self.qualified(owner, d.name, d.annotations)
        sym = Sym("instance", d.name, t, d, qname=qname, pyname=_py_ident("O_" + qname))
        if isinstance(t, BlockType):
            return scope.define(self.sub_instance(d, t, sym, scope), d.pos)
        if not isinstance(t, ExternType):
            raise error_at(d, f"cannot instantiate {t}")
        if not _standard(t.decl):
            raise error_at(d, f"extern `{t.decl.name}` is declared by the program, not by core.p4 or v1model.p4: "
                              "p4sim cannot give it a meaning (BMv2 has no implementation of it)")
        ctors = [m for m in t.decl.methods if m.ret is None]
        ctor = next((m for m in ctors if len(m.params) == len(d.args)), None)
        if ctor is None:
            raise error_at(d, f"{t.decl.name} takes {' or '.join(str(len(m.params)) for m in ctors)} constructor arguments, got {len(d.args)}")
        values = []
        for a, p in zip(d.args, ctor.params):
            self.expr(a, scope, p.type)
            v = self.const_value(a)
            if v is None:
                raise error_at(a, "constructor arguments must be compile-time constants")
            values.append(v)
        sym.value = values
        self.register_extern(sym, t, values, d)
        return scope.define(sym, d.pos)

    def sub_instance(self, d: ast.Instantiation, t: BlockType, sym: Sym, scope: Scope) -> Sym:
        """A parser or control instantiated inside another: checked again under its instance
        name, so its tables are `Outer.inst.table` as p4c names them."""
        values = self.ctor_values(d, t.decl, d.args, scope)
        if sym.qname in self.blocks:
            raise error_at(d, f"`{sym.qname}` is instantiated twice")
        want = "parser" if self._in_parser else "control"
        if (want == "parser") != isinstance(t.decl, ast.ParserDecl):
            raise error_at(d, f"a {want} can only instantiate {want}s")
        clone = self.instantiate_block(t.decl, sym.qname, values, self.type_values(d, t.decl, d.type_ref, scope))
        self.sub_blocks.add(sym.qname)
        sym.node = clone
        sym.pyname = ("P_" if isinstance(clone, ast.ParserDecl) else "C_") + _py_ident(sym.qname)
        return sym

    def value_set(self, d: ast.ValueSetDecl, scope: Scope, owner: str) -> None:
        t = self.resolve_type(d.type_ref, scope)
        if isinstance(t, StructType) and t.kind == "struct":
            fields = [(n, ft) for n, ft in t.fields.items()]
        else:
            fields = [("", t)]                # p4c's P4Info names no field of a bit<W> value_set
        match = []
        for n, ft in fields:
            if not field_width(ft):
                raise error_at(d, f"a value_set's type must be bit<W> or a struct of them, got {ft}")
            kind = "exact"                    # `@match(ternary)` on a struct field changes it
            for a in (t.field_annotations.get(n, ()) if isinstance(t, StructType) else ()):
                if a.startswith("@match(") and a[7:-1].strip() in ir.MATCH_KINDS:
                    kind = a[7:-1].strip()
            match.append(ir.MatchField(n, field_width(ft), kind))
        qname = self.qualified(owner, d.name, d.annotations)
        self.info.value_sets[qname] = ir.ValueSetInfo(qname, tuple(match), self.const_int(d.size, scope),
                                                      _annos(d.annotations))
        scope.define(Sym("value_set", d.name, t, d, qname=qname, pyname=_py_ident("VS_" + qname)), d.pos)

    def register_extern(self, sym: Sym, t: ExternType, values: list, d: ast.Instantiation) -> None:
        kind = t.decl.name
        annos = _annos(d.annotations)
        units = {0: "PACKETS", 1: "BYTES", 2: "BOTH"}
        if kind == "register":
            if not t.args or not isinstance(t.args[0], BitType):
                raise error_at(d, "register needs a bit<W> element type, like register<bit<32>>(N)")
            self.info.registers[sym.qname] = ir.RegisterInfo(sym.qname, t.args[0].width, values[0], annos)
        elif kind == "counter":
            self.info.counters[sym.qname] = ir.CounterInfo(sym.qname, units[values[1]], values[0], None, annos)
        elif kind == "direct_counter":
            self.info.counters[sym.qname] = ir.CounterInfo(sym.qname, units[values[0]], 0, "", annos)
        elif kind == "meter":
            self.info.meters[sym.qname] = ir.MeterInfo(sym.qname, units[values[1]], values[0], None, annos)
        elif kind == "direct_meter":
            self.info.meters[sym.qname] = ir.MeterInfo(sym.qname, units[values[0]], 0, "", annos)
        elif kind in ("action_profile", "action_selector"):
            selector = kind == "action_selector"
            algo = d.args[0]
            if selector and not isinstance(algo, ast.TypeMember):
                raise error_at(algo, "the selector's algorithm must be a HashAlgorithm member")
            max_group = annotation_value(d.annotations, "max_group_size")
            self.info.action_profiles[sym.qname] = ir.ActionProfileInfo(
                sym.qname, int(values[1 if selector else 0]), (), selector, algo.name if selector else "",
                max_group if isinstance(max_group, int) else 0, annos)

    def action(self, d: ast.ActionDecl, scope: Scope, owner: str) -> Sym:
        qname = self.qualified(owner, d.name, d.annotations)
        sym = Sym("action", d.name, None, d, qname=qname, pyname=_py_ident("A_" + qname))
        inner = Scope(scope)
        params = []
        seen_plain = False
        for p in d.params:
            p.type = self.resolve_type(p.type_ref, scope)
            if p.direction == "":
                seen_plain = True
                if not isinstance(p.type, (BitType, BoolType, EnumType)):
                    raise error_at(p, f"action parameter `{p.name}` from the control plane must be bit<W>, got {p.type}")
                width = p.type.width if isinstance(p.type, BitType) else \
                    (1 if isinstance(p.type, BoolType) else p.type.underlying.width if p.type.underlying else 32)
                params.append(ir.Param(p.name, width, _annos(p.annotations), serializable_enum(p.type)))
            elif seen_plain:
                raise error_at(p, "directional action parameters must come before control-plane ones")
            p.decl_sym = inner.define(Sym("param", p.name, p.type, p, pyname=self.fresh("p_" + p.name),
                                          direction=p.direction), p.pos)
        sym.value = ir.ActionInfo(qname, tuple(params), _annos(d.annotations))
        scope.define(sym, d.pos)
        old_action, self._in_action = self._in_action, True
        old_ret, self._ret_type = self._ret_type, VOID
        self.block(d.body, inner)
        self._in_action, self._ret_type = old_action, old_ret
        return sym

    def table(self, d: ast.TableDecl, scope: Scope, owner: str) -> Sym:
        qname = self.qualified(owner, d.name, d.annotations)
        sym = Sym("table", d.name, TableType(qname), d, qname=qname, pyname=_py_ident("T_" + qname))
        fields: list[ir.MatchField] = []
        selectors: list[ir.MatchField] = []
        for k in d.keys:
            t = self.expr(k.expr, scope)
            if isinstance(t, BoolType):
                width = 1
            elif isinstance(t, BitType):
                width = t.width
            elif isinstance(t, EnumType) and t.underlying:
                width = t.underlying.width
            elif isinstance(t, ErrorType):
                width = 32
            else:
                raise error_at(k.expr, f"a table key must be bit<W>, bool or a serializable enum, got {t}")
            mk = scope.lookup(k.match_kind)
            if mk is None or mk.kind != "match_kind":
                raise error_at(k, f"unknown match kind `{k.match_kind}`")
            if k.match_kind not in ir.MATCH_KINDS + ("selector",):
                raise error_at(k, f"match kind `{k.match_kind}` is not supported by p4sim")
            kname = annotation_value(k.annotations, "name")
            (selectors if k.match_kind == "selector" else fields).append(ir.MatchField(
                kname if isinstance(kname, str) else key_name(k.expr), width,
                k.match_kind, _annos(k.annotations), serializable_enum(t)))
        refs = []
        allowed: dict[str, Sym] = {}
        bound: dict[str, list] = {}          # action -> its directional args bound in the table
        for a in d.actions:
            asym = scope.lookup(a.name)
            if asym is None or asym.kind != "action":
                raise error_at(a, f"unknown action `{a.name}` in table {d.name}")
            if a.args:
                self.bound_args(a, asym, scope)
                bound[asym.qname] = a.args
            scope_kind = "TABLE_AND_DEFAULT"
            if annotation_value(a.annotations, "tableonly"):
                scope_kind = "TABLE_ONLY"
            elif annotation_value(a.annotations, "defaultonly"):
                scope_kind = "DEFAULT_ONLY"
            refs.append(ir.ActionRef(asym.qname, scope_kind, _annos(
                [x for x in a.annotations if x.name not in ("tableonly", "defaultonly")])))
            allowed[a.name] = asym
            allowed[asym.qname] = asym
            self._note_action(asym)
        props = d.properties
        default_name, default_args, const_default = "NoAction", (), False
        if "default_action" in props:
            p = props["default_action"]
            default_name, default_args = self.action_call(p.value, allowed, bound, scope, d.name)
            const_default = p.const
        else:
            # Without a default_action the default is NoAction, listed @defaultonly as p4c does.
            na = self.top.lookup("NoAction")
            if na is None or na.kind != "action":
                raise error_at(d, f"table {d.name} needs a default_action (there is no NoAction)")
            self._note_action(na)
            if na.qname not in {r.name for r in refs}:
                refs.append(ir.ActionRef(na.qname, "DEFAULT_ONLY"))
                allowed["NoAction"] = allowed[na.qname] = na
        size = 1024
        if "size" in props:
            size = self.const_int(props["size"].value, scope)
        direct_counter = direct_meter = None
        for pname, target in (("counters", "direct_counter"), ("meters", "direct_meter")):
            if pname in props:
                e = props[pname].value
                isym = scope.lookup(e.name) if isinstance(e, ast.NameRef) else None
                if isym is None or not isinstance(isym.type, ExternType) or isym.type.decl.name != target:
                    raise error_at(e, f"`{pname}` must name a {target} instance")
                if pname == "counters":
                    direct_counter = isym.qname
                    c = self.info.counters[isym.qname]
                    self.info.counters[isym.qname] = ir.CounterInfo(c.name, c.unit, 0, qname, c.annotations)
                else:
                    direct_meter = isym.qname
                    m = self.info.meters[isym.qname]
                    self.info.meters[isym.qname] = ir.MeterInfo(m.name, m.unit, 0, qname, m.annotations)
        support_timeout = False
        if "support_timeout" in props:
            e = props["support_timeout"].value
            self.expr(e, scope, BOOL)
            support_timeout = bool(self.const_value(e))
        implementation = self.implementation(d, props["implementation"].value, qname, scope) \
            if "implementation" in props else None
        with_selector = implementation is not None and self.info.action_profiles[implementation].with_selector
        if selectors and not with_selector:
            raise error_at(d, f"table {d.name} has `selector` keys but no action_selector implementation")
        if with_selector and not selectors:
            raise error_at(props["implementation"].value,
                           f"table {d.name} has an action_selector but no `selector` keys to hash")
        if implementation is not None and d.entries:
            raise error_at(d, f"table {d.name} has an action profile: its entries come from the control plane")
        for pname in props:
            if pname not in ("default_action", "size", "counters", "meters", "support_timeout", "implementation"):
                raise error_at(props[pname], f"table property `{pname}` is not supported by p4sim")
        entries = []
        for i, en in enumerate(d.entries or []):
            match = self.entry_match(en.keyset, fields, scope)
            aname, args = self.action_call(ast.Call(ast.NameRef(en.action, pos=en.pos), en.args, pos=en.pos),
                                           allowed, bound, scope, d.name)
            prio = self.entry_priority(en, scope)
            entries.append(ir.ConstEntry(match, aname, args, prio))
        d.allowed = allowed
        d.bound = bound
        sym.value = ir.TableInfo(qname, tuple(fields), tuple(refs), size, default_name, default_args,
                                 const_default, tuple(entries), d.entries_const, direct_counter,
                                 direct_meter, support_timeout, _annos(d.annotations),
                                 implementation, tuple(selectors))
        self.info.tables[qname] = sym.value
        return scope.define(sym, d.pos)

    def implementation(self, d: ast.TableDecl, e: ast.Expr, table: str, scope: Scope) -> str:
        """The action profile named by `implementation = ...`: an instance, or one built in
        place (`action_selector(...)`), which p4c names after the table."""
        if isinstance(e, ast.Constructor):
            inline = ast.Instantiation(e.type_ref, e.args, d.name, pos=e.pos)
            sym = self.instance(inline, Scope(scope), "")
            info = self.info.action_profiles.pop(sym.qname, None)
            if info is None:
                raise error_at(e, "`implementation` must be an action_profile or action_selector")
            info = replace(info, name=table)
        else:
            isym = scope.lookup(e.name) if isinstance(e, ast.NameRef) else None
            info = self.info.action_profiles.get(isym.qname) if isym is not None and isym.qname else None
            if info is None:
                raise error_at(e, "`implementation` must name an action_profile or action_selector instance")
        self.info.action_profiles[info.name] = replace(info, tables=info.tables + (table,))
        return info.name

    def bound_args(self, a: ast.ActionRefNode, asym: Sym, scope: Scope) -> None:
        """`actions = { mix(hdr.x.d); }` binds the action's directional parameters."""
        directional = [p for p in asym.node.params if p.direction != ""]
        if len(a.args) > len(directional):
            raise error_at(a, f"action {a.name} has {len(directional)} directional parameters, "
                              f"the action list binds {len(a.args)}")
        for arg, p in zip(a.args, directional):
            self.expr(arg, scope, p.type)
            self.assignable(p.type, arg, arg)
            if p.direction in ("out", "inout"):
                self.lvalue(arg, scope)

    def entry_priority(self, en: ast.EntryNode, scope: Scope) -> int:
        """p4sim's priority (larger wins) of a const entry. p4c hands BMv2 `@priority(N)`
        verbatim and numbers the others 1, 2, ... in order; BMv2's smaller number wins."""
        if en.priority is not None:
            return self.const_int(en.priority, scope)
        anno = next((a for a in en.annotations if a.name == "priority"), None)
        if anno is None:
            return 0                      # by position: state.py numbers it as p4c does
        if len(anno.args) != 1:
            raise error_at(anno, "@priority takes one integer")
        self.expr(anno.args[0], scope)
        return ir.priority_from_bmv2(self.const_int(anno.args[0], scope))

    def _note_action(self, sym: Sym) -> None:
        """An action the control plane can see: in a table, or called from a control's apply."""
        self.info.actions[sym.qname] = sym.value
        if self._block is not None:
            self._action_uses.append((self._block.decl.name, sym.qname))

    def action_call(self, e: ast.Expr, allowed: dict[str, Sym], bound: dict[str, list], scope: Scope,
                    table: str) -> tuple[str, tuple]:
        if isinstance(e, ast.NameRef):
            e = ast.Call(e, [], pos=e.pos)
        if not isinstance(e, ast.Call) or not isinstance(e.func, ast.NameRef):
            raise error_at(e, "expected an action call like `drop()`")
        name = e.func.name
        if name not in allowed:
            raise error_at(e, f"action `{name}` is not in the actions of table {table}")
        asym = allowed[name]
        plain = [p for p in asym.node.params if p.direction == ""]
        given = list(e.args)
        if len(given) == len(asym.node.params) and len(plain) < len(given):
            # `default_action = mix(hdr.x.d, 0x0F)`: the directional arguments come first.
            node = ast.ActionRefNode(name, given[:len(given) - len(plain)], pos=e.pos)
            self.bound_args(node, asym, scope)
            bound.setdefault(asym.qname, node.args)
            given = given[len(node.args):]
        if len(given) != len(plain):
            raise error_at(e, f"action {name} takes {len(plain)} arguments, got {len(e.args)}")
        args = []
        for a, p in zip(given, plain):
            self.expr(a, scope, p.type)
            self.assignable(p.type, a, a)
            v = self.const_value(a)
            if v is None:
                raise error_at(a, "a table's action arguments must be compile-time constants")
            args.append(_wrap(int(v), p.type) if isinstance(p.type, BitType) else int(v))
        return asym.qname, tuple(args)

    def entry_match(self, keyset: ast.Expr, fields: list[ir.MatchField], scope: Scope) -> tuple:
        items = keyset.items if isinstance(keyset, ast.TupleKey) else [keyset]
        if len(items) != len(fields):
            raise error_at(keyset, f"entry has {len(items)} key values, the table has {len(fields)} keys")
        out = []
        for k, f in zip(items, fields):
            full = (1 << f.bitwidth) - 1
            if isinstance(k, (ast.DontCare, ast.DefaultKey)):
                out.append(None)
            elif isinstance(k, ast.Mask):
                v, m = self.const_int(k.value, scope), self.const_int(k.mask, scope)
                if f.match_kind == "lpm":
                    plen = bin(m & full).count("1")
                    out.append(("lpm", v & m & full, plen))
                else:
                    out.append(("ternary", v & m & full, m & full))
            elif isinstance(k, ast.Range):
                out.append(("range", self.const_int(k.lo, scope), self.const_int(k.hi, scope)))
            else:
                self.expr(k, scope)
                v = self.const_value(k)
                if v is None:
                    raise error_at(k, "table entry keys must be compile-time constants")
                v = int(v) & full
                kind = f.match_kind
                out.append({"lpm": ("lpm", v, f.bitwidth), "ternary": ("ternary", v, full),
                            "range": ("range", v, v)}.get(kind, (kind, v)))
        return tuple(out)

    # ---- keysets -------------------------------------------------------------
    def keyset(self, k: ast.Expr, types: list[Type], scope: Scope) -> None:
        items = k.items if isinstance(k, ast.TupleKey) else [k]
        if isinstance(k, (ast.DefaultKey, ast.DontCare)):
            return
        if self.value_set_ref(k, scope, len(types)):
            return
        if len(items) != len(types):
            raise error_at(k, f"select has {len(types)} expressions, this case gives {len(items)}")
        for item, t in zip(items, types):
            if isinstance(item, (ast.DefaultKey, ast.DontCare)) or self.value_set_ref(item, scope, 1):
                continue
            parts = [item.value, item.mask] if isinstance(item, ast.Mask) else \
                [item.lo, item.hi] if isinstance(item, ast.Range) else [item]
            for p in parts:
                self.expr(p, scope, t)
                self.assignable(t, p, p)
                if self.const_value(p) is None:
                    raise error_at(p, "select case values must be compile-time constants")

    def value_set_ref(self, k: ast.Expr, scope: Scope, nkeys: int) -> bool:
        """Is this keyset a value_set (for nkeys select expressions)?"""
        if not isinstance(k, ast.NameRef):
            return False
        sym = scope.lookup(k.name)
        if sym is None or sym.kind != "value_set":
            return False
        k.decl = sym
        n = len(self.info.value_sets[sym.qname].match_fields)
        if n != nkeys:
            raise error_at(k, f"value_set {k.name} has {n} fields, matched against {nkeys} expressions")
        return True

    # ---- statements ------------------------------------------------------------
    def block(self, b: ast.Block, scope: Scope) -> None:
        inner = Scope(scope)
        for s in b.stmts:
            self.stmt(s, inner)

    def stmt(self, s: ast.Stmt, scope: Scope) -> None:
        self.where = s
        if isinstance(s, ast.Block):
            self.block(s, scope)
        elif isinstance(s, ast.Assign):
            t = self.expr(s.lhs, scope)
            self.lvalue(s.lhs, scope)
            self.expr(s.rhs, scope, t)
            self.assignable(t, s.rhs, s)
        elif isinstance(s, ast.CallStmt):
            self.expr(s.call, scope)
        elif isinstance(s, ast.If):
            self.expr(s.cond, scope, BOOL)
            if not isinstance(s.cond.type, BoolType):
                raise error_at(s.cond, f"an if condition must be bool, got {s.cond.type}")
            self.stmt(s.then, Scope(scope))
            if s.else_ is not None:
                self.stmt(s.else_, Scope(scope))
        elif isinstance(s, ast.VarDecl):
            self.var_decl(s, scope)
        elif isinstance(s, ast.ConstDecl):
            self.decl_ConstDecl(s, scope)
        elif isinstance(s, ast.Return):
            if self._in_parser:
                raise error_at(s, "return is not allowed in a parser")
            if s.expr is not None:
                self.expr(s.expr, scope, self._ret_type)
                self.assignable(self._ret_type, s.expr, s)
        elif isinstance(s, ast.Exit):
            if self._in_parser:
                raise error_at(s, "exit is not allowed in a parser")
        elif isinstance(s, ast.Switch):
            self.switch(s, scope)
        elif isinstance(s, ast.Empty):
            pass
        elif isinstance(s, (ast.For, ast.ForIn)):
            self.loop(s, scope)
        elif isinstance(s, (ast.Break, ast.Continue)):
            if not self._loops:
                raise error_at(s, f"{'break' if isinstance(s, ast.Break) else 'continue'} outside a for loop")
        else:
            raise error_at(s, f"unsupported statement {type(s).__name__}")

    def loop(self, s: ast.For | ast.ForIn, scope: Scope) -> None:
        """A P4_16 1.2.5 for loop: its variables live in a scope of their own."""
        inner = Scope(scope)
        if isinstance(s, ast.For):
            for init in s.init:
                self.stmt(init, inner)
            if s.cond is not None:
                self.expr(s.cond, inner, BOOL)
                if not isinstance(s.cond.type, BoolType):
                    raise error_at(s.cond, f"a for condition must be bool, got {s.cond.type}")
            for update in s.update:
                self.stmt(update, inner)
        else:
            t = self.resolve_type(s.var.type_ref, inner)
            c = s.collection
            if isinstance(c, ast.Range):
                for bound in (c.lo, c.hi):
                    self.expr(bound, inner, t)
                    self.assignable(t, bound, bound)
                if not isinstance(t, BitType):
                    raise error_at(s.var, f"a for loop over a range needs a bit<W> or int<W> variable, got {t}")
            else:
                ct = self.expr(c, inner)
                if not isinstance(ct, StackType):
                    raise error_at(c, f"a for loop goes over a header stack or a range `a .. b`, not a {ct}")
                if not _same_type(ct.elem, t):
                    raise error_at(s.var, f"the elements of {ct} are {ct.elem}, not {t}")
            self.var_decl(s.var, inner)
        self._loops += 1
        try:
            self.stmt(s.body, Scope(inner))
        finally:
            self._loops -= 1

    def var_decl(self, d: ast.VarDecl, scope: Scope) -> Sym:
        t = self.resolve_type(d.type_ref, scope)
        d.type = t
        if d.init is not None:
            self.expr(d.init, scope, t)
            self.assignable(t, d.init, d)
        d._sym = scope.define(Sym("var", d.name, t, d, pyname=self.fresh("v_" + d.name)), d.pos)
        return d._sym

    def switch(self, s: ast.Switch, scope: Scope) -> None:
        t = self.expr(s.expr, scope)
        seen = set()
        for case in s.cases:
            if case.label is not None:
                if isinstance(t, ActionRunType):
                    lab = case.label
                    table = next(x for x in self._block.tables if x.qname == t.table)
                    if not isinstance(lab, ast.NameRef) or lab.name not in table.node.allowed:
                        raise error_at(lab, f"`{expr_text(lab)}` is not an action of table {table.name}")
                    lab.decl = table.node.allowed[lab.name]
                    key = lab.decl.qname
                else:
                    self.expr(case.label, scope, t)
                    self.assignable(t, case.label, case.label)
                    key = self.const_value(case.label)
                    if key is None:
                        raise error_at(case.label, "switch labels must be compile-time constants")
                if key in seen:
                    raise error_at(case.label, "duplicate switch label")
                seen.add(key)
            if case.body is not None:
                self.block(case.body, scope)
        if not isinstance(t, (ActionRunType, BitType, EnumType, ErrorType)):
            raise error_at(s.expr, f"cannot switch on {t}")

    def lvalue(self, e: ast.Expr, scope: Scope) -> None:
        if isinstance(e, ast.NameRef):
            sym = e.decl
            if sym.kind == "param" and sym.direction == "in":
                raise error_at(e, f"cannot assign to `in` parameter {e.name}")
            if sym.kind == "param" and sym.direction == "" and self._in_action:
                raise error_at(e, f"cannot assign to action parameter {e.name}")
            if sym.kind not in ("var", "param"):
                raise error_at(e, f"cannot assign to {sym.kind} {e.name}")
        elif isinstance(e, (ast.Member, ast.Index, ast.Slice)):
            if isinstance(e, ast.Member) and isinstance(e.expr.type, StackType) and e.name not in ("next", "last"):
                raise error_at(e, f"cannot assign to stack property {e.name}")
            self.lvalue(e.expr, scope)
        else:
            raise error_at(e, "this expression cannot be assigned to")

    # ---- expressions -------------------------------------------------------------
    def expr(self, e: Any, scope: Scope, expected: Type | None = None) -> Type:
        method = getattr(self, "e_" + type(e).__name__, None)
        if method is None:
            raise error_at(e, f"unsupported expression {type(e).__name__}")
        t = method(e, scope, expected)
        e.type = t
        return t

    def e_IntLit(self, e: ast.IntLit, scope: Scope, expected: Type | None) -> Type:
        if e.width is None:
            return INT
        if e.width <= 0:
            raise error_at(e, "an integer width must be positive")
        t = BitType(e.width, e.signed)
        e.value = _wrap(e.value, t)
        return t

    def e_BoolLit(self, e, scope, expected) -> Type:
        return BOOL

    def e_StrLit(self, e, scope, expected) -> Type:
        return STRING

    def e_DontCare(self, e, scope, expected) -> Type:
        return expected or AnyType("_")

    def e_NameRef(self, e: ast.NameRef, scope: Scope, expected) -> Type:
        sym = scope.lookup(e.name)
        if sym is None:
            raise error_at(e, f"unknown name `{e.name}`")
        e.decl = sym
        if sym.kind in ("const", "var", "param"):
            return sym.type
        if sym.kind in ("instance", "table"):
            return sym.type
        if sym.kind in ("action", "extern_func", "function"):
            return VOID
        raise error_at(e, f"`{e.name}` is a {sym.kind}, not a value")

    def e_TypeMember(self, e: ast.TypeMember, scope: Scope, expected) -> Type:
        if e.type_name == "error":
            if e.name not in self.errors:
                raise error_at(e, f"unknown error `error.{e.name}`")
            return ERROR
        sym = scope.lookup(e.type_name)
        t = sym.type if sym is not None and sym.kind == "type" else None
        if isinstance(t, EnumType):
            if e.name not in t.members:
                raise error_at(e, f"enum {t.name} has no member `{e.name}`")
            return t
        raise error_at(e, f"`{e.type_name}` has no member `{e.name}`")

    def e_Member(self, e: ast.Member, scope: Scope, expected) -> Type:
        base = self.expr(e.expr, scope)
        if isinstance(base, StructType):
            if e.name in base.fields:
                return base.fields[e.name]
            if e.name in ("isValid", "setValid", "setInvalid") and base.kind != "struct":
                return VOID
            raise error_at(e, f"{base.kind} {base.name} has no field `{e.name}`")
        if isinstance(base, StackType):
            if e.name in ("next", "last"):
                if e.name == "next" and not self._in_parser:
                    raise error_at(e, "stack.next is only allowed in a parser")
                return base.elem
            if e.name in ("size", "lastIndex", "nextIndex"):
                return U32
            if e.name in ("push_front", "pop_front"):
                return VOID
            raise error_at(e, f"a header stack has no member `{e.name}`")
        if isinstance(base, ApplyResultType):
            if e.name in ("hit", "miss"):
                return BOOL
            if e.name == "action_run":
                return ActionRunType(base.table)
        if isinstance(base, (ExternType, TableType, BlockType, AnyType)):
            return VOID                # a method; the Call checks it
        raise error_at(e, f"{base} has no member `{e.name}`")

    def e_Index(self, e: ast.Index, scope: Scope, expected) -> Type:
        base = self.expr(e.expr, scope)
        if isinstance(base, TupleType):
            i = self.const_int(e.index, scope)
            if not 0 <= i < len(base.elems):
                raise error_at(e.index, f"index {i} is outside {base}")
            return base.elems[i]
        if not isinstance(base, StackType):
            raise error_at(e, f"cannot index a {base}")
        self.expr(e.index, scope, U32)
        v = self.const_value(e.index)
        if v is not None and not 0 <= v < base.size:
            raise error_at(e.index, f"index {v} is outside the stack of {base.size}")
        if v is None and not isinstance(e.index.type, BitType):
            raise error_at(e.index, "a stack index must be bit<W>")
        return base.elem

    def e_Slice(self, e: ast.Slice, scope: Scope, expected) -> Type:
        base = self.expr(e.expr, scope)
        if not isinstance(base, BitType):
            if isinstance(base, IntType):
                raise error_at(e, "cannot slice an integer without a width")
            raise error_at(e, f"cannot slice a {base}")
        hi, lo = self.const_int(e.hi, scope), self.const_int(e.lo, scope)
        if not 0 <= lo <= hi < base.width:
            raise error_at(e, f"slice [{hi}:{lo}] is outside {base}")
        e.hi_v, e.lo_v = hi, lo
        return BitType(hi - lo + 1)

    def e_ListExpr(self, e: ast.ListExpr, scope: Scope, expected) -> Type:
        return TupleType(tuple(self.expr(x, scope, self._item_type(expected, i)) for i, x in enumerate(e.items)))

    def e_StructExpr(self, e: ast.StructExpr, scope: Scope, expected) -> Type:
        if len(set(e.names)) != len(e.names):
            raise error_at(e, "a field is given twice")
        fields = expected.fields if isinstance(expected, StructType) else {}
        return TupleType(tuple(self.expr(x, scope, fields.get(n)) for n, x in zip(e.names, e.items)))

    @staticmethod
    def _item_type(expected: Type | None, i: int) -> Type | None:
        if isinstance(expected, StructType) and i < len(expected.fields):
            return list(expected.fields.values())[i]
        return None

    def e_Cast(self, e: ast.Cast, scope: Scope, expected) -> Type:
        t = self.resolve_type(e.type_ref, scope)
        src = self.expr(e.expr, scope, t)
        ok = (isinstance(t, BitType) and isinstance(src, (BitType, IntType, BoolType))) \
            or (isinstance(t, BoolType) and (isinstance(src, BoolType) or src == BitType(1) or isinstance(src, IntType))) \
            or (isinstance(t, BitType) and isinstance(src, EnumType) and src.underlying is not None) \
            or (isinstance(t, EnumType) and t.underlying is not None and isinstance(src, (BitType, IntType))) \
            or src == t
        if isinstance(t, BitType) and isinstance(src, BoolType) and t.width != 1:
            ok = False
        if not ok:
            raise error_at(e, f"cannot cast {src} to {t}")
        return t

    def e_Unary(self, e: ast.Unary, scope: Scope, expected) -> Type:
        if e.op == "!":
            t = self.expr(e.expr, scope, BOOL)
            if not isinstance(t, BoolType):
                raise error_at(e, f"`!` needs a bool, got {t}")
            return BOOL
        t = self.expr(e.expr, scope, expected)
        if not isinstance(t, (BitType, IntType)):
            raise error_at(e, f"`{e.op}` needs a bit<W> or int<W>, got {t}")
        if e.op == "~" and isinstance(t, IntType):
            raise error_at(e, "`~` needs an operand with a width")
        return t

    def e_Cond(self, e: ast.Cond, scope: Scope, expected) -> Type:
        self.expr(e.cond, scope, BOOL)
        if not isinstance(e.cond.type, BoolType):
            raise error_at(e.cond, f"a ?: condition must be bool, got {e.cond.type}")
        self.expr(e.then, scope, expected)
        self.expr(e.else_, scope, expected)
        return self.unify(e.then, e.else_, e, "?:")

    def e_Binary(self, e: ast.Binary, scope: Scope, expected) -> Type:
        op = e.op
        if op in ("&&", "||"):
            for x in (e.left, e.right):
                if not isinstance(self.expr(x, scope, BOOL), BoolType):
                    raise error_at(x, f"`{op}` needs bool operands, got {x.type}")
            return BOOL
        want = expected if op not in ("==", "!=", "<", ">", "<=", ">=") else None
        lt = self.expr(e.left, scope, want if op not in ("++",) else None)
        rt = self.expr(e.right, scope, want if op not in ("<<", ">>", "++") else None)
        if op in ("<<", ">>"):
            if not isinstance(lt, (BitType, IntType)):
                raise error_at(e.left, f"cannot shift a {lt}")
            if isinstance(rt, BitType) and rt.signed:
                raise error_at(e.right, "a shift amount must be unsigned")
            if not isinstance(rt, (BitType, IntType)):
                raise error_at(e.right, f"a shift amount must be an integer, got {rt}")
            if isinstance(lt, IntType) and isinstance(expected, BitType):
                self.coerce(e.left, expected)
                return expected
            if isinstance(lt, IntType) and self.const_value(e.right) is None:
                raise error_at(e, "shifting an integer without a width by a run-time amount")
            return e.left.type
        if op == "++":
            for x in (e.left, e.right):
                if not isinstance(x.type, BitType):
                    raise error_at(x, f"`++` needs operands with a width, got {x.type}")
            return BitType(lt.width + rt.width, lt.signed)
        t = self.unify(e.left, e.right, e, op)
        if op in ("==", "!="):
            return BOOL
        if op in ("<", ">", "<=", ">="):
            if not isinstance(t, (BitType, IntType)):
                raise error_at(e, f"cannot compare {t} with `{op}`")
            return BOOL
        if not isinstance(t, (BitType, IntType)):
            raise error_at(e, f"`{op}` needs bit<W> or int<W> operands, got {t}")
        if op in ("/", "%") and isinstance(t, BitType) and t.signed:
            raise error_at(e, f"`{op}` is not defined on signed int<W>")
        if op in ("/", "%") and self.const_value(e.right) == 0:
            raise error_at(e.right, "division by zero")
        if op in ("|+|", "|-|") and isinstance(t, IntType):
            raise error_at(e, f"`{op}` needs operands with a width")
        return t

    def unify(self, a: ast.Expr, b: ast.Expr, where: ast.Node, op: str) -> Type:
        """The common type of two operands: an unsized integer takes the other's type."""
        ta, tb = a.type, b.type
        if isinstance(ta, IntType) and not isinstance(tb, IntType):
            self.coerce(a, tb)
            return tb
        if isinstance(tb, IntType) and not isinstance(ta, IntType):
            self.coerce(b, ta)
            return ta
        if _same_type(ta, tb):
            return ta
        for x, y in ((ta, tb), (tb, ta)):
            if isinstance(x, EnumType) and x.underlying == y:
                return y
        raise error_at(where, f"`{op}` operands have different types: {ta} and {tb}"
                       + (" (cast one of them)" if isinstance(ta, BitType) and isinstance(tb, BitType) else ""))

    def coerce(self, e: ast.Expr, t: Type) -> None:
        """Give an unsized integer expression the type `t` (it must be a number type)."""
        if isinstance(t, (BitType, IntType)):
            e.type = t
            if isinstance(e, (ast.Binary, ast.Unary, ast.Cond)):
                for sub in (getattr(e, "left", None), getattr(e, "right", None), getattr(e, "expr", None),
                            getattr(e, "then", None), getattr(e, "else_", None)):
                    if sub is not None and isinstance(sub.type, IntType):
                        if isinstance(e, ast.Binary) and e.op in ("<<", ">>") and sub is e.right:
                            continue
                        self.coerce(sub, t)
            return
        raise error_at(e, f"an integer cannot be used as a {t}")

    def assignable(self, target: Type, e: ast.Expr, where: ast.Node) -> None:
        src = e.type
        if isinstance(target, AnyType) or isinstance(src, AnyType):
            return
        if isinstance(src, IntType) and isinstance(target, (BitType, IntType)):
            self.coerce(e, target)
            return
        if isinstance(target, EnumType) and isinstance(src, IntType):
            raise error_at(where, f"cannot assign an integer to enum {target.name}")
        if isinstance(src, TupleType) and isinstance(target, StructType) and target.kind != "header_union":
            if isinstance(e, ast.StructExpr):
                if sorted(e.names) != sorted(target.fields):
                    raise error_at(where, f"the fields given ({', '.join(e.names)}) are not those of "
                                          f"{target.name} ({', '.join(target.fields)})")
                order = {n: i for i, n in enumerate(e.names)}
                e.items = [e.items[order[n]] for n in target.fields]
                e.names = list(target.fields)
            if len(src.elems) != len(target.fields):
                raise error_at(where, f"{target.name} has {len(target.fields)} fields, the list has {len(src.elems)}")
            for item, ft in zip(e.items, target.fields.values()):
                self.assignable(ft, item, item)
            e.type = target                # the list builds a value of the struct or header
            return
        if isinstance(src, EnumType) and src.underlying == target:
            return                    # a serializable enum converts to its underlying type
        if isinstance(src, TupleType) and isinstance(target, TupleType) and isinstance(e, ast.ListExpr) \
                and len(src.elems) == len(target.elems):
            for item, et in zip(e.items, target.elems):
                self.assignable(et, item, item)
            e.type = target
            return
        if not _same_type(src, target):
            hint = " (cast it)" if isinstance(src, BitType) and isinstance(target, BitType) else ""
            raise error_at(where, f"cannot assign {src} to {target}{hint}")

    # ---- calls -------------------------------------------------------------------
    def e_Call(self, e: ast.Call, scope: Scope, expected) -> Type:
        f = e.func
        if isinstance(f, ast.NameRef):
            sym = scope.lookup(f.name)
            if sym is None:
                raise error_at(f, f"unknown name `{f.name}`")
            f.decl = sym
            if sym.kind == "action":
                return self.call_action(e, sym, scope)
            if sym.kind == "extern_func":
                if not all(_standard(m) for m in sym.node):
                    raise error_at(e, f"extern function `{f.name}` is declared by the program, not by core.p4 or "
                                      "v1model.p4: p4sim cannot give it a meaning (BMv2 has no implementation of it)")
                return self.call_extern(e, sym.node, scope, Target("extern_func", f.name, sym))
            if sym.kind == "generic_function":
                sym = self.instantiate_function(e, sym, scope)
            if sym.kind == "function":
                e.target = Target("function", f.name, sym)
                self.call_args(e, sym.node.params, scope)
                return sym.type
            raise error_at(f, f"`{f.name}` is not callable")
        if isinstance(f, ast.Member):
            base = self.expr(f.expr, scope)
            name = f.name
            if is_header(base) and name in ("minSizeInBits", "minSizeInBytes", "maxSizeInBits", "maxSizeInBytes"):
                if e.args:
                    raise error_at(e, f"{name} takes no arguments")
                vb = base.fields[base.varbit].max_width if base.varbit else 0
                bits = base.width + (vb if name.startswith("max") else 0)
                e.target = Target("header_size", name, base=f.expr)
                e.size_value = bits // 8 if name.endswith("Bytes") else bits
                return INT
            if isinstance(base, StructType) and base.kind != "struct" and name in ("isValid", "setValid", "setInvalid"):
                if e.args:
                    raise error_at(e, f"{name} takes no arguments")
                e.target = Target("header_method", name, base=f.expr)
                if name != "isValid" and base.kind == "header_union":
                    raise error_at(e, f"{name} is not defined on a header_union")
                return BOOL if name == "isValid" else VOID
            if isinstance(base, StackType) and name in ("push_front", "pop_front"):
                if len(e.args) != 1:
                    raise error_at(e, f"{name} takes one argument")
                self.expr(e.args[0], scope, INT)
                e.count = self.const_int(e.args[0], scope)
                e.target = Target("stack_method", name, base=f.expr)
                return VOID
            if isinstance(base, BlockType) and name == "apply":
                sym = f.expr.decl
                e.target = Target("block_apply", name, sym, f.expr)
                self.call_args(e, sym.node.params, scope)
                return VOID
            if isinstance(base, TableType):
                if name != "apply" or e.args:
                    raise error_at(e, "a table only has apply()")
                if self._in_action:
                    raise error_at(e, "tables cannot be applied inside an action")
                sym = f.expr.decl
                e.target = Target("table_apply", name, sym, f.expr)
                return ApplyResultType(sym.qname)
            if isinstance(base, ExternType):
                methods = [m for m in base.decl.methods if m.name == name and m.ret is not None]
                if not methods:
                    raise error_at(f, f"{base.decl.name} has no method `{name}`")
                return self.call_extern(e, methods, scope, Target("method", name, getattr(f.expr, "decl", None), f.expr),
                                        base)
        raise error_at(e, f"`{expr_text(f)}` is not callable")

    def call_action(self, e: ast.Call, sym: Sym, scope: Scope) -> Type:
        if self._in_parser:
            raise error_at(e, "actions cannot be called in a parser")
        e.target = Target("action", sym.name, sym)
        self.call_args(e, sym.node.params, scope)
        if not self._in_action:
            self._note_action(sym)      # p4c lists actions called directly from control code
        return VOID

    def call_args(self, e: ast.Call, params: list[ast.Param], scope: Scope) -> None:
        needed = [p for p in params if p.default is None]
        if not len(needed) <= len(e.args) <= len(params):
            raise error_at(e, f"`{expr_text(e.func)}` takes {len(params)} arguments, got {len(e.args)}")
        for a, p in zip(e.args, params):
            pt = p.type
            if isinstance(a, ast.DontCare):
                a.type = pt
                continue
            self.expr(a, scope, None if isinstance(pt, AnyType) else pt)
            # Extern bit<W> parameters accept any width, converted as BMv2 does.
            lenient = isinstance(pt, BitType) and isinstance(a.type, BitType) and e.target.kind in ("extern_func", "method")
            if not lenient:
                self.assignable(pt, a, a)
            if p.direction in ("out", "inout"):
                self.lvalue(a, scope)

    def call_extern(self, e: ast.Call, overloads: list[ast.MethodDecl], scope: Scope, target: Target,
                    base: ExternType | None = None) -> Type:
        matching = [m for m in overloads
                    if len([p for p in m.params if p.default is None]) <= len(e.args) <= len(m.params)]
        if not matching:
            counts = sorted({len(m.params) for m in overloads})
            raise error_at(e, f"`{expr_text(e.func)}` takes {' or '.join(map(str, counts))} arguments, got {len(e.args)}")
        m = matching[0]
        e.target = target
        e.params = m.params                  # the directions, for effects.py
        self.call_args(e, m.params, scope)
        for ta in e.type_args:
            self.resolve_type(ta, scope)
        ret = m.ret_type
        if isinstance(ret, AnyType):
            if e.type_args:
                return self.resolve_type(e.type_args[0], scope)
            if base is not None and base.args:
                return base.args[0]
            raise error_at(e, f"cannot tell the result type of `{expr_text(e.func)}`; give it as a type argument")
        if target.kind == "extern_func" and target.name == "digest":
            self.note_digest(e)
        if target.kind == "extern_func" and target.name == "static_assert":
            self.static_assert(e)
            return ret                  # p4c folds it to `true`: no call is left in the program
        if target.kind == "extern_func" and not self._in_parser:
            self.info.control_calls_extern_function = True
        return ret

    def static_assert(self, e: ast.Call) -> None:
        """core.p4's static_assert(check[, message]), decided here at compile time as p4c does."""
        check = self.const_value(e.args[0])
        if not isinstance(check, bool):
            raise error_at(e.args[0], "static_assert needs a condition known at compile time")
        if not check:
            message = e.args[1].value if len(e.args) > 1 and isinstance(e.args[1], ast.StrLit) else None
            raise error_at(e, f"static_assert failed: {message or expr_text(e.args[0])}")

    def note_digest(self, e: ast.Call) -> None:
        data = e.args[1]
        if e.type_args:
            t = self.resolve_type(e.type_args[0], self.top)
        else:
            t = data.type
        if not isinstance(t, StructType):
            raise error_at(data, "digest data must be a struct (give the struct type: digest<T>(...))")
        if isinstance(data.type, TupleType):
            self.assignable(t, data, data)
        fields = tuple(ir.Param(n, ft.width if isinstance(ft, BitType) else 1) for n, ft in t.fields.items())
        self.info.digests[t.name] = ir.DigestInfo(t.name, fields)
        e.digest_type = t

    # ---- types and constants -------------------------------------------------------
    def resolve_type(self, r: ast.TypeRef, scope: Scope) -> Type:
        if isinstance(r, ast.BitTypeRef):
            width = 1 if r.width is None else self.const_int(r.width, scope)
            if width <= 0:
                raise error_at(r, "a width must be positive")
            return BitType(width, r.signed)
        if isinstance(r, ast.SimpleTypeRef):
            return {"bool": BOOL, "error": ERROR, "string": STRING, "int": INT, "void": VOID,
                    "_": AnyType("_")}[r.kind]
        if isinstance(r, ast.VarbitTypeRef):
            return VarbitType(self.const_int(r.width, scope))
        if isinstance(r, ast.NamedTypeRef):
            sym = scope.lookup(r.name)
            if sym is None or sym.kind != "type":
                raise error_at(r, f"unknown type `{r.name}`")
            t = sym.type
            if isinstance(t, ExternType) and r.args:
                return ExternType(t.decl, tuple(self.resolve_type(a, scope) for a in r.args))
            return t
        if isinstance(r, ast.StackTypeRef):
            elem = self.resolve_type(r.elem, scope)
            if not (isinstance(elem, StructType) and elem.kind in ("header", "header_union")):
                raise error_at(r, f"a header stack's elements must be headers or header unions, got {elem}")
            return StackType(elem, self.const_int(r.size, scope))
        if isinstance(r, ast.TupleTypeRef):
            return TupleType(tuple(self.resolve_type(a, scope) for a in r.args))
        raise error_at(r, "unsupported type")

    def const_int(self, e: ast.Expr, scope: Scope) -> int:
        if e.type is None:
            self.expr(e, scope)
        v = self.const_value(e)
        if v is None or isinstance(v, bool):
            raise error_at(e, "expected a compile-time integer constant")
        return v

    def const_value(self, e: ast.Expr) -> Any:
        return const_value(e, self.errors)


def const_value(e: ast.Expr, errors: dict[str, int], memo: dict[int, tuple[ast.Expr, Any]] | None = None) -> Any:
    """The compile-time value of a checked expression, or None. With memo (id -> (node,
    value), for an AST no longer changing), each node is folded once."""
    if memo is not None and id(e) in memo:
        return memo[id(e)][1]
    v = _const_raw(e, errors, memo)
    if isinstance(e.type, BitType) and isinstance(v, int) and not isinstance(v, bool):
        v = _wrap(v, e.type)
    if memo is not None:
        memo[id(e)] = (e, v)
    return v


def _const_raw(e: ast.Expr, errors: dict[str, int], memo: dict[int, tuple[ast.Expr, Any]] | None) -> Any:
    if isinstance(e, (ast.IntLit, ast.BoolLit)):
        return e.value
    if isinstance(e, ast.NameRef):
        return e.decl.value if e.decl is not None and e.decl.kind == "const" else None
    if isinstance(e, ast.TypeMember):
        if e.type_name == "error":
            return errors[e.name]
        return e.type.members[e.name] if isinstance(e.type, EnumType) else None
    if isinstance(e, ast.Cast):
        v = const_value(e.expr, errors, memo)
        if v is None:
            return None
        if isinstance(e.type, BitType):
            return _wrap(int(v), e.type)
        if isinstance(e.type, BoolType):
            return bool(v)
        return v
    if isinstance(e, ast.Unary):
        v = const_value(e.expr, errors, memo)
        if v is None:
            return None
        r = (not v) if e.op == "!" else (-v if e.op == "-" else ~v)
        return _wrap(r, e.type) if isinstance(e.type, BitType) else r
    if isinstance(e, ast.Binary):
        a, b = const_value(e.left, errors, memo), const_value(e.right, errors, memo)
        if a is None or b is None:
            return None
        return fold_binary(e.op, a, b, e.left.type, e.right.type, e.type)
    if isinstance(e, ast.Call) and getattr(e.target, "name", None) == "static_assert":
        return True                     # it failed the compile if it did not hold
    if isinstance(e, ast.Call) and getattr(e.target, "kind", None) == "header_size":
        return e.size_value
    if isinstance(e, ast.Cond):
        c = const_value(e.cond, errors, memo)
        if c is None:
            return None
        return const_value(e.then if c else e.else_, errors, memo)
    return None


def fold_binary(op: str, a: Any, b: Any, lt: Type, rt: Type, t: Type) -> Any:
    """P4 semantics of a binary operator on constants (also the reference for tests)."""
    if op == "&&":
        return a and b
    if op == "||":
        return a or b
    if op in ("==", "!=", "<", ">", "<=", ">="):
        return {"==": a == b, "!=": a != b, "<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
    if op == "++":
        return _wrap((a << rt.width) | (b & ((1 << rt.width) - 1)), t)
    if op in ("/", "%") and b == 0:
        return None
    if op in ("|+|", "|-|"):
        lo, hi = (-(1 << (t.width - 1)), (1 << (t.width - 1)) - 1) if t.signed else (0, (1 << t.width) - 1)
        return max(lo, min(hi, a + b if op == "|+|" else a - b))
    r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a // b,
         "%": lambda: a % b, "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b,
         "<<": lambda: a << b if b < 4096 else 0, ">>": lambda: a >> b}[op]()
    return _wrap(r, t) if isinstance(t, BitType) else r


def _wrap(v: int, t: BitType) -> int:
    """Reduce an integer to the range of bit<W> / int<W>."""
    v &= (1 << t.width) - 1
    if t.signed and v >> (t.width - 1):
        v -= 1 << t.width
    return v


def _same_type(a: Type, b: Type) -> bool:
    return a == b if not isinstance(a, (StructType, EnumType, ExternType)) else a is b


def _standard(decl: ast.Node) -> bool:
    """Declared by core.p4 or v1model.p4 (p4sim's own, or a copy with the same name)?"""
    return Path(decl.pos.file).name in ("core.p4", "v1model.p4")


def _py_ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _instantiated_types(program: ast.Program) -> set[str]:
    """The type names the program makes instances of after their declaration (instantiations
    at top level and in blocks, `implementation = T(...)`), and those a typedef names."""
    names: set[str] = set()
    for d in program.declarations:
        for x in [d, *(d.locals if isinstance(d, (ast.ParserDecl, ast.ControlDecl)) else [])]:
            if isinstance(x, (ast.Instantiation, ast.TypedefDecl)) and isinstance(x.type_ref, ast.NamedTypeRef):
                names.add(x.type_ref.name)
            elif isinstance(x, ast.TableDecl):
                names.update(p.value.type_ref.name for p in x.properties.values()
                             if isinstance(p.value, ast.Constructor))
    return names


def check(program: ast.Program) -> CheckedProgram:
    checker = Checker(program)
    try:
        checked = checker.check()
        order_side_effects(checked)
        return checked
    except P4Error:
        raise
    except Exception as err:
        raise internal_error("checking", err, checker.where, program.source_file) from None
