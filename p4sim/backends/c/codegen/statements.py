"""Statements and calls (actions, functions, sub-blocks) with P4's copy-in/copy-out, as C.

Calling convention: every generated function takes the pipeline `P` first; a header, struct
or stack parameter is a pointer (the caller passes a copy, and copies an out/inout one back);
a scalar in parameter is a value; a scalar out/inout parameter is a pointer `o_<name>` the
callee loads into a local and stores back when it returns, also when it ends in `exit`.
`exit` sets P->pipe.exiting and jumps to the function's L_exit; callers test the flag after
every call that can exit, so the exit leaves every enclosing control, as in P4.
"""
from __future__ import annotations

from ....frontend import ast
from ....frontend.checker import Sym, Target
from ....frontend.types import ActionRunType, BitType, StackType, StructType, Type, VoidType
from .common import CodeGen, Ctx, cid, composite, is_packet_out, literal, mask, unsupported, utype, vtype, width_of


MAX_LOOP_ITERATIONS = 1 << 16      # as the Python backend's: a for loop that runs longer fails the packet


def is_union_member(e: ast.Expr) -> bool:
    return isinstance(e, ast.Member) and isinstance(e.expr.type, StructType) and e.expr.type.kind == "header_union"


class StmtGen(CodeGen):
    # ---- statements -------------------------------------------------------------
    def block(self, b: ast.Block, ctx: Ctx) -> None:
        for s in b.stmts:
            self.stmt(s, ctx)

    def body(self, s: ast.Stmt, ctx: Ctx) -> None:
        """A nested statement in braces."""
        self.emit("{")
        with self.indented():
            self.stmt(s, ctx)
        self.emit("}")

    def stmt(self, s: ast.Stmt, ctx: Ctx) -> None:
        self.where = s
        if isinstance(s, ast.Block):
            self.emit("{")
            with self.indented():
                self.block(s, ctx)
            self.emit("}")
        elif isinstance(s, ast.Assign):
            self.assign(s.lhs, s.rhs, ctx)
        elif isinstance(s, ast.CallStmt):
            self.call_stmt(s.call, ctx)
        elif isinstance(s, ast.If):
            self.if_chain(s, ctx)
        elif isinstance(s, ast.VarDecl):
            self.var_decl(s, ctx)
        elif isinstance(s, ast.ConstDecl):
            pass                                      # folded where used
        elif isinstance(s, ast.Return):
            self.return_stmt(s, ctx)
        elif isinstance(s, ast.Exit):
            if ctx.kind in ("function", "parser"):
                raise unsupported(s, f"exit in a {ctx.kind}")
            ctx.exit_used = True
            self.emit("P->pipe.exiting = 1;")
            self.emit("goto L_exit;")
        elif isinstance(s, ast.Switch):
            self.switch(s, ctx)
        elif isinstance(s, ast.Empty):
            pass
        elif isinstance(s, ast.For):
            self.for_loop(s, ctx)
        elif isinstance(s, ast.ForIn):
            self.for_in_loop(s, ctx)
        elif isinstance(s, ast.Break):
            self.emit("break;")
        elif isinstance(s, ast.Continue):
            self.emit("continue;")
        else:
            raise unsupported(s, f"statement {type(s).__name__}")

    def for_loop(self, s: ast.For, ctx: Ctx) -> None:
        """As the Python backend: the update at the top of every iteration but the first (so
        `continue` runs it), then the condition; a loop that never ends fails the packet."""
        n, first = self.tmp("n"), self.tmp("first")
        self.emit("{")
        with self.indented():
            for init in s.init:
                self.stmt(init, ctx)
            self.emit(f"uint32_t {n} = 0;")
            self.emit(f"for (int {first} = 1;; {first} = 0) {{")
            with self.indented():
                where = f"{s.pos.file}:{s.pos.line}".replace("\\", "/").replace('"', "'")
                self.emit(f'if (P4S_UNLIKELY(++{n} > {MAX_LOOP_ITERATIONS})) '
                          f'p4s_fault(&P->pipe, "a for loop ran {MAX_LOOP_ITERATIONS} times (at {where})");')
                if s.update:
                    self.emit(f"if (!{first}) {{")
                    with self.indented():
                        for update in s.update:
                            self.stmt(update, ctx)
                    self.emit("}")
                if s.cond is not None:
                    self.emit(f"if (!{self.expr(s.cond, ctx)}) break;")
                self.stmt(s.body, ctx)
            self.emit("}")
        self.emit("}")

    def for_in_loop(self, s: ast.ForIn, ctx: Ctx) -> None:
        """x takes each value of lo..hi (bounds evaluated once), or a copy of each element of
        a stack in turn."""
        sym = s.var._sym
        c = s.collection
        self.emit("{")
        with self.indented():
            if isinstance(c, ast.Range):
                lo, hi, i = self.tmp("lo"), self.tmp("hi"), self.tmp("i")
                self.emit(f"i128 {lo} = (i128){self.expr(c.lo, ctx)};")
                self.emit(f"i128 {hi} = (i128){self.expr(c.hi, ctx)};")
                self.emit(f"for (i128 {i} = {lo}; {i} <= {hi}; {i}++) {{")
                value = f"({vtype(sym.type, s)}){i}"
            else:
                stack, i = self.tmp("st"), self.tmp("i")
                self.emit(f"{self.ctype(c.type)} *{stack} = &{self.expr(c, ctx)};")
                self.emit(f"for (int {i} = 0; {i} < {c.type.size}; {i}++) {{")
                value = f"{stack}->e[{i}]"
            with self.indented():
                ct = self.ctype(sym.type) if composite(sym.type) else vtype(sym.type, s)
                self.emit(f"{ct} {sym.pyname} = {value};")
                self.stmt(s.body, ctx)
            self.emit("}")
        self.emit("}")

    def var_decl(self, s: ast.VarDecl, ctx: Ctx) -> None:
        sym = s._sym
        t = sym.type
        ct = self.ctype(t) if composite(t) else vtype(t, s)
        if s.init is not None:
            v = self.expr(s.init, ctx)
            self.emit(f"{ct} {sym.pyname} = {v};")
        elif composite(t):
            self.emit(f"{ct} {sym.pyname};")
            self.emit(f"memset(&{sym.pyname}, 0, sizeof {sym.pyname});")
        else:
            self.emit(f"{ct} {sym.pyname} = 0;")

    def if_chain(self, s: ast.If, ctx: Ctx) -> None:
        """if / else if / else; an `else if` whose condition needs statements first (a call
        with out arguments) nests as `else { <statements> if ... }`."""
        cond = self.expr(s.cond, ctx)
        self.emit(f"if ({cond}) {{")
        with self.indented():
            self.stmt(s.then, ctx)
        while s.else_ is not None:
            if not isinstance(s.else_, ast.If):
                self.emit("} else {")
                with self.indented():
                    self.stmt(s.else_, ctx)
                break
            s = s.else_
            with self.capture() as pre:
                with self.indented():
                    cond = self.expr(s.cond, ctx)
            if pre:
                self.emit("} else {")
                self.lines.extend(pre)
                with self.indented():
                    self.emit(f"if ({cond}) {{")
                    with self.indented():
                        self.stmt(s.then, ctx)
                    rest = s.else_
                    if rest is not None:
                        self.emit("} else {")
                        with self.indented():
                            self.stmt(rest, ctx)
                    self.emit("}")
                break
            self.emit(f"}} else if ({cond}) {{")
            with self.indented():
                self.stmt(s.then, ctx)
        self.emit("}")

    def switch(self, s: ast.Switch, ctx: Ctx) -> None:
        v = self.tmp("sw")
        if isinstance(s.expr.type, ActionRunType):
            self.emit(f"int64_t {v} = {self.expr(s.expr, ctx)};")
        else:
            self.emit(f"{vtype(s.expr.type, s)} {v} = {self.expr(s.expr, ctx)};")
        pending: list[str] = []
        first = True
        for case in s.cases:
            if case.label is None:
                label = None
            elif isinstance(s.expr.type, ActionRunType):
                label = str(self.action_id(case.label.decl.qname))
            else:
                label = literal(self.const(case.label), s.expr.type)
            if case.body is None:
                if label is not None:
                    pending.append(label)
                continue
            if label is None:
                self.emit("if (1) {" if first else "else {")
            else:
                cond = " || ".join(f"{v} == {lab}" for lab in pending + [label])
                self.emit(f"{'if' if first else 'else if'} ({cond}) {{")
            pending = []
            first = False
            with self.indented():
                self.block(case.body, ctx)
            self.emit("}")

    def assign(self, lhs: ast.Expr, rhs: ast.Expr, ctx: Ctx) -> None:
        if isinstance(lhs, ast.Slice):
            self.assign_value(lhs, self.expr(rhs, ctx), ctx)
            return
        target = self.lvalue(lhs, ctx)
        self.emit(f"{target} = {self.expr(rhs, ctx)};")
        if is_union_member(lhs):
            # A valid header assigned to a union member makes the other members invalid.
            self.emit(f"if ({target}._v) {{")
            with self.indented():
                self.union_siblings(lhs, ctx)
            self.emit("}")

    def assign_value(self, lhs: ast.Expr, v: str, ctx: Ctx) -> None:
        """Store a computed value (C expression v) into an lvalue, slices included."""
        if isinstance(lhs, ast.DontCare):
            return
        if isinstance(lhs, ast.Slice):             # read, change the bits, store (nested: recursively)
            t = lhs.expr.type
            cur = self.expr(lhs.expr, ctx)
            hi, lo, w = lhs.hi_v, lhs.lo_v, width_of(t, lhs)
            ut = utype(t)
            m = mask(hi - lo + 1) << lo
            keep = literal(mask(w) ^ m, _unsigned_of(w))
            bits = literal(m, _unsigned_of(w))
            new = f"((({ut}){cur} & {keep}) | ((({ut}){v} << {lo}) & {bits}))"
            if t.signed:
                new = f"p4s_sext128({new}, {w})" if w > 64 else f"p4s_sext64({new}, {w})"
            self.assign_value(lhs.expr, new, ctx)
            return
        self.emit(f"{self.lvalue(lhs, ctx)} = {v};")

    def lvalue(self, e: ast.Expr, ctx: Ctx) -> str:
        if isinstance(e, ast.NameRef):
            if e.decl.kind not in ("var", "param"):
                raise unsupported(e, f"assigning to {e.decl.kind} {e.name}")
            return self.name(e)
        if isinstance(e, ast.Member):
            bt = e.expr.type
            if isinstance(bt, StackType):
                base = self.lvalue(e.expr, ctx)
                if e.name == "last" and ctx.kind != "parser":
                    return f"(*{self.at_fn(bt)}(P, &{base}, (uint64_t){base}.nxt - 1))"
                return f"(*{self.next_fn(bt, e.name == 'last')}(P, &{base}))"
            return f"{self.lvalue(e.expr, ctx)}.{cid(e.name)}"
        if isinstance(e, ast.Index):
            return f"(*{self.at_fn(e.expr.type)}(P, &{self.lvalue(e.expr, ctx)}, {self.index64(e.index, ctx)}))"
        raise unsupported(e, "assigning to this expression")

    def return_stmt(self, s: ast.Return, ctx: Ctx) -> None:
        if ctx.kind == "parser":
            raise unsupported(s, "return in a parser")
        if s.expr is not None:
            v = self.expr(s.expr, ctx)
            rv = self.tmp("rv")
            t = ctx.ret
            self.emit(f"{self.ctype(t) if composite(t) else vtype(t)} {rv} = {v};")
            self.write_outs(ctx)
            self.emit(f"return {rv};")
            return
        self.write_outs(ctx)
        self.emit("return;")

    def write_outs(self, ctx: Ctx) -> None:
        for sym in ctx.outs:
            self.emit(f"*o_{sym.pyname} = {sym.pyname};")

    # ---- calls ----------------------------------------------------------------------
    def call_stmt(self, c: ast.Call, ctx: Ctx) -> None:
        t: Target = c.target
        if t.kind in ("action", "function", "block_apply"):
            v = self.gen_call(t.sym, t.sym.node.params, c.args, ctx)
            if v is not None:
                self.emit(f"(void){v};")
        elif t.kind == "table_apply":
            self.emit(f"(void){self.table_apply(t.sym, ctx)};")
        elif t.kind == "header_method":
            base = self.expr(t.base, ctx)
            if t.name == "setValid":
                self.emit(f"{self.setvalid_fn(t.base.type)}(&{base});")
                self.union_siblings(t.base, ctx)
            elif t.name == "setInvalid":
                self.emit(f"{base}._v = 0;")
        elif t.kind == "stack_method":
            base = self.expr(t.base, ctx)
            self.emit(f"{self.shift_fn(t.base.type, t.name == 'push_front')}(&{base}, UINT64_C({c.count}));")
        elif t.kind in ("extern_func", "method"):
            self.extern_call(c, ctx)
        else:
            raise unsupported(c, "this call")

    def union_siblings(self, h: ast.Expr, ctx: Ctx) -> None:
        if is_union_member(h):
            u = self.expr(h.expr, ctx)
            for other in h.expr.type.fields:
                if other != h.name:
                    self.emit(f"{u}.{cid(other)}._v = 0;")

    def callee_name(self, callee: Sym) -> str:
        if callee.kind in ("action", "function"):
            return callee.pyname
        node = callee.node
        return ("P_" if isinstance(node, ast.ParserDecl) else "C_") + cid(node.name)

    def gen_call(self, callee: Sym, params: list[ast.Param], args: list, ctx: Ctx,
                 data: list[str] | None = None) -> str | None:
        """A call with P4's copy-in/copy-out; returns the C expression of a function's value.

        As the Python backend: every header, struct or stack argument is copied in (a fresh
        value for `out`); after the call out/inout arguments are copied out left to right, so
        the last of two aliased arguments wins, and also when the callee ended in `exit`,
        which then leaves the caller too. `data` is a table entry's action data."""
        passed: list[tuple[str, ast.Expr | None]] = []   # (C argument, its P4 expression if inline)
        copies: dict[int, str] = {}
        scalar_outs: list[tuple[int, str, str, Type]] = []  # (arg index, temp, its value, type)
        for i, (arg, p) in enumerate(zip(args, params)):
            pt = p.type
            if is_packet_out(pt):
                continue
            if composite(pt):
                ct = self.ctype(pt)
                tmp = self.tmp("c")
                if p.direction == "out":
                    self.emit(f"{ct} {tmp};")
                    self.emit(f"memset(&{tmp}, 0, sizeof {tmp});")
                else:
                    self.emit(f"{ct} {tmp} = {self.expr(arg, ctx)};")
                if p.direction in ("out", "inout"):
                    copies[i] = tmp
                passed.append((f"&{tmp}", None))
            elif p.direction in ("out", "inout"):
                value = "0" if p.direction == "out" else self.expr(arg, ctx)
                tmp = self.tmp("o")
                scalar_outs.append((i, tmp, value, pt))
                passed.append((f"&{tmp}", None))
            else:
                if isinstance(arg, ast.DontCare):
                    raise unsupported(arg, "a don't-care argument for an in parameter")
                passed.append((self.expr(arg, ctx), arg))
        for i, tmp, value, pt in scalar_outs:     # Python evaluates these at the call, after the copies
            self.emit(f"{vtype(pt, args[i])} {tmp} = {value};")
        inline = [x for _, x in passed if x is not None]
        prefix = list(ctx.ctl_args) if callee.kind == "action" and callee not in self.cp.top_actions else []
        name = self.callee_name(callee)

        def build(vals: list[str]) -> str:
            it = iter(vals)
            final = [next(it) if x is not None else v for v, x in passed]
            return f"{name}({', '.join(['P'] + prefix + final + (data or []))})"

        inline_values = [v for v, x in passed if x is not None]
        call = self.sequenced(inline, inline_values, build) if len(inline) > 1 else build(inline_values)
        returns = callee.kind == "function" and not _void(callee)
        exits = self.may_exit(callee)
        if not copies and not scalar_outs:
            if returns:
                return call
            self.emit(f"{call};")
            self.exit_check(exits, ctx)
            return None
        r = None
        if returns:
            r = self.tmp("r")
            rt = callee.type
            self.emit(f"{self.ctype(rt) if composite(rt) else vtype(rt)} {r} = {call};")
        else:
            self.emit(f"{call};")
        outs = {i: tmp for i, tmp, _, _ in scalar_outs}
        for i, (arg, p) in enumerate(zip(args, params)):
            if p.direction not in ("out", "inout") or isinstance(arg, ast.DontCare):
                continue
            if i in copies:
                self.emit(f"{self.lvalue(arg, ctx)} = {copies[i]};")
            elif i in outs:
                self.assign_value(arg, outs[i], ctx)
        self.exit_check(exits, ctx)
        return r

    def exit_check(self, exits: bool, ctx: Ctx) -> None:
        if exits:
            if ctx.kind in ("function", "parser"):
                raise unsupported(self.where, f"a call that can exit inside a {ctx.kind}")
            ctx.exit_used = True
            self.emit("if (P4S_UNLIKELY(P->pipe.exiting)) goto L_exit;")



def _void(sym: Sym) -> bool:
    return sym.type is None or isinstance(sym.type, VoidType)


def _unsigned_of(w: int) -> BitType:
    return BitType(w)
