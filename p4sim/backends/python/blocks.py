"""Parsers, controls, actions, functions and tables as generated Python functions."""
from __future__ import annotations

from ...frontend import ast
from ...ir import ActionProfileInfo
from ...frontend.checker import Sym
from ...frontend.types import BitType, BoolType, ExternType, is_header
from .common import CodeGen, Ctx, attr, mask, mentions, param_py, path_of, py_ident, scalar, unique_actions

MAX_PARSER_STEPS = 1000          # a parser that loops longer fails with ParserTimeout


def is_value_set(e: ast.Expr) -> bool:
    return isinstance(e, ast.NameRef) and e.decl is not None and e.decl.kind == "value_set"


def key_header(e: ast.Expr) -> ast.Expr | None:
    """The header whose field (or a slice of it) a table key reads, if any."""
    if isinstance(e, ast.Slice):
        e = e.expr
    if isinstance(e, ast.Member) and is_header(e.expr.type):
        return e.expr
    return None


def live_statements(stmts: list[ast.Stmt]) -> list[ast.Stmt]:
    """A parser state's statements without the stores p4c drops as dead.

    p4c's def-use analysis ignores that verify() or a failing extract ends the state,
    so `meta.x = 1; verify(...); meta.x = 2;` loses its first store even when verify
    fails (uninit_and_errors #2 in the BMv2 traces). BMv2 runs what p4c leaves."""
    out = []
    for i, s in enumerate(stmts):
        if isinstance(s, ast.Assign) and _overwritten(s.lhs, stmts[i + 1:]):
            continue
        out.append(s)
    return out


def _overwritten(lhs: ast.Expr, rest: list[ast.Stmt]) -> bool:
    path = path_of(lhs)
    if path is None:
        return False
    for s in rest:
        if isinstance(s, ast.Assign) and path_of(s.lhs) == path and not mentions(s.rhs, path):
            return True
        if mentions(s, path):
            return False
    return False


class BlockGen(CodeGen):
    # ---- blocks -------------------------------------------------------------------
    def frame_class(self, info, params: list[Sym] = ()) -> str | None:
        """The class of a block's frame L: its variables, and `params` (see framed_params)."""
        held = list(info.frame_vars) + list(params)
        if not held:
            return None
        name = f"FL_{py_ident(info.decl.name)}"
        self.emit(f"class {name}:")
        self.ind += 1
        self.emit(f"__slots__ = {tuple(attr(s.name) for s in held)!r}")
        self.emit("def __init__(self):")
        self.ind += 1
        for s in held:
            self.emit(f"self.{attr(s.name)} = {self.init_value(s.type)}")
        self.ind -= 2
        return name

    def frame_init(self, info, ctx: Ctx) -> None:
        """Initialise control-level variables that have initialisers, per invocation."""
        for s in info.frame_vars:
            if s.node.init is not None:
                self.assign_to(f"L.{attr(s.name)}", s.type, s.node.init, ctx)

    def parser(self, info) -> None:
        d = info.decl
        top = d.name == self.cp.pipeline["parser"]
        sub = self.callee_ctx("parser", d.params)
        framed = [] if top else sub.outs
        self.framed_params.update(id(s) for s in framed)
        fl = self.frame_class(info, framed)
        names = [param_py(p) for p in d.params]
        pkt = names[0]
        sig = ", ".join(names + ["L"])
        ctx = Ctx("parser", info, sig, pkt)
        for st in d.states:
            self.emit(f"def PS_{py_ident(d.name)}_{st.name}({sig}):")
            self.ind += 1
            with self.local_aliases():
                if self.trace:
                    self.emit(f"LOG('parser {d.name}: state {st.name}')")
                for s in live_statements(st.stmts):
                    self.stmt(s, ctx)
                self.transition(st.transition, d.name, ctx)
            self.ind -= 1
        self.emit(f"def P_{py_ident(d.name)}({', '.join(names)}):")
        self.ind += 1
        self.emit(f"L = {fl}()" if fl else "L = None")
        for s in framed:
            if s.direction == "inout":
                self.emit(f"L.{attr(s.name)} = {s.pyname}")
        if fl:
            self.frame_init(info, ctx)
        self.emit(f"st = PS_{py_ident(d.name)}_start")
        self.emit("n = 0")
        if not top:                                   # a sub-parser: errors end the top parser
            self.emit("while st is not None:")
            self.emit(f"    st = st({sig})")
            self.emit("return (" + "".join(f"L.{attr(s.name)}, " for s in framed) + ")" if framed else "return")
            self.ind -= 1
            return
        self.emit("try:")
        self.emit("    while st is not None:")
        self.emit("        n += 1")
        self.emit(f"        if n > {MAX_PARSER_STEPS}: raise Reject(5)")
        self.emit(f"        st = st({sig})")
        self.emit("except Reject as r:")
        self.emit("    if r.code is not None:")
        self.emit(f"        {names[3]}.parser_error = r.code")
        if self.trace:
            self.emit("    LOG('parser error %s', ERROR_NAMES.get(r.code, r.code))")
        self.ind -= 1

    def state_ref(self, parser: str, name: str) -> str:
        if name in ("accept", "reject"):
            return "None"
        return f"PS_{py_ident(parser)}_{name}"

    def transition(self, tr: ast.Transition, parser: str, ctx: Ctx) -> None:
        # p4c turns `transition reject` into accept for BMv2 ("Explicit transition to reject
        # not supported on this target"): parsing ends with NoError, the packet goes on.
        if tr.select is None:
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
            do = f"return {self.state_ref(parser, target)}"
            if self.trace:
                do = f"LOG('select %s -> {target}', ({''.join(k + ', ' for k, _ in keys)})); {do}"
            if cond == "True":
                self.emit(do)
                return
            self.emit(f"if {cond}: {do}")
        # No case matches and there is no default: BMv2 (p4c emits no default transition)
        # ends parsing with NoError, not error.NoMatch (uninit_and_errors #6 in the BMv2 traces).
        if self.trace:
            self.emit("LOG('select: no case matches: accept')")
        self.emit("return None")

    def keyset_cond(self, ks: ast.Expr, keys: list) -> str:
        if isinstance(ks, (ast.DefaultKey, ast.DontCare)):
            return "True"
        if is_value_set(ks):
            return f"{ks.decl.pyname}.matches(({''.join(k + ', ' for k, _ in keys)}))"
        items = ks.items if isinstance(ks, ast.TupleKey) else [ks]
        conds = []
        for item, (k, t) in zip(items, keys):
            if isinstance(item, (ast.DefaultKey, ast.DontCare)):
                continue
            if is_value_set(item):
                conds.append(f"{item.decl.pyname}.matches(({k},))")
                continue
            if isinstance(item, ast.Mask):
                m = self.const(item.mask)
                conds.append(f"({k} & {m}) == {self.const(item.value) & m}")
            elif isinstance(item, ast.Range):
                conds.append(f"{self.const(item.lo)} <= {k} <= {self.const(item.hi)}")
            else:
                conds.append(f"{k} == {self.const(item)!r}")
        return " and ".join(conds) if conds else "True"

    def control(self, info) -> None:
        d = info.decl
        fl = self.frame_class(info)
        names = [param_py(p) for p in d.params]
        sig = ", ".join(names + ["L"])
        pkt = next((param_py(p) for p in d.params
                    if isinstance(p.type, ExternType) and p.type.decl.name == "packet_out"), "")
        ctx = self.callee_ctx("control", d.params)
        ctx.block, ctx.ctl_args, ctx.pkt = info, sig, pkt
        if d.name in self.cp.pipeline.values():
            ctx.exits = False           # the pipeline calls it and catches Exit itself
        for a in info.actions:
            self.action(a, Ctx("action", info, sig, pkt), sig)
        for t in info.tables:
            self.table(t, ctx)
        self.emit(f"def C_{py_ident(d.name)}({', '.join(names)}):")
        self.ind += 1
        with self.local_aliases():
            self.emit(f"L = {fl}()" if fl else "L = None")
            if fl:
                self.frame_init(info, ctx)
            if self.trace:
                self.emit(f"LOG('control {d.name}: start')")
            self.callee_body(d.body, ctx)
        self.ind -= 1

    def action(self, a: Sym, ctx: Ctx, prefix: str) -> None:
        d: ast.ActionDecl = a.node
        own = [p.decl_sym.pyname for p in d.params]
        sig = ", ".join(([prefix] if prefix else []) + own)
        outer = ctx
        ctx = self.callee_ctx("action", d.params)
        ctx.block, ctx.ctl_args, ctx.pkt = outer.block, outer.ctl_args, outer.pkt
        self.emit(f"def {a.pyname}({sig}):")
        self.ind += 1
        for p in d.params:
            if p.direction == "" and isinstance(p.type, BitType) and p.type.signed:
                # The control plane gives an int<W> argument as its bits; code reads it signed.
                h, py = 1 << (p.type.width - 1), p.decl_sym.pyname
                self.emit(f"{py} = (({py} + {h}) & {mask(p.type.width)}) - {h}")
        with self.local_aliases():
            if self.trace:
                shown = [p.decl_sym.pyname for p in d.params if p.direction == ""]
                fmt = ", ".join(f"{p.name}=%s" for p in d.params if p.direction == "")
                self.emit(f"LOG('action {a.qname}({fmt})'" + "".join(f", {n}" for n in shown) + ")")
            self.callee_body(d.body, ctx)
        self.ind -= 1

    def callee_ctx(self, kind: str, params: list[ast.Param]) -> Ctx:
        """How a callable hands its results back (see statements.StmtGen.gen_call): scalar
        out/inout values are returned; an action or control with out/inout parameters
        also says whether it ended in `exit`, because the caller copies out even then."""
        directional = [p for p in params if p.direction in ("out", "inout")]
        return Ctx(kind, outs=[p.decl_sym for p in directional if scalar(p.type)],
                   returns=kind == "function", exits=bool(directional) and kind in ("action", "control"))

    def callee_body(self, body: ast.Block, ctx: Ctx) -> None:
        if not ctx.exits:
            self.block(body, ctx)
            self.return_outs(ctx)
            return
        self.emit("try:")
        self.ind += 1
        start = len(self.lines)
        self.block(body, ctx)
        if len(self.lines) == start:
            self.emit("pass")
        self.ind -= 1
        self.emit("except Exit:")
        self.ind += 1
        self.return_outs(ctx, exited=True)
        self.ind -= 1
        self.return_outs(ctx)

    def return_outs(self, ctx: Ctx, value: str = "None", exited: bool = False) -> None:
        parts = ([repr(exited)] if ctx.exits else []) + ([value] if ctx.returns else []) \
            + [s.pyname for s in ctx.outs]
        if not parts:
            self.emit("return")
        elif ctx.returns and len(parts) == 1:
            self.emit(f"return {value}")
        else:
            self.emit(f"return ({', '.join(parts)},)")

    def function(self, f: Sym) -> None:
        d: ast.FunctionDecl = f.node
        ctx = self.callee_ctx("function", d.params)
        self.emit(f"def {f.pyname}({', '.join(p.decl_sym.pyname for p in d.params)}):")
        self.ind += 1
        with self.local_aliases():
            self.callee_body(d.body, ctx)
        self.ind -= 1

    def member_of_entry(self, d: ast.TableDecl, ap: ActionProfileInfo, ctx: Ctx) -> None:
        """Emit `em`, the member the hit entry `e` runs; a group's is chosen by the selector
        keys' hash as BMv2 hashes a selector's field list (`e` becomes None for an empty group)."""
        self.emit("if e is not None:")
        self.ind += 1
        if ap.with_selector:
            self.emit("if e.group is not None:")
            self.ind += 1
            selected = ast.ListExpr([k.expr for k in d.keys if k.match_kind == "selector"])
            self.emit(f"h = HASH[{ap.algorithm!r}]({self.data_bytes(selected, ctx, skip_invalid=False)})")
            self.ind -= 1
            self.emit("else: h = 0")
        else:
            self.emit("h = 0")
        self.emit(f"em = AP_{py_ident(ap.name)}.choose(e, h)")
        self.emit("if em is None: e = None")
        self.ind -= 1

    def table(self, t: Sym, ctx: Ctx) -> None:
        d: ast.TableDecl = t.node
        info = t.value
        ts = f"TS_{py_ident(t.qname)}"
        self.emit(f"def {t.pyname}({ctx.ctl_args}):")
        self.ind += 1
        keys = []
        for k in d.keys:
            if k.match_kind == "selector":
                continue                  # hashed to pick a group's member, not matched
            v = self.expr(k.expr, ctx)
            if isinstance(k.expr.type, BoolType):
                v = f"(1 if {v} else 0)"
            elif isinstance(k.expr.type, BitType) and k.expr.type.signed:
                v = f"({v} & {mask(k.expr.type.width)})"     # entries hold the bits, unsigned
            owner = key_header(k.expr)
            if owner is not None:
                # BMv2 builds a key from an invalid header's fields as zeros, though an
                # expression would read the stale values (table_matching #8 in the traces).
                v = f"({v} if {self.expr(owner, ctx)}._v else 0)"
            keys.append(v)
        self.emit(f"e = {ts}.lookup(({''.join(k + ', ' for k in keys)}))")
        run = "e"
        if info.implementation:
            self.member_of_entry(d, self.cp.info.action_profiles[info.implementation], ctx)
            run = "em"
        self.emit("if e is None:")
        self.emit(f"    a = {ts}.default_action; args = {ts}.default_args; hit = False")
        self.emit("else:")
        self.emit(f"    a = {run}.action; args = {run}.args; hit = True")
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
        for name, asym in unique_actions(d.allowed):
            self.emit(f"{'if' if first else 'elif'} a == {name!r}:")
            self.ind += 1
            self.gen_call(asym, asym.node.params, d.bound.get(name, []), ctx, data="*args")
            self.ind -= 1
            first = False
        self.emit("return hit, a")
        self.ind -= 1
