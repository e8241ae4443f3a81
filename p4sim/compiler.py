"""Compile a checked P4 program into Python source, once; the pipeline execs it per switch.

Headers and structs become __slots__ classes, parser states and controls become
functions with P4's bit-width arithmetic inlined; tables call state.TableState.lookup.
The generated module's free names (state objects, hash functions, the per-packet
context PK) are bound by pipeline.Switch when it loads the program.
"""
from __future__ import annotations

import contextlib
import json
import keyword
import logging
from dataclasses import dataclass, field
from typing import Any, Iterator

from .errors import P4Error

log = logging.getLogger(__name__)
from .frontend import ast
from .frontend.checker import (CheckedProgram, Sym, Target, V1SWITCH_BLOCKS, const_value, error_at,
                               expr_text)
from .frontend.types import (ActionRunType, ApplyResultType, BitType, BoolType, EnumType,
                             ErrorType, ExternType, IntType, StackType, StructType, TupleType, Type,
                             is_header)

_ENTRY = {"parser": "PARSER", "verify_checksum": "VERIFY", "ingress": "INGRESS", "egress": "EGRESS",
          "compute_checksum": "COMPUTE", "deparser": "DEPARSER"}
MAX_PARSER_STEPS = 1000          # a parser that loops longer fails with ParserTimeout


def attr(name: str) -> str:
    """A P4 field name as a Python attribute (keywords get a trailing underscore)."""
    return name + "_" if keyword.iskeyword(name) or name.startswith("_") else name


def cls_name(t: StructType) -> str:
    return {"header": "H_", "struct": "S_", "header_union": "U_"}[t.kind] + t.name


@dataclass
class CompiledCode:
    """The generated Python module and what the pipeline must bind before exec."""
    source: str
    bindings: dict[str, tuple[str, str]]   # module name -> ("table"|"register"|"counter"|"meter", P4Info name)
    field_lists: dict[int, list[str]]  # index -> metadata attribute names
    sm_fields: list[str]


def compile_program(cp: CheckedProgram, trace: bool = False) -> CompiledCode:
    return _Compiler(cp, trace).run()


def _mask(w: int) -> int:
    return (1 << w) - 1


def _py(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


@dataclass
class _Ctx:
    """Where the statement being compiled lives."""
    kind: str                            # "parser", "control", "action", "function"
    block: Any = None                    # BlockInfo
    ctl_args: str = ""                   # control params (+ L) to pass to local actions/tables
    pkt: str = ""                        # packet_in / packet_out param
    outs: list[Sym] = field(default_factory=list)   # scalar out/inout params to return


class _Compiler:
    def __init__(self, cp: CheckedProgram, trace: bool) -> None:
        self.cp = cp
        self.trace = trace
        self.lines: list[str] = []
        self.ind = 0
        self.uid = 0
        self.lookaheads: dict[str, str] = {}

    # ---- output helpers --------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    def tmp(self, base: str = "t") -> str:
        self.uid += 1
        return f"_{base}{self.uid}"

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
            self.action(a, _Ctx("action"), "")
        for name, info in cp.blocks.items():
            if info.kind == "parser":
                self.parser(info)
            else:
                self.control(info)
        for role in V1SWITCH_BLOCKS:
            decl = cp.blocks[cp.pipeline[role]].decl
            empty = role != "parser" and not decl.body.stmts and not cp.blocks[decl.name].frame_vars
            # An empty control is not called at all: None tells the pipeline to skip it.
            self.emit(f"{_ENTRY[role]} = {'None' if empty else ('P_' if role == 'parser' else 'C_') + _py(decl.name)}")
        self.emit(f"NEW_HDR = {cls_name(cp.headers_type)}")
        self.emit(f"NEW_META = {cls_name(cp.meta_type)}")
        self.emit(f"NEW_SM = {cls_name(cp.sm_type)}")
        info = cp.info
        # O_ objects are the program's extern instances, TS_ its tables.
        bindings = {f"TS_{_py(n)}": ("table", n) for n in info.tables}
        bindings.update({_py(f"O_{n}"): ("register", n) for n in info.registers})
        bindings.update({_py(f"O_{n}"): ("counter", n) for n, c in info.counters.items() if c.direct_table is None})
        bindings.update({_py(f"O_{n}"): ("meter", n) for n, m in info.meters.items() if m.direct_table is None})
        return CompiledCode("\n".join(self.lines) + "\n", bindings,
                            {i: [attr(n) for n in names] for i, names in cp.field_lists.items()},
                            [attr(n) for n in cp.sm_type.fields])

    # ---- types ------------------------------------------------------------------
    def init_value(self, t: Type) -> str:
        if isinstance(t, StructType):
            return f"{cls_name(t)}()"
        if isinstance(t, StackType):
            return f"Stack([{cls_name(t.elem)}() for _ in range({t.size})])"
        if isinstance(t, BoolType):
            return "False"
        return "0"

    def struct_class(self, t: StructType) -> None:
        name = cls_name(t)
        fields = [attr(f) for f in t.fields]
        slots = (["_v"] if t.kind == "header" else []) + fields
        self.emit(f"class {name}:")
        self.ind += 1
        self.emit(f"__slots__ = {tuple(slots)!r}")
        self.emit("def __init__(self):")
        self.ind += 1
        if t.kind == "header":
            self.emit("self._v = False")
        for f, ft in t.fields.items():
            self.emit(f"self.{attr(f)} = {self.init_value(ft)}")
        if not slots:
            self.emit("pass")
        self.ind -= 1
        self.emit("def _copy(self):")
        self.ind += 1
        self.emit(f"n = {name}.__new__({name})")
        for f, ft in zip(slots, ([None] if t.kind == "header" else []) + list(t.fields.values())):
            deep = isinstance(ft, (StructType, StackType))
            self.emit(f"n.{f} = self.{f}._copy()" if deep else f"n.{f} = self.{f}")
        self.emit("return n")
        self.ind -= 1
        self.emit("def _set(self, o):")
        self.ind += 1
        for f, ft in zip(slots, ([None] if t.kind == "header" else []) + list(t.fields.values())):
            deep = isinstance(ft, (StructType, StackType))
            self.emit(f"self.{f}._set(o.{f})" if deep else f"self.{f} = o.{f}")
        self.emit("pass")
        self.ind -= 1
        self.emit("def _eq(self, o):")
        self.ind += 1
        if t.kind == "header":
            self.emit("if self._v != o._v: return False")
            self.emit("if not self._v: return True")
        parts = []
        for f, ft in t.fields.items():
            a = attr(f)
            parts.append(f"self.{a}._eq(o.{a})" if isinstance(ft, (StructType, StackType)) else f"self.{a} == o.{a}")
        self.emit("return " + (" and ".join(parts) if parts else "True"))
        self.ind -= 2

    def header_io(self, t: StructType) -> None:
        """Extract (X_), lookahead (LK_), to-int (IV_) and emit (E_) of one header type."""
        name, nbytes, total = t.name, t.width // 8, t.width
        layout = []
        off = total
        for f, ft in t.fields.items():
            off -= ft.width
            layout.append((attr(f), off, ft))
        self.emit(f"def X_{name}(pkt, h):")
        self.ind += 1
        self.emit(f"d = pkt.data; o = pkt.off; e = o + {nbytes}")
        self.emit("if e > len(d): raise Reject(1)")
        self.emit("v = int.from_bytes(d[o:e], 'big')")
        self.fill_fields(layout)
        self.emit("h._v = True; pkt.off = e")
        if self.trace:
            self.emit(f"LOG('extracted {name} (%d bytes at %d)', {nbytes}, o)")
        self.ind -= 1
        self.emit(f"def LK_{name}(pkt):")          # lookahead: extract, then step back
        self.ind += 1
        self.emit(f"h = H_{name}(); o = pkt.off")
        self.emit(f"X_{name}(pkt, h); pkt.off = o")
        self.emit("return h")
        self.ind -= 1
        parts = []
        for a, shift, ft in layout:
            val = f"(h.{a} & {_mask(ft.width)})" if ft.signed else f"h.{a}"
            parts.append(f"({val} << {shift})" if shift else val)
        self.emit(f"def IV_{name}(h):")
        self.ind += 1
        self.emit("return " + (" | ".join(parts) or "0"))
        self.ind -= 1
        self.emit(f"def E_{name}(out, h):")
        self.ind += 1
        self.emit(f"if h._v: out.append(({' | '.join(parts) or '0'}).to_bytes({nbytes}, 'big'))")
        self.ind -= 1

    def fill_fields(self, layout: list) -> None:
        for i, (a, shift, ft) in enumerate(layout):
            v = f"(v >> {shift})" if shift else "v"
            if i:                                    # the top field needs no mask
                v = f"({v} & {_mask(ft.width)})"
            if ft.signed:
                h = 1 << (ft.width - 1)
                v = f"(({v} ^ {h}) - {h})"
            self.emit(f"h.{a} = {v}")

    # ---- blocks -------------------------------------------------------------------
    def frame_class(self, info) -> str | None:
        if not info.frame_vars:
            return None
        name = f"FL_{_py(info.decl.name)}"
        self.emit(f"class {name}:")
        self.ind += 1
        self.emit(f"__slots__ = {tuple(attr(s.name) for s in info.frame_vars)!r}")
        self.emit("def __init__(self):")
        self.ind += 1
        for s in info.frame_vars:
            self.emit(f"self.{attr(s.name)} = {self.init_value(s.type)}")
        self.ind -= 2
        return name

    def frame_init(self, info, ctx: _Ctx) -> None:
        """Initialise control-level variables that have initialisers, per invocation."""
        for s in info.frame_vars:
            if s.node.init is not None:
                self.assign_to(f"L.{attr(s.name)}", s.type, s.node.init, ctx)

    def parser(self, info) -> None:
        d = info.decl
        fl = self.frame_class(info)
        names = [_param_py(p) for p in d.params]
        pkt = names[0]
        sig = ", ".join(names + ["L"])
        ctx = _Ctx("parser", info, sig, pkt)
        for st in d.states:
            self.emit(f"def PS_{_py(d.name)}_{st.name}({sig}):")
            self.ind += 1
            if self.trace:
                self.emit(f"LOG('parser {d.name}: state {st.name}')")
            for s in st.stmts:
                self.stmt(s, ctx)
            self.transition(st.transition, d.name, ctx)
            self.ind -= 1
        self.emit(f"def P_{_py(d.name)}({', '.join(names)}):")
        self.ind += 1
        self.emit(f"L = {fl}()" if fl else "L = None")
        if fl:
            self.frame_init(info, ctx)
        self.emit(f"st = PS_{_py(d.name)}_start")
        self.emit("n = 0")
        if d.name != self.cp.pipeline["parser"]:      # a sub-parser: errors end the top parser
            self.emit("while st is not None:")
            self.emit(f"    st = st({sig})")
            self.ind -= 1
            return
        self.emit("try:")
        self.emit(f"    while st is not None:")
        self.emit(f"        n += 1")
        self.emit(f"        if n > {MAX_PARSER_STEPS}: raise Reject(5)")
        self.emit(f"        st = st({sig})")
        self.emit("except Reject as r:")
        self.emit("    if r.code is not None:")
        self.emit(f"        {names[3]}.parser_error = r.code")
        if self.trace:
            self.emit("    LOG('parser error %s', ERROR_NAMES.get(r.code, r.code))")
        self.ind -= 1

    def state_ref(self, parser: str, name: str) -> str:
        if name == "accept":
            return "None"
        return f"PS_{_py(parser)}_{name}"

    def transition(self, tr: ast.Transition, parser: str, ctx: _Ctx) -> None:
        if tr.select is None:
            if tr.next_state == "reject":
                self.emit("raise Reject(None)")
            else:
                self.emit(f"return {self.state_ref(parser, tr.next_state)}")
            return
        keys = []
        for e in tr.select:
            k = self.tmp("k")
            self.emit(f"{k} = {self.expr(e, ctx)}")
            keys.append((k, e.type))
        for case in tr.cases:
            cond = self.keyset_cond(case.keyset, keys)
            target = case.next_state
            do = "raise Reject(None)" if target == "reject" else f"return {self.state_ref(parser, target)}"
            if self.trace:
                do = f"LOG('select %s -> {target}', ({''.join(k + ', ' for k, _ in keys)})); {do}"
            if cond == "True":
                self.emit(do)
                return
            self.emit(f"if {cond}: {do}")
        if self.trace:
            self.emit("LOG('select: no case matches (error.NoMatch)')")
        self.emit("raise Reject(2)")

    def keyset_cond(self, ks: ast.Expr, keys: list) -> str:
        if isinstance(ks, (ast.DefaultKey, ast.DontCare)):
            return "True"
        items = ks.items if isinstance(ks, ast.TupleKey) else [ks]
        conds = []
        for item, (k, t) in zip(items, keys):
            if isinstance(item, (ast.DefaultKey, ast.DontCare)):
                continue
            if isinstance(item, ast.Mask):
                m = self.const(item.mask)
                conds.append(f"({k} & {m}) == {self.const(item.value) & m}")
            elif isinstance(item, ast.Range):
                conds.append(f"{self.const(item.lo)} <= {k} <= {self.const(item.hi)}")
            else:
                conds.append(f"{k} == {self.const(item)!r}")
        return " and ".join(conds) if conds else "True"

    def const(self, e: ast.Expr) -> Any:
        v = const_value(e, self.cp.errors)
        if v is None:
            raise error_at(e, "expected a compile-time constant")
        return v

    def control(self, info) -> None:
        d = info.decl
        fl = self.frame_class(info)
        names = [_param_py(p) for p in d.params]
        sig = ", ".join(names + ["L"])
        pkt = next((_param_py(p) for p in d.params
                    if isinstance(p.type, ExternType) and p.type.decl.name == "packet_out"), "")
        outs = [p.decl_sym for p in d.params if p.direction in ("out", "inout") and _scalar(p.type)]
        ctx = _Ctx("control", info, sig, pkt, outs=outs)
        for a in info.actions:
            self.action(a, _Ctx("action", info, sig, pkt), sig)
        for t in info.tables:
            self.table(t, ctx)
        self.emit(f"def C_{_py(d.name)}({', '.join(names)}):")
        self.ind += 1
        self.emit(f"L = {fl}()" if fl else "L = None")
        if fl:
            self.frame_init(info, ctx)
        if self.trace:
            self.emit(f"LOG('control {d.name}: start')")
        self.block(d.body, ctx)
        self.return_outs(ctx)
        self.ind -= 1

    def action(self, a: Sym, ctx: _Ctx, prefix: str) -> None:
        d: ast.ActionDecl = a.node
        own = [p.decl_sym.pyname for p in d.params]
        sig = ", ".join(([prefix] if prefix else []) + own)
        ctx = _Ctx("action", ctx.block, ctx.ctl_args, ctx.pkt,
                   outs=[p.decl_sym for p in d.params if p.direction in ("out", "inout") and _scalar(p.type)])
        self.emit(f"def {a.pyname}({sig}):")
        self.ind += 1
        if self.trace:
            shown = [p.decl_sym.pyname for p in d.params if p.direction == ""]
            fmt = ", ".join(f"{p.name}=%s" for p in d.params if p.direction == "")
            self.emit(f"LOG('action {a.qname}({fmt})'" + "".join(f", {n}" for n in shown) + ")")
        self.block(d.body, ctx)
        self.return_outs(ctx)
        self.ind -= 1

    def return_outs(self, ctx: _Ctx) -> None:
        self.emit(f"return ({', '.join(s.pyname for s in ctx.outs)},)" if ctx.outs else "return")

    def function(self, f: Sym) -> None:
        d: ast.FunctionDecl = f.node
        ctx = _Ctx("function", outs=[p.decl_sym for p in d.params if p.direction in ("out", "inout") and _scalar(p.type)])
        if ctx.outs:
            raise error_at(d, "functions with out/inout scalar parameters are not supported by p4sim")
        self.emit(f"def {f.pyname}({', '.join(p.decl_sym.pyname for p in d.params)}):")
        self.ind += 1
        self.block(d.body, ctx)
        self.emit("return None")
        self.ind -= 1

    def table(self, t: Sym, ctx: _Ctx) -> None:
        d: ast.TableDecl = t.node
        info = t.value
        ts = f"TS_{_py(t.qname)}"
        self.emit(f"def {t.pyname}({ctx.ctl_args}):")
        self.ind += 1
        keys = []
        for k in d.keys:
            v = self.expr(k.expr, ctx)
            keys.append(f"(1 if {v} else 0)" if isinstance(k.expr.type, BoolType) else v)
        self.emit(f"e = {ts}.lookup(({''.join(k + ', ' for k in keys)}))")
        self.emit("if e is None:")
        self.emit(f"    a = {ts}.default_action; args = {ts}.default_args; hit = False")
        self.emit("else:")
        self.emit("    a = e.action; args = e.args; hit = True")
        if info.direct_counter:
            self.emit("    e.packets += 1; e.bytes += PK.length")
        if info.support_timeout:
            self.emit("    e.last_hit_ns = monotonic_ns()")
        if info.direct_meter:
            self.emit("PK.entry = e")
        if self.trace:
            self.emit(f"LOG('table {t.qname}: %s key=%s -> %s%s', 'hit' if hit else 'miss', "
                      f"({''.join(k + ', ' for k in keys)}), a, args)")
        first = True
        for name, asym in _unique_actions(d.allowed):
            call = f"{asym.pyname}({'' if asym in self.cp.top_actions else ctx.ctl_args + ', '}*args)"
            self.emit(f"{'if' if first else 'elif'} a == {name!r}: {call}")
            first = False
        self.emit("return hit, a")
        self.ind -= 1

    # ---- statements -------------------------------------------------------------
    def block(self, b: ast.Block, ctx: _Ctx) -> None:
        for s in b.stmts:
            self.stmt(s, ctx)

    def body(self, s: ast.Stmt, ctx: _Ctx) -> None:
        self.ind += 1
        start = len(self.lines)
        self.stmt(s, ctx)
        if len(self.lines) == start:
            self.emit("pass")
        self.ind -= 1

    def stmt(self, s: ast.Stmt, ctx: _Ctx) -> None:
        if isinstance(s, ast.Block):
            self.block(s, ctx)
        elif isinstance(s, ast.Assign):
            self.assign(s.lhs, s.rhs, ctx)
        elif isinstance(s, ast.CallStmt):
            self.call_stmt(s.call, ctx)
        elif isinstance(s, ast.If):
            self.emit(f"if {self.expr(s.cond, ctx)}:")
            self.body(s.then, ctx)
            while s.else_ is not None:
                if isinstance(s.else_, ast.If):
                    s = s.else_
                    self.emit(f"elif {self.expr(s.cond, ctx)}:")
                    self.body(s.then, ctx)
                else:
                    self.emit("else:")
                    self.body(s.else_, ctx)
                    break
        elif isinstance(s, ast.VarDecl):
            sym = s._sym
            if s.init is not None:
                self.assign_to(sym.pyname, sym.type, s.init, ctx, fresh=True)
            else:
                self.emit(f"{sym.pyname} = {self.init_value(sym.type)}")
        elif isinstance(s, ast.ConstDecl):
            pass                                      # folded where used
        elif isinstance(s, ast.Return):
            if ctx.kind == "function":
                self.emit(f"return {self.expr(s.expr, ctx) if s.expr is not None else 'None'}")
            else:
                self.return_outs(ctx)
        elif isinstance(s, ast.Exit):
            if self.trace:
                self.emit("LOG('exit')")
            self.emit("raise Exit()")
        elif isinstance(s, ast.Switch):
            self.switch(s, ctx)
        elif isinstance(s, ast.Empty):
            pass
        else:
            raise error_at(s, f"unsupported statement {type(s).__name__}")

    def switch(self, s: ast.Switch, ctx: _Ctx) -> None:
        v = self.tmp("sw")
        self.emit(f"{v} = {self.expr(s.expr, ctx)}")
        pending: list[str] = []
        first = True
        for case in s.cases:
            if case.label is None:
                label = None
            elif isinstance(s.expr.type, ActionRunType):
                label = repr(case.label.decl.qname)
            else:
                label = repr(self.const(case.label))
            if case.body is None:
                if label is not None:
                    pending.append(label)
                continue
            if label is None:
                self.emit("else:" if not first else "if True:")
            else:
                labels = pending + [label]
                cond = " or ".join(f"{v} == {lab}" for lab in labels)
                self.emit(f"{'if' if first else 'elif'} {cond}:")
            pending = []
            first = False
            self.body(case.body, ctx)

    def assign(self, lhs: ast.Expr, rhs: ast.Expr, ctx: _Ctx) -> None:
        if isinstance(lhs, ast.Slice):
            base = self.lvalue(lhs.expr, ctx)
            hi, lo = lhs.hi_v, lhs.lo_v
            m = _mask(hi - lo + 1) << lo
            full = _mask(lhs.expr.type.width)
            v = self.expr(rhs, ctx)
            new = f"({base} & {full ^ m}) | (({v} << {lo}) & {m})" if lo else f"({base} & {full ^ m}) | ({v} & {m})"
            if lhs.expr.type.signed:
                h = 1 << (lhs.expr.type.width - 1)
                new = f"((({new}) & {full}) ^ {h}) - {h}"
            self.emit(f"{base} = {new}")
            return
        self.assign_to(self.lvalue(lhs, ctx), lhs.type, rhs, ctx)

    def assign_to(self, target: str, t: Type, rhs: ast.Expr, ctx: _Ctx, fresh: bool = False) -> None:
        if isinstance(t, (StructType, StackType)):
            if isinstance(rhs, ast.ListExpr):
                if fresh:
                    self.emit(f"{target} = {self.init_value(t)}")
                for (fname, ft), item in zip(t.fields.items(), rhs.items):
                    self.assign_to(f"{target}.{attr(fname)}", ft, item, ctx)
                if is_header(t):
                    self.emit(f"{target}._v = True")
                return
            v = self.expr(rhs, ctx)
            self.emit(f"{target} = {v}._copy()" if fresh else f"{target}._set({v})")
            return
        self.emit(f"{target} = {self.expr(rhs, ctx)}")

    def lvalue(self, e: ast.Expr, ctx: _Ctx) -> str:
        if isinstance(e, ast.NameRef):
            return self.name(e)
        if isinstance(e, ast.Member):
            if isinstance(e.expr.type, StackType):
                base = self.lvalue(e.expr, ctx)
                return f"{base}.items[{base}.nxt - 1]" if e.name == "last" else f"{base}.items[{base}.nxt]"
            return f"{self.lvalue(e.expr, ctx)}.{attr(e.name)}"
        if isinstance(e, ast.Index):
            return f"{self.lvalue(e.expr, ctx)}.items[{self.expr(e.index, ctx)}]"
        raise error_at(e, "this expression cannot be assigned to")

    def name(self, e: ast.NameRef) -> str:
        sym = e.decl
        if sym.frame:
            return f"L.{attr(sym.name)}"
        return sym.pyname

    # ---- calls ----------------------------------------------------------------------
    def call_stmt(self, c: ast.Call, ctx: _Ctx) -> None:
        t: Target = c.target
        if t.kind == "action":
            self.call_action(c, ctx)
        elif t.kind == "table_apply":
            self.emit(f"{t.sym.pyname}({ctx.ctl_args})")
        elif t.kind == "header_method":
            base = self.expr(t.base, ctx)
            if t.name == "setValid":
                self.emit(f"{base}._v = True")
                self.union_siblings(t.base, ctx)
            elif t.name == "setInvalid":
                self.emit(f"{base}._v = False")
        elif t.kind == "stack_method":
            base = self.expr(t.base, ctx)
            self.emit(f"{base}.{t.name}({c.count}, {cls_name(t.base.type.elem)})")
        elif t.kind == "function":
            self.emit(self.expr(c, ctx))
        elif t.kind == "block_apply":
            self.call_block(c, ctx)
        elif t.kind in ("extern_func", "method"):
            self.extern_call(c, ctx)
        else:
            raise error_at(c, "unsupported call")

    def union_siblings(self, h: ast.Expr, ctx: _Ctx) -> None:
        if isinstance(h, ast.Member) and isinstance(h.expr.type, StructType) and h.expr.type.kind == "header_union":
            u = self.expr(h.expr, ctx)
            for other in h.expr.type.fields:
                if other != h.name:
                    self.emit(f"{u}.{attr(other)}._v = False")

    def call_action(self, c: ast.Call, ctx: _Ctx) -> None:
        a: Sym = c.target.sym
        d: ast.ActionDecl = a.node
        args = []
        outs = []
        for arg, p in zip(c.args, d.params):
            if p.direction in ("out", "inout") and _scalar(p.type):
                outs.append(arg)
            if p.direction == "out" and _scalar(p.type):
                args.append(self.init_value(p.type))
            else:
                args.append(self.expr(arg, ctx))
        prefix = "" if a in self.cp.top_actions else ctx.ctl_args
        call = f"{a.pyname}({', '.join(([prefix] if prefix else []) + args)})"
        if outs:
            r = self.tmp("r")
            self.emit(f"{r} = {call}")
            for i, o in enumerate(outs):
                self.emit(f"{self.lvalue(o, ctx)} = {r}[{i}]")
        else:
            self.emit(call)

    def call_block(self, c: ast.Call, ctx: _Ctx) -> None:
        """`inst.apply(...)` of a sub-parser or sub-control; scalar out/inout args copy out."""
        sym: Sym = c.target.sym
        params = sym.node.params
        outs = [a for a, p in zip(c.args, params) if p.direction in ("out", "inout") and _scalar(p.type)]
        args = [self.init_value(p.type) if p.direction == "out" and _scalar(p.type) else self.expr(a, ctx)
                for a, p in zip(c.args, params)]
        call = f"{sym.pyname}({', '.join(args)})"
        if outs and isinstance(sym.node, ast.ControlDecl):
            r = self.tmp("r")
            self.emit(f"{r} = {call}")
            for i, o in enumerate(outs):
                self.emit(f"{self.lvalue(o, ctx)} = {r}[{i}]")
        elif outs:
            raise error_at(c, "sub-parsers with out/inout scalar parameters are not supported by p4sim")
        else:
            self.emit(call)

    def data_bits(self, e: ast.Expr, ctx: _Ctx) -> tuple[str, str]:
        """Statements that pack a field list into an int; returns (value_var, nbits_var).

        Fields of invalid headers contribute nothing, as in BMv2's field lists; runs of
        fields of one header are packed by one statement under one validity test."""
        acc, n = self.tmp("acc"), self.tmp("n")
        self.emit(f"{acc} = 0; {n} = 0")
        pieces: list[tuple[str | None, str, int]] = []
        for item in (e.items if isinstance(e, ast.ListExpr) else [e]):
            self.pack_item(item, pieces, ctx)
        i = 0
        while i < len(pieces):
            owner = pieces[i][0]
            j = i
            while j < len(pieces) and pieces[j][0] == owner and pieces[j][2] > 0:
                j += 1
            if j == i:                           # a statement (a stack loop), not a value
                self.emit(pieces[i][1].format(acc=acc, n=n))
                i += 1
                continue
            run = pieces[i:j]
            total = sum(w for _, _, w in run)
            shift, parts = total, []
            for _, v, w in run:
                shift -= w
                parts.append(f"({v} << {shift})" if shift else v)
            line = f"{acc} = ({acc} << {total}) | {' | '.join(parts)}; {n} += {total}"
            self.emit(f"if {owner}._v: {line}" if owner else line)
            i = j
        return acc, n

    def pack_item(self, item: ast.Expr, pieces: list, ctx: _Ctx) -> None:
        """Flatten one field-list item into (validity owner, value, width) pieces."""
        t = item.type
        if is_header(t):
            h = self.expr(item, ctx)
            pieces.append((h, f"IV_{t.name}({h})", t.width))
        elif isinstance(t, StructType):
            for f, ft in t.fields.items():
                sub = ast.Member(item, f, pos=item.pos)
                sub.type = ft
                self.pack_item(sub, pieces, ctx)
        elif isinstance(t, StackType):
            s, w = self.expr(item, ctx), t.elem.width
            pieces.append((None, f"for _h in {s}.items:\n{'    ' * (self.ind + 1)}"
                                 f"if _h._v: {{acc}} = ({{acc}} << {w}) | IV_{t.elem.name}(_h); {{n}} += {w}", 0))
        elif isinstance(item, ast.ListExpr):
            for sub in item.items:
                self.pack_item(sub, pieces, ctx)
        else:
            if isinstance(t, BoolType):
                width, v = 1, f"(1 if {self.expr(item, ctx)} else 0)"
            elif isinstance(t, BitType):
                width, v = t.width, self.expr(item, ctx)
                if t.signed:
                    v = f"({v} & {_mask(width)})"
            elif isinstance(t, EnumType) and t.underlying:
                width, v = t.underlying.width, self.expr(item, ctx)
            else:
                raise error_at(item, f"cannot put a {t} in a field list (it needs a width)")
            owner = item.expr if isinstance(item, ast.Member) else None
            pieces.append((self.expr(owner, ctx) if owner is not None and is_header(owner.type) else None,
                           v, width))

    def data_bytes(self, e: ast.Expr, ctx: _Ctx) -> str:
        acc, n = self.data_bits(e, ctx)
        return f"to_bytes({acc}, {n})"

    def store(self, e: ast.Expr, value: str, ctx: _Ctx, fits: int | None = None) -> None:
        """Assign a computed int to an out argument of an extern, cut to its width
        (no cut when the value is known to be an unsigned `fits`-bit number that fits)."""
        if isinstance(e, ast.DontCare):
            return
        t = e.type
        if isinstance(t, BitType) and not (fits is not None and not t.signed and fits <= t.width):
            value = f"({value}) & {_mask(t.width)}"
            if t.signed:
                h = 1 << (t.width - 1)
                value = f"((({value}) ^ {h}) - {h})"
        if isinstance(e, ast.Slice):
            tmp = self.tmp("v")
            self.emit(f"{tmp} = {value}")
            ref = ast.NameRef(tmp)
            ref.type = e.type
            ref.decl = Sym("var", tmp, e.type, pyname=tmp)
            self.assign(e, ref, ctx)
            return
        self.emit(f"{self.lvalue(e, ctx)} = {value}")

    def extern_call(self, c: ast.Call, ctx: _Ctx) -> None:
        t: Target = c.target
        name = t.name
        a = c.args
        if t.kind == "method":
            base_t = t.base.type
            ext = base_t.decl.name
            inst = t.sym.pyname if t.sym is not None and t.sym.kind == "instance" else None
            if ext == "packet_in":
                pkt = self.expr(t.base, ctx)
                if name == "extract":
                    if len(a) != 1:
                        raise error_at(c, "extract of a varbit header is not supported by p4sim")
                    self.extract(a[0], pkt, ctx)
                elif name == "advance":
                    self.emit(f"{pkt}.advance({self.expr(a[0], ctx)})")
                else:
                    self.emit(self.expr(c, ctx))
                return
            if ext == "packet_out" and name == "emit":
                self.emit_value(a[0], self.expr(t.base, ctx), ctx)
                return
            if ext == "register":
                info = self.cp.info.registers[t.sym.qname]
                if name == "read":
                    i = self.tmp("i")
                    self.emit(f"{i} = {self.expr(a[1], ctx)}")
                    self.store(a[0], f"{inst}.values[{i}] if {i} < {info.size} else 0", ctx, info.bitwidth)
                    if self.trace:
                        self.emit(f"LOG('register {t.sym.qname}.read(%d)', {i})")
                else:
                    i = self.tmp("i")
                    self.emit(f"{i} = {self.expr(a[0], ctx)}")
                    v, vt = self.expr(a[1], ctx), a[1].type
                    if not (isinstance(vt, BitType) and not vt.signed and vt.width <= info.bitwidth):
                        v = f"({v}) & {_mask(info.bitwidth)}"
                    self.emit(f"if {i} < {info.size}: {inst}.values[{i}] = {v}")
                    if self.trace:
                        self.emit(f"LOG('register {t.sym.qname}.write(%d, %d)', {i}, {inst}.values[{i}] if {i} < {info.size} else 0)")
                return
            if ext == "counter":
                self.emit(f"{inst}.count({self.expr(a[0], ctx)}, PK.length)")
                if self.trace:
                    self.emit(f"LOG('counter {t.sym.qname}.count(%d)', {self.expr(a[0], ctx)})")
                return
            if ext == "direct_counter":
                return                                  # counted on every hit of its table
            if ext == "meter":
                self.store(a[1], f"{inst}.execute({self.expr(a[0], ctx)}, PK.length)", ctx)
                if self.trace:
                    self.emit(f"LOG('meter {t.sym.qname}.execute_meter(%d) -> %d', {self.expr(a[0], ctx)}, {self.expr(a[1], ctx)})")
                return
            if ext == "direct_meter":
                unit = self.cp.info.meters[t.sym.qname].unit
                units = "1" if unit == "PACKETS" else "PK.length"
                self.store(a[0], f"PK.entry.meter.execute({units}) if PK.entry is not None else 0", ctx)
                return
            raise error_at(c, f"{ext}.{name} is not supported by p4sim")
        if name == "mark_to_drop":
            sm = self.expr(a[0], ctx) if a else "PK.sm"
            self.emit(f"{sm}.egress_spec = 511; {sm}.mcast_grp = 0")
            if self.trace:
                self.emit("LOG('mark_to_drop')")
        elif name == "verify":
            self.emit(f"if not {self.expr(a[0], ctx)}: raise Reject({self.expr(a[1], ctx)})")
        elif name in ("verify_checksum", "update_checksum", "verify_checksum_with_payload",
                      "update_checksum_with_payload"):
            self.checksum(c, name, ctx)
        elif name == "hash":
            algo = self.algo(a[1])
            data = self.data_bytes(a[3], ctx)
            base, mx = self.expr(a[2], ctx), self.expr(a[4], ctx)
            h = self.tmp("h")
            self.emit(f"{h} = HASH[{algo!r}]({data})")
            m = self.tmp("m")
            self.emit(f"{m} = {mx}")
            self.store(a[0], f"({base} + {h} % {m}) if {m} else {base}", ctx)
            if self.trace:
                self.emit(f"LOG('hash {algo} = %d', {h})")
        elif name == "random":
            self.store(a[0], f"RNG.randint({self.expr(a[1], ctx)}, {self.expr(a[2], ctx)})", ctx)
        elif name == "digest":
            dt: StructType = c.digest_type
            data = a[1]
            if isinstance(data, ast.ListExpr):
                vals = [self.expr(x, ctx) for x in data.items]
            else:
                base = self.expr(data, ctx)
                vals = [f"{base}.{attr(f)}" for f in dt.fields]
            self.emit(f"PK.digests.append(({dt.name!r}, ({''.join(v + ', ' for v in vals)})))")
            if self.trace:
                self.emit(f"LOG('digest {dt.name}')")
        elif name in ("clone", "clone3", "clone_preserving_field_list"):
            kind = self.const(a[0])
            preserve = self.field_list_arg(a[2], ctx) if len(a) > 2 else "None"
            self.emit(f"PK.dirty = True; PK.clone = ({kind}, {self.expr(a[1], ctx)}, {preserve})")
            if self.trace:
                self.emit("LOG('clone session %s', PK.clone[1])")
        elif name in ("resubmit", "resubmit_preserving_field_list"):
            self.emit(f"PK.dirty = True; PK.resubmit = {self.field_list_arg(a[0], ctx) if a else 'None'}")
            self.emit("PK.resubmit_flag = True")
        elif name in ("recirculate", "recirculate_preserving_field_list"):
            self.emit(f"PK.dirty = True; PK.recirculate = {self.field_list_arg(a[0], ctx) if a else 'None'}")
            self.emit("PK.recirculate_flag = True")
        elif name == "truncate":
            self.emit(f"PK.dirty = True; PK.truncate = {self.expr(a[0], ctx)}")
        elif name == "log_msg":
            vals = []
            if len(a) > 1:
                items = a[1].items if isinstance(a[1], ast.ListExpr) else [a[1]]
                vals = [self.expr(x, ctx) for x in items]
            self.emit(f"LOG_MSG({self.expr(a[0], ctx)}, ({''.join(v + ', ' for v in vals)}))")
        elif name in ("assert", "assume"):
            self.emit(f"if not {self.expr(a[0], ctx)}: raise AssertFailed({name!r} + ' failed at {c.pos.file}:{c.pos.line}')")
        else:
            raise error_at(c, f"extern {name} is not supported by p4sim")

    def field_list_arg(self, e: ast.Expr, ctx: _Ctx) -> str:
        """A @field_list index, or (old clone3/resubmit forms) the metadata fields listed."""
        v = const_value(e, self.cp.errors)
        if v is not None and isinstance(e.type, (BitType, IntType)):
            return repr(int(v))
        items = e.items if isinstance(e, ast.ListExpr) else [e]
        names = []
        for item in items:
            if isinstance(item, ast.Member) and item.expr.type is self.cp.meta_type:
                names.append(attr(item.name))
            elif isinstance(item.type, StructType) and item.type is self.cp.meta_type:
                names.extend(attr(f) for f in item.type.fields)
        return repr(tuple(names))

    def algo(self, e: ast.Expr) -> str:
        if not isinstance(e, ast.TypeMember):
            raise error_at(e, "the hash algorithm must be a HashAlgorithm member")
        return e.name

    def checksum(self, c: ast.Call, name: str, ctx: _Ctx) -> None:
        a = c.args
        algo = self.algo(a[3])
        self.emit(f"if {self.expr(a[0], ctx)}:")
        self.ind += 1
        data = self.data_bytes(a[1], ctx)
        if name.endswith("_with_payload"):
            data = f"{data} + PK.payload"
        h = self.tmp("ck")
        if algo == "csum16" and not name.endswith("_with_payload"):
            acc, n = data[len("to_bytes("):-1].split(", ")
            self.emit(f"{h} = CSUM16_BITS({acc}, {n})")     # no bytes needed for the common case
        else:
            self.emit(f"{h} = HASH[{algo!r}]({data}) & {_mask(a[2].type.width)}")
        if name.startswith("verify"):
            self.emit(f"if {h} != {self.expr(a[2], ctx)}: PK.sm.checksum_error = 1")
            if self.trace:
                self.emit(f"LOG('verify_checksum: %s', 'ok' if {h} == {self.expr(a[2], ctx)} else 'mismatch')")
        else:
            self.store(a[2], h, ctx)
            if self.trace:
                self.emit(f"LOG('update_checksum -> 0x%x', {h})")
        self.ind -= 1

    def extract(self, target: ast.Expr, pkt: str, ctx: _Ctx) -> None:
        t = target.type
        if not is_header(t):
            raise error_at(target, f"extract needs a header, got {t}")
        if isinstance(target, ast.Member) and isinstance(target.expr.type, StackType) and target.name == "next":
            s = self.expr(target.expr, ctx)
            self.emit(f"if {s}.nxt >= {target.expr.type.size}: raise Reject(3)")
            self.emit(f"X_{t.name}({pkt}, {s}.items[{s}.nxt]); {s}.nxt += 1")
            return
        self.emit(f"X_{t.name}({pkt}, {self.expr(target, ctx)})")
        self.union_siblings(target, ctx)

    def emit_value(self, e: ast.Expr, out: str, ctx: _Ctx) -> None:
        t = e.type
        if is_header(t):
            self.emit(f"E_{t.name}({out}, {self.expr(e, ctx)})")
        elif isinstance(t, StackType):
            self.emit(f"for _h in {self.expr(e, ctx)}.items: E_{t.elem.name}({out}, _h)")
        elif isinstance(t, StructType):
            for f, ft in t.fields.items():
                sub = ast.Member(e, f, pos=e.pos)
                sub.type = ft
                self.emit_value(sub, out, ctx)
        else:
            raise error_at(e, f"emit needs a header, a stack or a struct of them, got {t}")

    # ---- expressions --------------------------------------------------------------------
    def expr(self, e: ast.Expr, ctx: _Ctx) -> str:
        t = e.type
        if not isinstance(t, (StructType, StackType, TupleType, ApplyResultType, ActionRunType)):
            v = const_value(e, self.cp.errors)
            if v is not None and not isinstance(e, ast.StrLit):
                return repr(v)
        method = getattr(self, "x_" + type(e).__name__, None)
        if method is None:
            raise error_at(e, f"unsupported expression {type(e).__name__}")
        return method(e, ctx)

    def x_StrLit(self, e: ast.StrLit, ctx) -> str:
        return repr(e.value)

    def x_NameRef(self, e: ast.NameRef, ctx) -> str:
        if e.decl.kind in ("var", "param"):
            return self.name(e)
        if e.decl.kind == "instance":
            return e.decl.pyname
        raise error_at(e, f"`{e.name}` cannot be used as a value here")

    def x_Member(self, e: ast.Member, ctx) -> str:
        bt = e.expr.type
        base = self.expr(e.expr, ctx)
        if isinstance(bt, StackType):
            if e.name == "next":
                return f"{base}.next_elem()"
            if e.name == "last":
                return f"{base}.last_elem()"
            if e.name == "lastIndex":
                return f"(({base}.nxt - 1) & 0xffffffff)"
            if e.name == "nextIndex":
                return f"{base}.nxt"
            if e.name == "size":
                return str(bt.size)
        if isinstance(bt, ApplyResultType):
            if e.name == "hit":
                return f"{base}[0]"
            if e.name == "miss":
                return f"(not {base}[0])"
            return f"{base}[1]"
        return f"{base}.{attr(e.name)}"

    def x_Index(self, e: ast.Index, ctx) -> str:
        return f"{self.expr(e.expr, ctx)}.items[{self.expr(e.index, ctx)}]"

    def x_Slice(self, e: ast.Slice, ctx) -> str:
        v = self.expr(e.expr, ctx)
        m = _mask(e.hi_v - e.lo_v + 1)
        return f"(({v} >> {e.lo_v}) & {m})" if e.lo_v else f"({v} & {m})"

    def x_Cond(self, e: ast.Cond, ctx) -> str:
        return f"({self.expr(e.then, ctx)} if {self.expr(e.cond, ctx)} else {self.expr(e.else_, ctx)})"

    def x_ListExpr(self, e: ast.ListExpr, ctx) -> str:
        return "(" + "".join(self.expr(x, ctx) + ", " for x in e.items) + ")"

    def x_Unary(self, e: ast.Unary, ctx) -> str:
        v = self.expr(e.expr, ctx)
        t = e.type
        if e.op == "!":
            return f"(not {v})"
        if e.op == "~":
            return f"(~{v})" if t.signed else f"({v} ^ {_mask(t.width)})"
        if isinstance(t, BitType):
            return self.wrap(f"-{v}", t)
        return f"(-{v})"

    def wrap(self, v: str, t: Type) -> str:
        if not isinstance(t, BitType):
            return f"({v})"
        if t.signed:
            h = 1 << (t.width - 1)
            return f"(((({v}) + {h}) & {_mask(t.width)}) - {h})"
        return f"(({v}) & {_mask(t.width)})"

    def x_Binary(self, e: ast.Binary, ctx) -> str:
        op, t = e.op, e.type
        a, b = self.expr(e.left, ctx), self.expr(e.right, ctx)
        if op == "&&":
            return f"({a} and {b})"
        if op == "||":
            return f"({a} or {b})"
        if op in ("==", "!="):
            if isinstance(e.left.type, (StructType, StackType)):
                return f"({'' if op == '==' else 'not '}{a}._eq({b}))"
            return f"({a} {op} {b})"
        if op in ("<", ">", "<=", ">="):
            return f"({a} {op} {b})"
        if op == "++":
            rt = e.right.type
            b_ = f"({b} & {_mask(rt.width)})" if rt.signed else b
            return self.wrap(f"({a} << {rt.width}) | {b_}", t) if t.signed else f"(({a} << {rt.width}) | {b_})"
        if not isinstance(t, BitType):
            py = {"/": "//"}.get(op, op)
            return f"({a} {py} {b})"
        w = t.width
        lc, rc = const_value(e.left, self.cp.errors), const_value(e.right, self.cp.errors)
        if op in ("+", "-", "|", "^", "<<", ">>") and rc == 0:
            return a                             # x + 0 (FOR_EACH-style macros make many)
        if op in ("+", "|", "^") and lc == 0:
            return b
        if op in ("+", "-", "*"):
            return self.wrap(f"{a} {op} {b}", t)
        if op in ("/", "%"):
            return f"({a} {'//' if op == '/' else '%'} {b})"
        if op in ("&", "|", "^"):
            return f"({a} {op} {b})"
        if op in ("|+|", "|-|"):
            lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if t.signed else (0, _mask(w))
            return f"min({hi}, max({lo}, {a} {'+' if op == '|+|' else '-'} {b}))"
        if op == "<<":
            amount = const_value(e.right, self.cp.errors)
            if amount is not None:
                return "0" if amount >= w else self.wrap(f"{a} << {amount}", t)
            return f"shl({a}, {b}, {w}, {int(t.signed)})"
        if op == ">>":
            return f"({a} >> {b})"
        raise error_at(e, f"unsupported operator {op}")

    def x_Cast(self, e: ast.Cast, ctx) -> str:
        t, src = e.type, e.expr.type
        v = self.expr(e.expr, ctx)
        if isinstance(t, BoolType):
            return v if isinstance(src, BoolType) else f"({v} != 0)"
        if isinstance(src, BoolType):
            return f"(1 if {v} else 0)"
        if isinstance(t, BitType):
            sw = src.width if isinstance(src, BitType) else (src.underlying.width if isinstance(src, EnumType) else None)
            if t.signed:
                h = 1 << (t.width - 1)
                if isinstance(src, BitType) and src.signed and src.width <= t.width:
                    return v
                return f"((({v} & {_mask(t.width)}) ^ {h}) - {h})"
            if sw is not None and sw <= t.width and not (isinstance(src, BitType) and src.signed):
                return v
            return f"({v} & {_mask(t.width)})"
        if isinstance(t, EnumType):
            return f"({v} & {_mask(t.underlying.width)})"
        return v

    def x_Call(self, e: ast.Call, ctx) -> str:
        t: Target = e.target
        if t.kind == "header_method" and t.name == "isValid":
            base = self.expr(t.base, ctx)
            bt = t.base.type
            if bt.kind == "header_union":
                return "(" + " or ".join(f"{base}.{attr(f)}._v" for f in bt.fields) + ")"
            return f"{base}._v"
        if t.kind == "table_apply":
            return f"{t.sym.pyname}({ctx.ctl_args})"
        if t.kind == "function":
            return f"{t.sym.pyname}({', '.join(self.expr(a, ctx) for a in e.args)})"
        if t.kind == "method" and t.base.type.decl.name == "packet_in":
            pkt = self.expr(t.base, ctx)
            if t.name == "length":
                return f"len({pkt}.data)"
            if t.name == "lookahead":
                rt = e.type
                if is_header(rt):
                    return f"LK_{rt.name}({pkt})"
                if isinstance(rt, BitType):
                    return f"{pkt}.peek({rt.width})"
                raise error_at(e, f"lookahead of a {rt} is not supported by p4sim")
        raise error_at(e, f"`{expr_text(e.func)}` cannot be used in an expression here")


def _param_py(p: ast.Param) -> str:
    return p.decl_sym.pyname


def _scalar(t: Type) -> bool:
    return isinstance(t, (BitType, IntType, BoolType, EnumType, ErrorType))


def _unique_actions(allowed: dict[str, Sym]) -> list[tuple[str, Sym]]:
    seen, out = set(), []
    for sym in allowed.values():
        if sym.qname not in seen:
            seen.add(sym.qname)
            out.append((sym.qname, sym))
    return out


class Program:
    """A checked, compiled P4 program: what a Switch loads and a device config carries."""

    FORMAT = "p4sim/1"

    def __init__(self, source: str, source_file: str) -> None:
        from .frontend.checker import check
        from .frontend.parser import parse_text
        self.source = source
        self.source_file = source_file
        with _internal_errors("checking", source_file):
            self.checked = check(parse_text(source, source_file))
        self._code: dict[bool, tuple[CompiledCode, Any]] = {}
        self.code(False)            # compile now, so errors show at load time

    @property
    def info(self):
        return self.checked.info

    def code(self, trace: bool = False) -> tuple[CompiledCode, Any]:
        """The generated module (and its Python code object), built once per trace setting."""
        if trace not in self._code:
            with _internal_errors("compiling", self.source_file):
                cc = compile_program(self.checked, trace)
                obj = compile(cc.source, f"<p4sim:{self.source_file}>", "exec")
            self._code[trace] = (cc, obj)
        return self._code[trace]

    def device_config(self) -> bytes:
        return json.dumps({"format": self.FORMAT, "source_file": self.source_file,
                           "source": self.source}).encode()

    @classmethod
    def from_device_config(cls, data: bytes) -> Program:
        try:
            cfg = json.loads(data.decode())
            if cfg.get("format") != cls.FORMAT:
                raise ValueError(f"format is {cfg.get('format')!r}, expected {cls.FORMAT!r}")
            return cls(cfg["source"], cfg["source_file"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
            raise P4Error(f"not a p4sim device config: {err}", "<device config>") from None


@contextlib.contextmanager
def _internal_errors(stage: str, source_file: str) -> Iterator[None]:
    """A p4sim bug, not the user's, still reaches the user as a P4Error, not a traceback."""
    try:
        yield
    except P4Error:
        raise
    except Exception as err:
        log.debug("internal error %s %s", stage, source_file, exc_info=True)
        raise P4Error(f"p4sim internal error while {stage} ({type(err).__name__}: {err}); "
                      "please report it with this program", source_file) from None


def compile_file(path: str, include_dirs: tuple[str, ...] = (), defines: tuple[str, ...] = ()) -> Program:
    """cpp + parse + check + compile one P4 file; raises P4Error for bad input."""
    from .frontend.preprocess import preprocess
    return Program(preprocess(str(path), include_dirs, defines), str(path))
