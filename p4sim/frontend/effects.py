"""Side effects in expressions made explicit, after checking, for every backend.

P4_16 evaluates expressions left to right (spec 8.1), arguments left to right with
copy-in before the call and copy-out after it (6.8), the left-hand side of an assignment
before the right, and `&&`, `||` and `?:` evaluate only what they need. A backend that
compiles expressions as expressions gets that wrong as soon as a call has side effects
(an out/inout argument, a register write, a table apply): the call is hoisted before the
statement, or both branches of `?:` run. So, as p4c's SideEffectOrdering does
(frontends/p4/sideEffects.cpp), a statement whose expressions hold such a call is
rewritten into statements of existing AST forms: each effectful call stands alone
(`tmp = f(...)`, or the whole right-hand side, argument, or `if`/`switch` subject), a
value read before a later side effect is saved in a temporary first, an index with a
side effect is evaluated once into a temporary, and short-circuits and `?:` whose later
part has side effects become `if`s. Statements without such calls are left as they are.

Temporaries are ordinary `VarDecl`s with `type` and `_sym` set (their `type_ref` is
None); their names (`$seN`) cannot clash with P4 names, their `pyname`s are `se_N`.
"""
from __future__ import annotations

import copy
from typing import Any

from . import ast
from .types import BoolType, Type

__all__ = ["order_side_effects"]


def order_side_effects(cp: Any) -> None:
    """Rewrite every body of a CheckedProgram in place (see the module docstring)."""
    _Orderer().program(cp)


class _Orderer:
    def __init__(self) -> None:
        self.uid = 0
        self.impure: dict[int, bool] = {}       # function Sym id -> has side effects

    # ---- where statements live ---------------------------------------------------
    def program(self, cp: Any) -> None:
        for f in cp.functions:
            f.node.body = self.block(f.node.body)
        for a in cp.top_actions:
            a.node.body = self.block(a.node.body)
        for info in cp.blocks.values():
            for a in info.actions:
                a.node.body = self.block(a.node.body)
            d = info.decl
            if isinstance(d, ast.ParserDecl):
                for st in d.states:
                    st.stmts = self.stmts(st.stmts)
                    tr = st.transition
                    if tr.select is not None and any(self.effect(k) for k in tr.select):
                        pre: list[ast.Stmt] = []
                        tr.select = self.sequence(tr.select, pre)
                        st.stmts = st.stmts + pre
            else:
                d.body = self.block(d.body)

    def block(self, b: ast.Block) -> ast.Block:
        b.stmts = self.stmts(b.stmts)
        return b

    def stmts(self, stmts: list[ast.Stmt]) -> list[ast.Stmt]:
        out: list[ast.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out

    def nested(self, s: ast.Stmt | None) -> ast.Stmt | None:
        if s is None:
            return None
        lowered = self.stmt(s)
        return lowered[0] if len(lowered) == 1 else ast.Block(lowered, pos=s.pos)

    def stmt(self, s: ast.Stmt) -> list[ast.Stmt]:
        pre: list[ast.Stmt] = []
        if isinstance(s, ast.Block):
            return [self.block(s)]
        if isinstance(s, ast.If):
            s.then, s.else_ = self.nested(s.then), self.nested(s.else_)
            if self.effect(s.cond):
                s.cond = self.value(s.cond, pre, top=True)
            return pre + [s]
        if isinstance(s, ast.Switch):
            for case in s.cases:
                if case.body is not None:
                    self.block(case.body)
            if self.effect(s.expr):
                s.expr = self.value(s.expr, pre, top=True)
            return pre + [s]
        if isinstance(s, ast.Assign):
            compound = isinstance(s.rhs, ast.Binary) and s.rhs.left is s.lhs
            if not (self.effect(s.lhs) or self.effect(s.rhs)):
                return [s]
            lhs = self.lvalue(s.lhs, pre, save=self.effect(s.rhs))
            if compound:         # `lv op= e`: the lvalue evaluated once, for both sides
                rhs = copy.copy(s.rhs)
                rhs.left = lhs
                if self.effect(s.rhs.right):
                    rhs.left = self.save(lhs, pre)
                rhs.right = self.value(s.rhs.right, pre)
            else:
                rhs = self.value(s.rhs, pre, top=True)
            return pre + [ast.Assign(lhs, rhs, pos=s.pos)]
        if isinstance(s, ast.VarDecl):
            if s.init is not None and self.effect(s.init):
                s.init = self.value(s.init, pre, top=True)
            return pre + [s]
        if isinstance(s, ast.Return):
            if s.expr is not None and self.effect(s.expr):
                s.expr = self.value(s.expr, pre, top=True)
            return pre + [s]
        if isinstance(s, ast.For):
            s.init, s.update = self.stmts(s.init), self.stmts(s.update)
            s.body = self.nested(s.body)
            if s.cond is not None and self.effect(s.cond):
                # Evaluated before every iteration: `if (!cond) break;` at the top of the body.
                cond = self.value(s.cond, pre, top=True)
                leave = ast.If(_not(cond), ast.Break(pos=s.pos), pos=s.pos)
                s.cond, s.body = None, ast.Block(pre + [leave, s.body], pos=s.pos)
                pre = []
            return [s]
        if isinstance(s, ast.ForIn):
            s.body = self.nested(s.body)
            c = s.collection
            if isinstance(c, ast.Range) and (self.effect(c.lo) or self.effect(c.hi)):
                new = copy.copy(c)
                new.lo, new.hi = self.sequence([c.lo, c.hi], pre)
                s.collection = new
            return pre + [s]
        if isinstance(s, ast.CallStmt):
            if any(self.effect(a) for a in s.call.args):
                call, post = self.call(s.call, pre)
                return pre + [ast.CallStmt(call, pos=s.pos)] + post
            return [s]
        return [s]

    # ---- what has side effects -------------------------------------------------------
    def effect(self, e: Any) -> bool:
        """Does evaluating e run a call with side effects?"""
        if not isinstance(e, ast.Node):
            return False
        if isinstance(e, ast.Call) and self.effectful_call(e):
            return True
        for v in vars(e).values():
            for item in (v if isinstance(v, list) else [v]):
                if isinstance(item, ast.Expr) and self.effect(item):
                    return True
        return False

    def effectful_call(self, c: ast.Call) -> bool:
        t = c.target
        if t is None:
            return False
        if t.kind == "table_apply":
            return True
        if t.kind == "function":
            return self.impure_function(t.sym)
        return False

    def impure_function(self, sym: Any) -> bool:
        """A function with out/inout parameters, or that calls an extern, an action or a
        function that has side effects, is not free to move or to skip."""
        key = id(sym)
        if key not in self.impure:
            self.impure[key] = True          # recursion is refused by the checker anyway
            d = sym.node
            self.impure[key] = any(p.direction in ("out", "inout") for p in d.params) \
                or _calls_out(d.body, self)
        return self.impure[key]

    # ---- expressions -------------------------------------------------------------
    def temp(self, t: Type, pos: ast.Pos, init: ast.Expr | None, pre: list) -> ast.NameRef:
        from .checker import Sym
        self.uid += 1
        name = f"$se{self.uid}"
        decl = ast.VarDecl(None, name, init, pos=pos)
        decl.type = t
        decl._sym = Sym("var", name, t, decl, pyname=f"se_{self.uid}")
        pre.append(decl)
        return self.ref(decl)

    @staticmethod
    def ref(decl: ast.VarDecl) -> ast.NameRef:
        r = ast.NameRef(decl.name, pos=decl.pos)
        r.decl, r.type = decl._sym, decl.type
        return r

    def save(self, e: ast.Expr, pre: list) -> ast.Expr:
        """e's value now, in a temporary (unless nothing can change it)."""
        if _stable(e):
            return e
        return self.temp(e.type, e.pos, e, pre)

    def sequence(self, items: list, pre: list) -> list:
        """Expressions evaluated in order: each one read before a later side effect is saved."""
        out = []
        for i, x in enumerate(items):
            v = self.value(x, pre)
            if any(self.effect(y) for y in items[i + 1:]):
                v = self.save(v, pre)
            out.append(v)
        return out

    def value(self, e: Any, pre: list, top: bool = False) -> Any:
        """An expression with e's value once `pre` has run, with no effectful call left in
        it (with top, e itself may stay a call whose arguments have none)."""
        if not self.effect(e):
            return e
        if isinstance(e, ast.Call):
            call, post = self.call(e, pre)
            if top and not post:
                return call
            result = self.temp(e.type, e.pos, call, pre)
            pre.extend(post)
            return result
        if isinstance(e, ast.Member) and isinstance(e.expr, ast.Call) and e.expr.target.kind == "table_apply":
            # `t.apply().hit` / `.miss` / `.action_run`: applied here, its result kept.
            if top:
                return e
            return self.temp(e.type, e.pos, e, pre)
        new = copy.copy(e)
        if isinstance(e, ast.Binary) and e.op in ("&&", "||") and self.effect(e.right):
            left = self.value(e.left, pre)
            result = self.temp(BoolType(), e.pos, left, pre)
            inner: list[ast.Stmt] = []
            right = self.value(e.right, inner)
            inner.append(ast.Assign(self.ref(result.decl.node), right, pos=e.pos))
            cond = result if e.op == "&&" else _not(result)
            pre.append(ast.If(cond, ast.Block(inner, pos=e.pos), pos=e.pos))
            return self.ref(result.decl.node)
        if isinstance(e, ast.Cond) and (self.effect(e.then) or self.effect(e.else_)):
            cond = self.value(e.cond, pre)
            result = self.temp(e.type, e.pos, None, pre)
            branches = []
            for branch in (e.then, e.else_):
                inner: list[ast.Stmt] = []
                v = self.value(branch, inner)
                inner.append(ast.Assign(self.ref(result.decl.node), v, pos=branch.pos))
                branches.append(ast.Block(inner, pos=branch.pos))
            pre.append(ast.If(cond, branches[0], branches[1], pos=e.pos))
            return self.ref(result.decl.node)
        if isinstance(e, ast.Binary):
            new.left, new.right = self.sequence([e.left, e.right], pre)
        elif isinstance(e, ast.Cond):
            new.cond = self.value(e.cond, pre)
        elif isinstance(e, (ast.Unary, ast.Cast, ast.Slice)):
            new.expr = self.value(e.expr, pre)
        elif isinstance(e, ast.Member):
            new.expr = self.value(e.expr, pre)
        elif isinstance(e, ast.Index):
            new.expr = self.value(e.expr, pre)
            new.index = self.save(self.value(e.index, pre), pre)
        elif isinstance(e, (ast.ListExpr, ast.StructExpr)):
            new.items = self.sequence(e.items, pre)
        else:
            return e
        return new

    def lvalue(self, e: ast.Expr, pre: list, save: bool) -> ast.Expr:
        """An lvalue whose run-time indexes are computed now, into temporaries when they
        have side effects or when `save` says a later side effect could change them."""
        if isinstance(e, (ast.Member, ast.Slice)):
            new = copy.copy(e)
            new.expr = self.lvalue(e.expr, pre, save)
            return new
        if isinstance(e, ast.Index):
            new = copy.copy(e)
            new.expr = self.lvalue(e.expr, pre, save)
            if save or self.effect(e.index):
                new.index = self.save(self.value(e.index, pre), pre)
            return new
        return e

    def call(self, c: ast.Call, pre: list) -> tuple[ast.Call, list[ast.Stmt]]:
        """The call with its arguments evaluated in order into what it is given; the
        statements that copy out, after it, what a temporary stood in for."""
        params = _params(c)
        new = copy.copy(c)
        args, post = [], []
        effectful = self.effectful_call(c)
        for i, a in enumerate(c.args):
            later = any(self.effect(x) for x in c.args[i + 1:])
            direction = params[i].direction if params is not None and i < len(params) else ""
            if isinstance(a, ast.DontCare):
                args.append(a)
            elif direction in ("out", "inout"):
                lv = self.lvalue(a, pre, save=effectful or later)
                if later:
                    # Copied in now, before a later argument changes it (p4c issue 2288).
                    tmp = self.temp(a.type, a.pos, lv if direction == "inout" else None, pre)
                    post.append(ast.Assign(lv, self.ref(tmp.decl.node), pos=a.pos))
                    args.append(tmp)
                else:
                    args.append(lv)
            else:
                v = self.value(a, pre)
                args.append(self.save(v, pre) if later else v)
        new.args = args
        return new, post


def _params(c: ast.Call) -> list | None:
    """The parameters a call binds its arguments to, when the call has directions."""
    t = c.target
    if t is not None and t.sym is not None and t.kind in ("function", "action", "block_apply"):
        return t.sym.node.params
    return getattr(c, "params", None)


def _calls_out(node: Any, orderer: _Orderer) -> bool:
    """Does a function body call something with effects beyond its own locals?"""
    if isinstance(node, ast.Call) and node.target is not None:
        kind = node.target.kind
        if kind in ("extern_func", "method", "action", "table_apply", "block_apply"):
            return True
        if kind == "function" and orderer.impure_function(node.target.sym):
            return True
    if not isinstance(node, ast.Node):
        return False
    for v in vars(node).values():
        for item in (v if isinstance(v, list) else [v]):
            if isinstance(item, ast.Node) and _calls_out(item, orderer):
                return True
    return False


def _stable(e: ast.Expr) -> bool:
    """A value no later statement can change: a literal or one of our temporaries."""
    if isinstance(e, (ast.IntLit, ast.BoolLit, ast.StrLit, ast.TypeMember)):
        return True
    return isinstance(e, ast.NameRef) and (e.name.startswith("$se") or getattr(e.decl, "kind", "") == "const")


def _not(e: ast.Expr) -> ast.Expr:
    n = ast.Unary("!", e, pos=e.pos)
    n.type = BoolType()
    return n
