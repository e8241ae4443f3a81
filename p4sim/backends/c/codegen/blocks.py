"""Parsers, controls, actions, functions and tables as C functions.

A parser is one function whose states are labels (a top-level parser counts its states:
ParserTimeout after 1000); a control-level variable lives in the block's frame struct `L`,
which its actions and tables get with the control's parameters; a table builds its key
words, looks them up (runtime/tables.c) and runs the hit entry's action, or the default.
"""
from __future__ import annotations

from ....frontend import ast
from ....frontend.checker import Sym
from ....frontend.types import BoolType, ExternType, TupleType, VoidType
from ...python.blocks import MAX_PARSER_STEPS, is_value_set, key_header, live_statements
from ...python.common import unique_actions
from .common import (CodeGen, Ctx, cid, composite, is_packet_in, is_packet_out, literal, unsupported, utype, vtype,
                     wide, width_of)


def walk(node: object):
    """Every AST node under node (itself included)."""
    if isinstance(node, ast.Node):
        yield node
        for v in vars(node).values():
            for item in (v if isinstance(v, list) else [v]):
                if isinstance(item, ast.Node):
                    yield from walk(item)


class BlockGen(CodeGen):
    # ---- calling convention ------------------------------------------------------------
    def c_params(self, params: list[ast.Param], where: ast.Node) -> tuple[list[str], list[str], list[str], list[Sym]]:
        """(C parameter declarations, their names, the prologue that loads scalar out/inout
        parameters, those parameters)."""
        decls, names, prologue, outs = [], [], [], []
        for p in params:
            s, pt = p.decl_sym, p.type
            if is_packet_out(pt):
                continue
            if is_packet_in(pt):
                decls.append(f"p4s_pkt *{s.pyname}")
            elif isinstance(pt, (ExternType, TupleType)):
                raise unsupported(p, f"a parameter of type {pt}")
            elif composite(pt):
                decls.append(f"{self.ctype(pt)} *{s.pyname}")
            elif p.direction in ("out", "inout"):
                vt = vtype(pt, p)
                decls.append(f"{vt} *o_{s.pyname}")
                prologue.append(f"{vt} {s.pyname} = *o_{s.pyname};")
                outs.append(s)
            else:
                decls.append(f"{vtype(pt, p)} {s.pyname}")
            names.append(s.pyname)
        return decls, names, prologue, outs

    def ctl_decls(self, params: list[ast.Param]) -> list[str]:
        """What a control's actions and tables are given: its parameters as the control has
        them (scalars by value, as the Python backend passes them), then its frame."""
        decls = []
        for p in params:
            s, pt = p.decl_sym, p.type
            if is_packet_out(pt):
                continue
            if is_packet_in(pt):
                decls.append(f"p4s_pkt *{s.pyname}")
            elif composite(pt):
                decls.append(f"{self.ctype(pt)} *{s.pyname}")
            else:
                decls.append(f"{vtype(pt, p)} {s.pyname}")
        return decls

    def frame_struct(self, info) -> str:
        name = f"FL_{cid(info.decl.name)}"
        members = [f"{self.ctype(s.type) if composite(s.type) else vtype(s.type, s.node)} {cid(s.name)};"
                   for s in info.frame_vars] or ["uint8_t _unused;"]
        self.types.append(f"typedef struct {name} {{\n    " + "\n    ".join(members) + f"\n}} {name};")
        return name

    def open_frame(self, info, fl: str, ctx: Ctx) -> None:
        """The block's frame, zeroed, then its variables with initialisers, in order."""
        self.emit(f"{fl} L_frame;")
        self.emit("memset(&L_frame, 0, sizeof L_frame);")
        self.emit(f"{fl} *L = &L_frame;")
        for s in info.frame_vars:
            if s.node.init is not None:
                self.emit(f"L->{cid(s.name)} = {self.expr(s.node.init, ctx)};")

    def function_def(self, signature: str, body: list[str]) -> None:
        self.protos.append(signature + ";")
        self.funcs.append(signature + " {\n" + "\n".join(body) + "\n}")

    # ---- exits ----------------------------------------------------------------------------
    def may_exit(self, sym: Sym) -> bool:
        """Can calling sym (an action, function, control instance or table) end in `exit`?"""
        key = id(sym)
        if key in self.exits:
            return self.exits[key]
        self.exits[key] = False                    # P4 has no recursion; this ends any cycle
        if sym.kind == "table":
            result = any(self.may_exit(a) for _, a in unique_actions(sym.node.allowed))
        elif isinstance(sym.node, (ast.ActionDecl, ast.FunctionDecl, ast.ControlDecl)):
            result = self.body_exits(sym.node.body)
        else:
            result = False
        self.exits[key] = result
        return result

    def body_exits(self, body: ast.Node) -> bool:
        for n in walk(body):
            if isinstance(n, ast.Exit):
                return True
            if isinstance(n, ast.Call) and n.target is not None and n.target.kind in (
                    "action", "function", "block_apply", "table_apply") and self.may_exit(n.target.sym):
                return True
        return False

    # ---- parsers ----------------------------------------------------------------------------
    def parser(self, info) -> None:
        d = info.decl
        fl = self.frame_struct(info)
        decls, names, prologue, outs = self.c_params(d.params, d)
        top = d.name == self.cp.pipeline["parser"]
        pkt = next((p.decl_sym.pyname for p in d.params if is_packet_in(p.type)), "")
        ctx = Ctx("parser", info, names + ["L"], pkt, outs=outs)
        with self.capture() as body:
            with self.indented():
                for line in prologue:
                    self.emit(line)
                self.open_frame(info, fl, ctx)
                if top:
                    self.emit("unsigned _steps = 0;")
                for st in d.states:
                    self.emit(f"S_{cid(st.name)}: {{")
                    with self.indented():
                        if top:
                            self.emit(f"if (P4S_UNLIKELY(++_steps > {MAX_PARSER_STEPS})) p4s_reject(&P->pipe, 5);")
                        for s in live_statements(st.stmts):
                            self.stmt(s, ctx)
                        self.transition(st.transition, ctx)
                    self.emit("}")
                self.emit("S__end:")
                self.write_outs(ctx)
                self.emit(";")
        self.function_def(f"static void P_{cid(d.name)}({', '.join(['pl_t *P'] + decls)})", body)

    def state_ref(self, name: str) -> str:
        # p4c turns `transition reject` into accept for BMv2 ("Explicit transition to reject
        # not supported on this target"): parsing ends with NoError, the packet goes on.
        return "S__end" if name in ("accept", "reject") else f"S_{cid(name)}"

    def transition(self, tr: ast.Transition, ctx: Ctx) -> None:
        if tr.select is None:
            self.emit(f"goto {self.state_ref(tr.next_state)};")
            return
        keys = []
        for e in tr.select:
            k = self.tmp("k")
            self.emit(f"{vtype(e.type, e)} {k} = {self.expr(e, ctx)};")
            keys.append((k, e.type))
        for case in tr.cases:
            cond = self.keyset_cond(case.keyset, keys)
            do = f"goto {self.state_ref(case.next_state)};"
            if cond == "1":
                self.emit(do)
                return
            self.emit(f"if ({cond}) {do}")
        # No case matches and there is no default: BMv2 (p4c emits no default transition)
        # ends parsing with NoError, not error.NoMatch (uninit_and_errors #6 in the BMv2 traces).
        self.emit("goto S__end;")

    def key_words(self, keys: list) -> str:
        words = []
        for k, t in keys:
            if wide(t):
                words += [f"(uint64_t){k}", f"(uint64_t)((u128){k} >> 64)"]
            else:
                words.append(f"(uint64_t){k}")
        return f"(const uint64_t[]){{{', '.join(words)}}}"

    def keyset_cond(self, ks: ast.Expr, keys: list) -> str:
        if isinstance(ks, (ast.DefaultKey, ast.DontCare)):
            return "1"
        if is_value_set(ks):
            return f"p4s_vset_match(&P->pipe.vsets[{self.vset_id(ks.decl.qname)}], {self.key_words(keys)})"
        items = ks.items if isinstance(ks, ast.TupleKey) else [ks]
        conds = []
        for item, (k, t) in zip(items, keys):
            if isinstance(item, (ast.DefaultKey, ast.DontCare)):
                continue
            if is_value_set(item):
                conds.append(f"p4s_vset_match(&P->pipe.vsets[{self.vset_id(item.decl.qname)}], "
                             f"{self.key_words([(k, t)])})")
                continue
            if isinstance(t, BoolType):
                ut = "int"
            else:
                ut = utype(t, item)
            if isinstance(item, ast.Mask):
                m, v = self.const(item.mask), self.const(item.value)
                conds.append(f"((({ut}){k} & ({ut}){literal(m, t)}) == ({ut}){literal(v & m, t)})")
            elif isinstance(item, ast.Range):
                conds.append(f"({literal(self.const(item.lo), t)} <= {k} && {k} <= {literal(self.const(item.hi), t)})")
            else:
                conds.append(f"{k} == {literal(self.const(item), t)}")
        return " && ".join(conds) if conds else "1"

    # ---- controls, actions, functions -------------------------------------------------
    def control(self, info) -> None:
        d = info.decl
        fl = self.frame_struct(info)
        decls, names, prologue, outs = self.c_params(d.params, d)
        top = d.name in self.cp.pipeline.values()
        ctx = Ctx("control", info, names + ["L"], outs=outs, top=top)
        ctl = self.ctl_decls(d.params) + [f"{fl} *L"]
        for a in info.actions:
            self.action(a, ctx, ctl)
        for t in info.tables:
            self.table(t, ctx, ctl)
        with self.capture() as body:
            with self.indented():
                for line in prologue:
                    self.emit(line)
                self.open_frame(info, fl, ctx)
                self.block(d.body, ctx)
                self.end_body(ctx)
        self.function_def(f"static void C_{cid(d.name)}({', '.join(['pl_t *P'] + decls)})", body)

    def end_body(self, ctx: Ctx) -> None:
        if ctx.exit_used:
            self.emit("L_exit:")
        self.write_outs(ctx)
        self.emit(";")

    def action(self, a: Sym, outer: Ctx | None, ctl: list[str]) -> None:
        d: ast.ActionDecl = a.node
        decls, names, prologue, outs = self.c_params(d.params, d)
        ctx = Ctx("action", outer.block if outer else None, outer.ctl_args if outer else [], outs=outs)
        with self.capture() as body:
            with self.indented():
                for line in prologue:
                    self.emit(line)
                self.block(d.body, ctx)
                self.end_body(ctx)
        self.function_def(f"static void {a.pyname}({', '.join(['pl_t *P'] + ctl + decls)})", body)

    def function(self, f: Sym) -> None:
        d: ast.FunctionDecl = f.node
        decls, names, prologue, outs = self.c_params(d.params, d)
        rt = f.type
        void = rt is None or isinstance(rt, VoidType)
        ret = "void" if void else (self.ctype(rt) if composite(rt) else vtype(rt, d))
        ctx = Ctx("function", outs=outs, ret=None if void else rt)
        with self.capture() as body:
            with self.indented():
                for line in prologue:
                    self.emit(line)
                self.block(d.body, ctx)
                self.write_outs(ctx)
                if void:
                    self.emit(";")
                elif composite(rt):
                    self.emit(f"{ret} _none;")
                    self.emit("memset(&_none, 0, sizeof _none);")
                    self.emit("return _none;")
                else:
                    self.emit("return 0;")
        self.function_def(f"static {ret} {f.pyname}({', '.join(['pl_t *P'] + decls)})", body)

    # ---- tables -----------------------------------------------------------------------------
    def table(self, t: Sym, ctx: Ctx, ctl: list[str]) -> None:
        d: ast.TableDecl = t.node
        info = t.value
        tid = self.table_id(t.qname)
        tctx = Ctx("control", ctx.block, ctx.ctl_args)
        with self.capture() as body:
            with self.indented():
                self.table_body(d, info, tid, tctx)
        self.function_def(f"static int64_t T_{cid(t.qname)}({', '.join(['pl_t *P'] + ctl)})", body)

    def table_body(self, d: ast.TableDecl, info, tid: int, ctx: Ctx) -> None:
        keys = [k for k in d.keys if k.match_kind != "selector"]
        nkw = sum(2 if wide(k.expr.type) else 1 for k in keys)
        if len(keys) > 64 or nkw > 128:
            raise unsupported(d, f"table {d.name} with {len(keys)} keys")
        self.emit(f"uint64_t _key[{max(nkw, 1)}];")
        at = 0
        for k in keys:
            kt = k.expr.type
            if kt is not None and getattr(kt, "signed", False):
                raise unsupported(k, "a signed table key")
            v = self.expr(k.expr, ctx)
            if isinstance(kt, BoolType):
                v = f"({v} ? 1 : 0)"
            owner = key_header(k.expr)
            if owner is not None:
                # BMv2 builds a key from an invalid header's fields as zeros, though an
                # expression would read the stale values (table_matching #8 in the traces).
                v = f"({self.expr(owner, ctx)}._v ? {v} : 0)"
            if wide(kt):
                tmp = self.tmp("kw")
                self.emit(f"u128 {tmp} = {v};")
                self.emit(f"_key[{at}] = (uint64_t){tmp}; _key[{at + 1}] = (uint64_t)({tmp} >> 64);")
                at += 2
            else:
                self.emit(f"_key[{at}] = (uint64_t){v};")
                at += 1
        self.emit(f"p4s_table *_t = &P->pipe.tables[{tid}];")
        self.emit("p4s_entry *e = p4s_lookup(_t, _key);")
        run = "e"
        if info.implementation:
            ap = self.cp.info.action_profiles[info.implementation]
            self.emit("p4s_member *em = NULL;")
            self.emit("if (e != NULL) {")
            with self.indented():
                self.emit("uint64_t _h = 0;")
                if ap.with_selector:
                    # A group runs the member the selector keys' hash picks, hashed as BMv2
                    # hashes a selector's field list.
                    self.emit("if (e->group >= 0) {")
                    with self.indented():
                        selected = ast.ListExpr([k.expr for k in d.keys if k.match_kind == "selector"])
                        buf, n = self.data_bits(selected, ctx, skip_invalid=False)
                        self.emit(f"_h = p4s_hash(P->pipe.core, {self.algorithm(ap.algorithm)}, {buf}, {n}, NULL, 0);")
                    self.emit("}")
                self.emit(f"em = p4s_profile_choose(&P->pipe.profiles[{self.profile_id(ap.name)}], e, _h);")
                self.emit("if (em == NULL) e = NULL;")
            self.emit("}")
            run = "em"
        self.emit("int32_t _a;")
        self.emit("const uint64_t *_args;")
        self.emit("int _hit;")
        self.emit("if (e == NULL) {")
        self.emit("    _a = _t->default_action; _args = _t->default_args; _hit = 0;")
        self.emit("} else {")
        self.emit(f"    _a = {run}->action; _args = {run}->args; _hit = 1;")
        if info.direct_counter:
            self.emit("    e->d.packets++; e->d.bytes += P->pipe.pk.length;")
        if info.support_timeout:
            self.emit("    e->d.last_hit_ns = p4s_clock_ns(P->pipe.core);")
        self.emit("}")
        if info.direct_meter:
            self.emit("P->pipe.pk.entry = e;")
        self.emit("switch (_a) {")
        for name, asym in unique_actions(d.allowed):
            self.emit(f"case {self.action_id(name)}: {{")
            with self.indented():
                self.gen_call(asym, asym.node.params, d.bound.get(name, []), ctx, data=self.action_data(asym))
            self.emit("    break;")
            self.emit("}")
        self.emit("default:")
        self.emit("    break;")
        self.emit("}")
        self.emit("return ((int64_t)_a << 1) | _hit;")
        if ctx.exit_used:
            self.emit("L_exit:")
            self.emit("return 0;")

    def action_data(self, a: Sym) -> list[str]:
        """C values of an action's control-plane parameters from the entry's words `_args`."""
        out, at = [], 0
        for p in a.node.params:
            if p.direction != "":
                continue
            pt = p.type
            if wide(pt):
                v = f"P4S_U128(_args[{at + 1}], _args[{at}])"
                out.append(f"((i128){v})" if pt.signed else v)
                at += 2
            else:
                width_of(pt, p)
                out.append(f"(({vtype(pt)})_args[{at}])")
                at += 1
        return out

    def algorithm(self, name: str) -> str:
        from .externs import ALGORITHMS
        if name not in ALGORITHMS:
            raise unsupported(self.where, f"selector algorithm {name}")
        return ALGORITHMS[name]

