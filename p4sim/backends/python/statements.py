"""Statements and calls (actions, functions, sub-blocks) with P4's copy-in/copy-out."""
from __future__ import annotations

import copy
from typing import Callable

from ...frontend import ast
from ...frontend.checker import Sym, Target, error_at
from ...frontend.types import ActionRunType, StackType, StructType, Type
from .common import CodeGen, Ctx, attr, mask, mention_paths, mentioned, path_of, pure, reads, scalar


def is_union_member(e: ast.Expr) -> bool:
    return isinstance(e, ast.Member) and isinstance(e.expr.type, StructType) and e.expr.type.kind == "header_union"


def forward_single_uses(stmts: list[ast.Stmt]) -> list[ast.Stmt | str]:
    """The statements with each single-use temporary computed where it is used.

    `t = E; ...; x = f(t);` becomes `...; x = f(E);` when t is a scalar local declared in
    this list, E only reads variables and fields (no calls, division or indexing), nothing
    in between writes what E reads, x's statement is the next to mention t and reads it
    once, and t is dead after it (overwritten next, or its scope ends with the list). The
    values are the same; E is just evaluated only if f gets to it. Where a program computes
    each element's min and max for every op and uses one arm of a `?:` on the op (as
    allreduce.p4's add_contribution once did), most of the work of a sum was those two. A
    definition moved away leaves a comment, so the generated code still shows where t went."""
    out: list = list(stmts)
    declared: set[int] = set()
    known: dict[int, tuple[object, set[str]]] = {}     # id -> (node, its mention_paths)

    def mentions(node: object, path: str) -> bool:
        """common.mentions, each node's paths collected once (a definition looks ahead)."""
        entry = known.get(id(node))
        if entry is None:
            entry = known[id(node)] = (node, mention_paths(node))
        return mentioned(entry[1], path)

    for i, s in enumerate(out):
        if isinstance(s, ast.VarDecl):
            declared.add(id(s._sym))
        d = _definition(s)
        if d is None or d[0] is None or id(d[0]) not in declared:
            continue
        sym, rhs = d
        if sym.frame or not scalar(sym.type) or not pure(rhs) or mentions(rhs, sym.name):
            continue
        j = next((k for k in range(i + 1, len(out)) if not isinstance(out[k], str)
                  and mentions(out[k], sym.name)), None)
        if j is None or not _movable_to(rhs, sym, out, i, j, mentions):
            continue
        use = copy.copy(out[j])
        if isinstance(use, ast.Assign):
            use.rhs = _substitute(use.rhs, sym, rhs)
        else:
            use.init = _substitute(use.init, sym, rhs)
        out[i], out[j] = f"# {sym.name}: computed at its one use below", use
    return out


def _definition(s: object) -> tuple[Sym | None, ast.Expr] | None:
    """(variable, value) of `v = E;` or `T v = E;`; variable None for other targets."""
    if isinstance(s, ast.VarDecl) and s.init is not None:
        return s._sym, s.init
    if isinstance(s, ast.Assign):
        lhs = s.lhs
        return (lhs.decl if isinstance(lhs, ast.NameRef) else None), s.rhs
    return None


def _movable_to(e: ast.Expr, sym: Sym, out: list, i: int, j: int,
                mentions: Callable[[object, str], bool]) -> bool:
    """Can e, defined at out[i], move into its use out[j]?"""
    for s in out[i + 1:j]:              # assignments of pure values to what e does not read
        if isinstance(s, (str, ast.Empty, ast.ConstDecl)):
            continue
        if isinstance(s, ast.VarDecl) and s.init is None:
            continue
        d = _definition(s)
        target = path_of(s.lhs) if isinstance(s, ast.Assign) else getattr(s, "name", None)
        if d is None or target is None or not pure(d[1]) or mentions(e, target):
            return False
    use = out[j]
    d = _definition(use)
    target = path_of(use.lhs) if isinstance(use, ast.Assign) else getattr(use, "name", None)
    if d is None or target is None or not pure(d[1]) or _uses(d[1], sym) != 1:
        return False
    if target == sym.name:              # `t = g(t)`: the use itself overwrites t
        return True
    for k in range(j + 1, len(out)):    # dead after the use: the next mention overwrites t
        s = out[k]
        if isinstance(s, str) or not mentions(s, sym.name):
            continue
        return isinstance(s, ast.Assign) and path_of(s.lhs) == sym.name and not mentions(s.rhs, sym.name)
    return True


def _uses(e: ast.Expr, sym: Sym) -> int:
    if isinstance(e, ast.NameRef):
        return int(e.decl is sym)
    return sum(_uses(v, sym) for v in vars(e).values() if isinstance(v, ast.Expr))


def _substitute(e: ast.Expr, sym: Sym, value: ast.Expr) -> ast.Expr:
    """e with its one reference to sym replaced by value (copies on the way; the rest shared)."""
    if isinstance(e, ast.NameRef) and e.decl is sym:
        return value
    new = e
    for name, v in vars(e).items():
        if isinstance(v, ast.Expr):
            r = _substitute(v, sym, value)
            if r is not v:
                if new is e:
                    new = copy.copy(e)
                setattr(new, name, r)
    return new


MAX_LOOP_ITERATIONS = 1 << 16      # a P4 for loop that runs longer fails the packet


class StmtGen(CodeGen):
    # ---- statements -------------------------------------------------------------
    def block(self, b: ast.Block, ctx: Ctx) -> None:
        self.known = {}
        for s in (forward_single_uses(b.stmts) if self.optimize else b.stmts):
            if isinstance(s, str):
                self.emit(s)
                continue
            known = self.known
            # Only a statement of this list may use them: a branch of an if may not (its
            # condition can call a function that writes what an index reads).
            self.known = known if isinstance(s, (ast.Assign, ast.CallStmt, ast.VarDecl)) else None
            self.stmt(s, ctx)
            self.known = self.still_known(known, s)
        self.known = None

    def still_known(self, known: dict[str, tuple[str, ast.Expr]], s: ast.Stmt) -> dict:
        """The register indexes of `known` that s leaves unchanged (externs.register_index):
        after an assignment of a pure value, those that do not read what it writes; after a
        register read, those that do not read its destination; after anything else, none."""
        if isinstance(s, ast.CallStmt) and s.call.target.kind == "method" \
                and getattr(s.call.target.base.type, "decl", None) is not None \
                and s.call.target.base.type.decl.name == "register":
            if not all(pure(x) for x in s.call.args if not isinstance(x, ast.DontCare)):
                return {}                      # a call in an argument may write anything
            if s.call.target.name != "read":
                return known
            target = path_of(s.call.args[0])
        elif isinstance(s, ast.Assign) and pure(s.rhs):
            target = path_of(s.lhs)
        elif isinstance(s, ast.VarDecl) and (s.init is None or pure(s.init)):
            target = s.name
        elif isinstance(s, (ast.Empty, ast.ConstDecl)):
            return known
        else:
            return {}
        if target is None:
            return {}
        return {k: v for k, v in known.items() if not reads(v[1], target)}

    def body(self, s: ast.Stmt, ctx: Ctx) -> None:
        self.ind += 1
        start = len(self.lines)
        self.stmt(s, ctx)
        if len(self.lines) == start:
            self.emit("pass")
        self.ind -= 1

    def stmt(self, s: ast.Stmt, ctx: Ctx) -> None:
        self.where = s
        if isinstance(s, ast.Block):
            self.block(s, ctx)
        elif isinstance(s, ast.Assign):
            self.assign(s.lhs, s.rhs, ctx)
        elif isinstance(s, ast.CallStmt):
            self.call_stmt(s.call, ctx)
        elif isinstance(s, ast.If):
            self.if_chain(s, self.expr(s.cond, ctx), ctx)
        elif isinstance(s, ast.VarDecl):
            sym = s._sym
            if s.init is not None:
                self.assign_to(sym.pyname, sym.type, s.init, ctx, fresh=True)
            else:
                self.emit(f"{sym.pyname} = {self.init_value(sym.type)}")
        elif isinstance(s, ast.ConstDecl):
            pass                                      # folded where used
        elif isinstance(s, ast.Return):
            self.return_outs(ctx, self.expr(s.expr, ctx) if s.expr is not None else "None")
        elif isinstance(s, ast.Exit):
            if self.trace:
                self.emit("LOG('exit')")
            self.emit("raise Exit()")
        elif isinstance(s, ast.Switch):
            self.switch(s, ctx)
        elif isinstance(s, ast.Empty):
            pass
        elif isinstance(s, ast.For):
            self.for_loop(s, ctx)
        elif isinstance(s, ast.ForIn):
            self.for_in_loop(s, ctx)
        elif isinstance(s, ast.Break):
            self.emit("break")
        elif isinstance(s, ast.Continue):
            self.emit("continue")
        else:
            raise error_at(s, f"unsupported statement {type(s).__name__}")

    def for_loop(self, s: ast.For, ctx: Ctx) -> None:
        """The update runs at the top of every iteration but the first, so that `continue`
        (Python's, to the top) runs it too; a loop that never ends fails the packet."""
        for init in s.init:
            self.stmt(init, ctx)
        first, n = self.tmp("first"), self.tmp("n")
        self.emit(f"{first} = True; {n} = 0")
        self.emit("while True:")
        self.ind += 1
        self.emit(f"{n} += 1")
        self.emit(f"if {n} > {MAX_LOOP_ITERATIONS}: raise RuntimeError('a for loop ran {MAX_LOOP_ITERATIONS} times "
                  f"(at {s.pos.file}:{s.pos.line})')")
        if s.update:
            self.emit(f"if {first}: {first} = False")
            self.emit("else:")
            self.ind += 1
            for update in s.update:
                self.stmt(update, ctx)
            self.ind -= 1
        if s.cond is not None:
            self.emit(f"if not {self.expr(s.cond, ctx)}: break")
        self.known = None
        self.stmt(s.body, ctx)
        self.ind -= 1

    def for_in_loop(self, s: ast.ForIn, ctx: Ctx) -> None:
        var = s.var._sym.pyname
        c = s.collection
        if isinstance(c, ast.Range):
            lo, hi = self.expr(c.lo, ctx), self.expr(c.hi, ctx)
            self.emit(f"for {var} in range({lo}, {hi} + 1):")
        else:
            e = self.tmp("e")
            self.emit(f"for {e} in {self.expr(c, ctx)}.items:")
            self.emit(f"    {var} = {e}._copy()")
        self.ind += 1
        self.known = None
        self.body_or_pass(s.body, ctx)
        self.ind -= 1

    def body_or_pass(self, s: ast.Stmt, ctx: Ctx) -> None:
        start = len(self.lines)
        self.stmt(s, ctx)
        if len(self.lines) == start:
            self.emit("pass")

    def if_chain(self, s: ast.If, cond: str, ctx: Ctx) -> None:
        """if / elif / else; an `else if` whose condition needs statements first (a call
        with out arguments) nests as `else: <statements> if ...`."""
        self.emit(f"if {cond}:")
        self.body(s.then, ctx)
        while s.else_ is not None:
            if not isinstance(s.else_, ast.If):
                self.emit("else:")
                self.body(s.else_, ctx)
                return
            s = s.else_
            mark = len(self.lines)
            self.ind += 1
            cond = self.expr(s.cond, ctx)
            self.ind -= 1
            if len(self.lines) > mark:
                pre = self.lines[mark:]
                del self.lines[mark:]
                self.emit("else:")
                self.lines.extend(pre)
                self.ind += 1
                self.if_chain(s, cond, ctx)
                self.ind -= 1
                return
            self.emit(f"elif {cond}:")
            self.body(s.then, ctx)

    def switch(self, s: ast.Switch, ctx: Ctx) -> None:
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

    def assign(self, lhs: ast.Expr, rhs: ast.Expr, ctx: Ctx) -> None:
        if isinstance(lhs, ast.Slice):
            self.assign_value(lhs, self.expr(rhs, ctx), ctx)
            return
        target = self.lvalue(lhs, ctx)
        self.assign_to(target, lhs.type, rhs, ctx)
        if is_union_member(lhs):
            # A valid header assigned to a union member makes the other members invalid.
            self.emit(f"if {target}._v:")
            self.ind += 1
            self.union_siblings(lhs, ctx)
            self.ind -= 1

    def assign_value(self, lhs: ast.Expr, v: str, ctx: Ctx) -> None:
        """Store a computed value (Python expression v) into an lvalue, slices included."""
        if isinstance(lhs, ast.DontCare):
            return
        if isinstance(lhs.type, (StructType, StackType)):
            self.emit(f"{self.lvalue(lhs, ctx)}._set({v})")
            return
        if isinstance(lhs, ast.Slice):             # read, change the bits, store (nested: recursively)
            cur = self.expr(lhs.expr, ctx)
            hi, lo, t = lhs.hi_v, lhs.lo_v, lhs.expr.type
            m = mask(hi - lo + 1) << lo
            full = mask(t.width)
            new = f"({cur} & {full ^ m}) | (({v} << {lo}) & {m})" if lo else f"({cur} & {full ^ m}) | ({v} & {m})"
            if t.signed:
                h = 1 << (t.width - 1)
                new = f"((({new}) & {full}) ^ {h}) - {h}"
            self.assign_value(lhs.expr, f"({new})", ctx)
            return
        self.emit(f"{self.lvalue(lhs, ctx)} = {v}")

    def assign_to(self, target: str, t: Type, rhs: ast.Expr, ctx: Ctx, fresh: bool = False) -> None:
        if isinstance(t, (StructType, StackType)):
            v = self.expr(rhs, ctx)
            if isinstance(rhs, (ast.ListExpr, ast.StructExpr)):    # a new value: no copy needed
                self.emit(f"{target} = {v}" if fresh else f"{target}._set({v})")
                return
            self.emit(f"{target} = {v}._copy()" if fresh else f"{target}._set({v})")
            return
        self.emit(f"{target} = {self.expr(rhs, ctx)}")

    def lvalue(self, e: ast.Expr, ctx: Ctx) -> str:
        if isinstance(e, ast.NameRef):
            return self.name(e)
        if isinstance(e, ast.Member):
            if isinstance(e.expr.type, StackType):
                base = self.lvalue(e.expr, ctx)
                if e.name == "last" and ctx.kind != "parser":
                    return f"{base}.at({base}.nxt - 1)"
                return f"{base}.last_elem()" if e.name == "last" else f"{base}.next_elem()"
            return self.member_ref(e, self.lvalue(e.expr, ctx))
        if isinstance(e, ast.Index):
            return f"{self.lvalue(e.expr, ctx)}.at({self.expr(e.index, ctx)})"
        raise error_at(e, "this expression cannot be assigned to")

    def name(self, e: ast.NameRef) -> str:
        sym = e.decl
        if sym.frame or id(sym) in self.framed_params:
            return f"L.{attr(sym.name)}"
        return sym.pyname

    # ---- calls ----------------------------------------------------------------------
    def call_stmt(self, c: ast.Call, ctx: Ctx) -> None:
        t: Target = c.target
        if t.kind == "action":
            self.call_action(c, ctx)
        elif t.kind == "table_apply":
            self.emit(f"{t.sym.pyname}({ctx.ctl_args})")
        elif t.kind == "header_method":
            base = self.expr(t.base, ctx)
            if t.name == "setValid":
                self.emit(f"{base}._setv()")
                self.union_siblings(t.base, ctx)
            elif t.name == "setInvalid":
                self.emit(f"{base}._v = False")
        elif t.kind == "stack_method":
            base = self.expr(t.base, ctx)
            self.emit(f"{base}.{t.name}({c.count})")
        elif t.kind == "function":
            self.emit(self.expr(c, ctx))
        elif t.kind == "block_apply":
            self.call_block(c, ctx)
        elif t.kind in ("extern_func", "method"):
            self.extern_call(c, ctx)
        else:
            raise error_at(c, "unsupported call")

    def union_siblings(self, h: ast.Expr, ctx: Ctx) -> None:
        if is_union_member(h):
            u = self.expr(h.expr, ctx)
            for other in h.expr.type.fields:
                if other != h.name:
                    self.emit(f"{u}.{attr(other)}._v = False")

    def call_action(self, c: ast.Call, ctx: Ctx) -> None:
        a: Sym = c.target.sym
        self.gen_call(a, a.node.params, c.args, ctx)

    def call_block(self, c: ast.Call, ctx: Ctx) -> None:
        """`inst.apply(...)` of a sub-parser or sub-control."""
        sym: Sym = c.target.sym
        self.gen_call(sym, sym.node.params, c.args, ctx)

    def gen_call(self, callee: Sym, params: list[ast.Param], args: list[ast.Expr], ctx: Ctx,
                 data: str = "") -> str | None:
        """A call with P4's copy-in/copy-out; returns the Python expression of a function's value.

        Every header, struct or stack argument is copied in (a fresh value for `out`);
        after the call out/inout arguments are copied out left to right, so the last of
        two aliased arguments wins, and also when the callee ended in `exit`, which is
        then raised again here. `data` is what follows the given arguments (a table's
        `*args` for the control-plane parameters)."""
        kind = "function" if callee.kind == "function" else (
            "action" if callee.kind == "action" else "control" if isinstance(callee.node, ast.ControlDecl) else "parser")
        shape = self.callee_ctx(kind, params)
        passed, copies = [], {}
        for i, (arg, p) in enumerate(zip(args, params)):
            composite = isinstance(p.type, (StructType, StackType))
            if p.direction == "out":
                value = self.init_value(p.type)
            else:
                value = self.expr(arg, ctx)
                if composite:
                    value = f"{value}._copy()"
            if composite and p.direction in ("out", "inout"):
                copies[i] = self.tmp("c")
                self.emit(f"{copies[i]} = {value}")
                value = copies[i]
            passed.append(value)
        if data:
            passed.append(data)
        prefix = [ctx.ctl_args] if callee.kind == "action" and callee not in self.cp.top_actions else []
        call = f"{callee.pyname}({', '.join(prefix + passed)})"
        handback = shape.exits or bool(shape.outs)
        if not handback and not copies:
            if shape.returns:
                return call
            self.emit(call)
            return None
        r = self.tmp("r")
        self.emit(f"{r} = {call}")
        at = int(shape.exits) + int(shape.returns)
        for i, (arg, p) in enumerate(zip(args, params)):
            if p.direction not in ("out", "inout") or isinstance(arg, ast.DontCare):
                continue
            if i in copies:
                self.emit(f"{self.lvalue(arg, ctx)}._set({copies[i]})")
            else:
                self.assign_value(arg, f"{r}[{at}]", ctx)
                at += 1
        if shape.exits:
            self.emit(f"if {r}[0]: raise Exit()")
        if not shape.returns:
            return None
        return f"{r}[{int(shape.exits)}]" if shape.outs else r
