"""P4 expressions as C expressions, with P4's bit-width arithmetic inlined.

A scalar expression becomes a C value of common.vtype (bit<W>: uint64_t within [0, 2**W);
int<W>: int64_t; wider than 64 bits: u128/i128; bool: int 0/1); a header, struct, union or
stack expression becomes a C expression of its struct type (usually an lvalue). Evaluation
order follows the Python backend's: what it hoists into statements (calls that copy out) is
hoisted here at the same points; where two operands both have effects, the left one is
evaluated first (a GNU statement expression), as Python does.
"""
from __future__ import annotations

from ....frontend import ast
from ....frontend.checker import Target, const_value, expr_text
from ....frontend.types import (ActionRunType, ApplyResultType, BitType, BoolType, EnumType, ExternType,
                                StackType, StructType, TupleType, Type, is_header)
from .common import CodeGen, Ctx, cid, composite, literal, mask, stype, unsupported, utype, vtype, wide, width_of


def has_effects(e: object) -> bool:
    """Can evaluating e change state or fail (calls, table applies, division, `.next`)?"""
    if isinstance(e, ast.Call):
        t = e.target
        if not (t is not None and t.kind == "header_method" and t.name == "isValid"):
            return True
    if isinstance(e, ast.Binary) and e.op in ("/", "%"):
        return True
    if isinstance(e, ast.Member) and isinstance(e.expr.type, StackType) and e.name in ("next", "last"):
        return True
    if isinstance(e, ast.Node):
        for v in vars(e).values():
            for item in (v if isinstance(v, list) else [v]):
                if isinstance(item, ast.Expr) and has_effects(item):
                    return True
    return False


def is_lvalue(e: ast.Expr) -> bool:
    """Is the C form of composite expression e addressable (a variable, field, element)?"""
    if isinstance(e, ast.NameRef):
        return True
    if isinstance(e, ast.Member):
        return isinstance(e.expr.type, StackType) or is_lvalue(e.expr)
    if isinstance(e, ast.Index):
        return is_lvalue(e.expr)
    return isinstance(e, (ast.ListExpr, ast.StructExpr))      # compound literals are lvalues


class ExprGen(CodeGen):
    # ---- expressions --------------------------------------------------------------------
    def expr(self, e: ast.Expr, ctx: Ctx) -> str:
        t = e.type
        if not isinstance(t, (StructType, StackType, TupleType, ApplyResultType, ActionRunType)):
            v = const_value(e, self.cp.errors)
            if v is not None and not isinstance(e, ast.StrLit):
                return literal(v, t)
        method = getattr(self, "x_" + type(e).__name__, None)
        if method is None:
            raise unsupported(e, f"expression {type(e).__name__}")
        return method(e, ctx)

    def rv(self, t: Type, lv: str) -> str:
        """A stored scalar read as its computation type."""
        return lv if stype(t) in (vtype(t), "u128", "i128") or isinstance(t, BoolType) else f"(({vtype(t)}){lv})"

    def x_StrLit(self, e: ast.StrLit, ctx) -> str:
        raise unsupported(e, "a string outside log_msg")

    def x_NameRef(self, e: ast.NameRef, ctx) -> str:
        if e.decl.kind in ("var", "param"):
            return self.name(e)
        raise unsupported(e, f"`{e.name}` used as a value")

    def name(self, e: ast.NameRef) -> str:
        sym = e.decl
        if sym.frame:
            v = f"L->{cid(sym.name)}"
        elif sym.kind == "param" and composite(sym.type):
            v = f"(*{sym.pyname})"
        else:
            v = sym.pyname
        return v

    def x_Member(self, e: ast.Member, ctx) -> str:
        bt = e.expr.type
        if isinstance(bt, StackType):
            base = self.expr(e.expr, ctx)
            if e.name == "next":
                return f"(*{self.next_fn(bt, False)}(P, &{base}))"
            if e.name == "last":     # in a parser an empty stack's last is StackOutOfBounds
                if ctx.kind == "parser":
                    return f"(*{self.next_fn(bt, True)}(P, &{base}))"
                return f"(*{self.at_fn(bt)}(P, &{base}, (uint64_t){base}.nxt - 1))"
            if e.name == "lastIndex":
                return f"(((uint64_t){base}.nxt - 1) & UINT64_C(0xffffffff))"
            if e.name == "nextIndex":
                return f"((uint64_t){base}.nxt)"
            if e.name == "size":
                return f"UINT64_C({bt.size})"
        if isinstance(bt, ApplyResultType):
            base = self.expr(e.expr, ctx)
            if e.name == "hit":
                return f"({base} & 1)"
            if e.name == "miss":
                return f"!({base} & 1)"
            return f"({base} >> 1)"
        base = self.expr(e.expr, ctx)
        ref = f"{base}.{cid(e.name)}"
        return ref if composite(e.type) else self.rv(e.type, ref)

    def x_Index(self, e: ast.Index, ctx) -> str:
        if isinstance(e.expr.type, TupleType):
            v = f"{self.expr(e.expr, ctx)}.e{const_value(e.index, self.cp.errors)}"
            return v if composite(e.type) else self.rv(e.type, v)
        i = const_value(e.index, self.cp.errors)
        base = self.expr(e.expr, ctx)
        if i is not None:                        # the checker proved it in bounds
            return f"{base}.e[{i}]"
        return f"(*{self.at_fn(e.expr.type)}(P, &{base}, {self.index64(e.index, ctx)}))"

    def index64(self, e: ast.Expr, ctx: Ctx) -> str:
        """An index as uint64_t (a wider one saturates: it is out of bounds either way)."""
        v = self.expr(e, ctx)
        if wide(e.type):
            return f"({{ u128 _x = {v}; _x > UINT64_MAX ? UINT64_MAX : (uint64_t)_x; }})"
        return f"((uint64_t){v})"

    def x_Slice(self, e: ast.Slice, ctx) -> str:
        v = self.expr(e.expr, ctx)
        w = e.hi_v - e.lo_v + 1
        src = f"(({utype(e.expr.type)}){v})"
        shifted = f"({src} >> {e.lo_v})" if e.lo_v else src
        if w > 64:
            return f"({shifted} & p4s_mask128({w}))"
        return f"((uint64_t){shifted} & UINT64_C({mask(w)}))"

    def x_Cond(self, e: ast.Cond, ctx) -> str:
        return f"({self.expr(e.cond, ctx)} ? {self.expr(e.then, ctx)} : {self.expr(e.else_, ctx)})"

    def x_ListExpr(self, e: ast.ListExpr, ctx) -> str:
        t = e.type
        if isinstance(t, TupleType):
            values = [self.expr(x, ctx) for x in e.items]
            return self.sequenced(e.items, values, lambda vs: f"(({self.ctype(t)}){{{', '.join(vs)}}})")
        if not isinstance(t, StructType):
            raise unsupported(e, "a list value here")
        if t.varbit is not None:
            raise unsupported(e, f"a list value of header {t.name}, which has a varbit field")
        values = [self.expr(x, ctx) for x in e.items]
        fields = list(t.fields)
        return self.sequenced(e.items, values, lambda vs: f"(({self.ctype(t)}){{{', '.join(inits_of(t, fields, vs))}}})")

    x_StructExpr = x_ListExpr

    def sequenced(self, items: list[ast.Expr], values: list[str], build) -> str:
        """build(values), the values evaluated left to right when more than one has effects
        (C leaves the order of operands and arguments open; Python's is left to right)."""
        effectful = [i for i, x in enumerate(items) if has_effects(x)]
        if len(effectful) < 2:
            return build(values)
        decls, out = [], list(values)
        for i in effectful[:-1]:
            tmp = self.tmp("s")
            decls.append(f"{self.vctype(items[i].type)} {tmp} = {values[i]};")
            out[i] = tmp
        return f"({{ {' '.join(decls)} {build(out)}; }})"

    def vctype(self, t: Type) -> str:
        return self.ctype(t) if composite(t) else vtype(t)

    def x_Unary(self, e: ast.Unary, ctx) -> str:
        v = self.expr(e.expr, ctx)
        t = e.type
        if e.op == "!":
            return f"(!{v})"
        if not isinstance(t, BitType):
            raise unsupported(e, f"`{e.op}` on {t}")
        w = width_of(t, e)
        if e.op == "~":
            return f"(~{v})" if t.signed else f"({v} ^ {literal(mask(w), t)})"
        return self.wrap(f"(({utype(t)})0 - ({utype(t)}){v})", t)

    def wrap(self, v: str, t: Type) -> str:
        """An unsigned C value reduced to bit<W> / int<W>."""
        w = width_of(t)
        if t.signed:
            return f"p4s_sext128({v}, {w})" if w > 64 else f"p4s_sext64({v}, {w})"
        if w in (64, 128):
            return f"({v})"
        return f"(({v}) & {literal(mask(w), t)})"

    def x_Binary(self, e: ast.Binary, ctx) -> str:
        op = e.op
        a, b = self.expr(e.left, ctx), self.expr(e.right, ctx)
        if op in ("&&", "||"):
            return f"({a} {op} {b})"
        return self.sequenced([e.left, e.right], [a, b], lambda v: self.binary(e, v[0], v[1]))

    def binary(self, e: ast.Binary, a: str, b: str) -> str:
        op, t = e.op, e.type
        lt = e.left.type
        if op in ("==", "!="):
            if composite(lt):
                return f"({'' if op == '==' else '!'}{self.eq_call(e, a, b)})"
            return f"({a} {op} {b})"
        if op in ("<", ">", "<=", ">="):
            return f"({a} {op} {b})"
        if op == "++":
            rt = e.right.type
            rw = width_of(rt, e)
            w = width_of(t, e)
            ut = "u128" if w > 64 else "uint64_t"
            rb = f"(({ut}){b} & {'p4s_mask128(%d)' % rw if w > 64 else 'UINT64_C(%d)' % mask(rw)})"
            joined = f"((({ut}){a} << {rw}) | {rb})"
            return self.wrap(joined, t) if t.signed else joined
        if not isinstance(t, BitType):
            raise unsupported(e, f"`{op}` on {t}")
        w = width_of(t, e)
        ut = utype(t)
        lc, rc = const_value(e.left, self.cp.errors), const_value(e.right, self.cp.errors)
        if op in ("+", "-", "|", "^", "<<", ">>") and rc == 0:
            return a                             # x + 0 (FOR_EACH-style macros make many)
        if op in ("+", "|", "^") and lc == 0:
            return b
        if op in ("+", "-", "*"):
            return self.wrap(f"(({ut}){a} {op} ({ut}){b})", t)
        if op in ("/", "%"):
            fn = {("/", False): "p4s_div64", ("%", False): "p4s_mod64",
                  ("/", True): "p4s_div128", ("%", True): "p4s_mod128"}[(op, w > 64)]
            return f"{fn}(&P->pipe, {a}, {b})"
        if op in ("&", "|", "^"):
            return f"({a} {op} {b})"
        if op in ("|+|", "|-|"):
            if t.signed:
                if w > 64:
                    fn = "p4s_sat_add_s128" if op == "|+|" else "p4s_sat_sub_s128"
                    return f"{fn}({a}, {b}, {w})"
                return f"p4s_sat_s64((i128){a} {'+' if op == '|+|' else '-'} (i128){b}, {w})"
            if w > 64:
                return f"p4s_sat_add_u128({a}, {b}, {w})" if op == "|+|" else f"p4s_sat_sub_u128({a}, {b})"
            return f"p4s_sat_add_u64({a}, {b}, {w})" if op == "|+|" else f"p4s_sat_sub_u64({a}, {b})"
        if op in ("<<", ">>"):
            amount = const_value(e.right, self.cp.errors)
            big = w > 64
            if amount is not None:
                if op == "<<":
                    if amount >= w:
                        return literal(0, t)
                    return self.wrap(f"(({ut}){a} << {amount})", t)
                limit = 128 if big else 64
                if amount >= limit - 1:
                    return f"p4s_shr_{'s' if t.signed else 'u'}{'128' if big else '64'}({a}, {amount})"
                return f"({a} >> {amount})"
            n = f"p4s_amount({b})" if wide(e.right.type) else f"(unsigned)({b} > 255 ? 255 : {b})"
            kind = ("s" if t.signed else "u") + ("128" if big else "64")
            if op == "<<":
                return f"p4s_shl_{kind}({a}, {n}, {w})"
            return f"p4s_shr_{kind}({a}, {n})"
        raise unsupported(e, f"operator {op}")

    def eq_call(self, e: ast.Binary, a: str, b: str) -> str:
        """EQ_<T>(&a, &b); an operand that is not addressable goes through a temporary."""
        ct = self.ctype(e.left.type)
        fn = self.eq_fn(e.left.type)
        decls, ptrs = [], []
        for side, v in ((e.left, a), (e.right, b)):
            if is_lvalue(side):
                ptrs.append(f"&{v}")
            else:
                tmp = self.tmp("q")
                decls.append(f"{ct} {tmp} = {v};")
                ptrs.append(f"&{tmp}")
        call = f"{fn}({ptrs[0]}, {ptrs[1]})"
        return f"({{ {' '.join(decls)} {call}; }})" if decls else call

    def x_Cast(self, e: ast.Cast, ctx) -> str:
        t, src = e.type, e.expr.type
        v = self.expr(e.expr, ctx)
        if isinstance(t, BoolType):
            return v if isinstance(src, BoolType) else f"({v} != 0)"
        if isinstance(src, BoolType):
            return f"(({vtype(t)})({v} ? 1 : 0))"
        if isinstance(t, BitType):
            w = width_of(t, e)
            sw = src.width if isinstance(src, BitType) else (
                src.underlying.width if isinstance(src, EnumType) and src.underlying else None)
            src_signed = isinstance(src, BitType) and src.signed
            if t.signed:
                if src_signed and src.width <= w:
                    return f"(({vtype(t)}){v})"
                if isinstance(src, BitType) and src.width <= w:
                    return self.wrap(f"(({utype(t)}){v})", t)
                return self.wrap(f"(({utype(t)}){v} & {literal(mask(w), BitType(w))})", t)
            if sw is not None and sw <= w and not src_signed:
                return f"(({vtype(t)}){v})"
            return f"(({utype(t)}){v} & {literal(mask(w), t)})"
        if isinstance(t, EnumType) and t.underlying is not None:
            return f"((uint64_t){v} & UINT64_C({mask(t.underlying.width)}))"
        return v

    def x_Call(self, e: ast.Call, ctx) -> str:
        t: Target = e.target
        if t.kind == "header_method" and t.name == "isValid":
            base = self.expr(t.base, ctx)
            bt = t.base.type
            if bt.kind == "header_union":
                return "(" + " || ".join(f"{base}.{cid(f)}._v" for f in bt.fields) + ")"
            return f"({base}._v)"
        if t.kind == "table_apply":
            return self.table_apply(t.sym, ctx)
        if t.kind == "function":
            v = self.gen_call(t.sym, t.sym.node.params, e.args, ctx)
            if v is None:
                raise unsupported(e, "a function without a value used as one")
            return v
        if t.kind == "method" and isinstance(t.base.type, ExternType) and t.base.type.decl.name == "packet_in":
            pkt = self.expr(t.base, ctx)
            if t.name == "length":
                return f"((uint64_t){pkt}->len)"
            if t.name == "lookahead":
                rt = e.type
                if is_header(rt):
                    if rt.varbit is not None:
                        raise unsupported(e, "lookahead of a header with a varbit field")
                    x = self.extract_fn(rt)
                    h = self.ctype(rt)
                    return (f"({{ {h} _lk; memset(&_lk, 0, sizeof _lk); uint32_t _lo = {pkt}->off; "
                            f"{x}(P, {pkt}, &_lk); {pkt}->off = _lo; _lk; }})")
                if isinstance(rt, BitType) and not rt.signed:
                    w = width_of(rt, e)
                    return f"p4s_peek{'128' if w > 64 else '64'}(&P->pipe, {pkt}, {w})"
                if isinstance(rt, StructType) and rt.kind == "struct":
                    return self.lookahead_struct(e, rt, pkt)
                raise unsupported(e, f"lookahead of a {rt}")
        if t.kind == "method" and isinstance(t.base.type, ExternType) and t.base.type.decl.name == "Checksum16" \
                and t.name == "get":
            buf, n = self.data_bits(e.args[0], ctx)     # deprecated; BMv2 sums the fields as csum16
            return f"p4s_hash(P->pipe.core, P4S_CSUM16, {buf}, {n}, NULL, 0)"
        raise unsupported(e, f"`{expr_text(e.func)}` in an expression")

    def lookahead_struct(self, e: ast.Call, t: StructType, pkt: str) -> str:
        """lookahead<S>() of a struct of bit<W>, int<W>, bool, serializable enum or struct
        fields: the next bits cut into its fields, MSB first (p4c's ExpandLookahead)."""
        total = self.bits_of(e, t)
        if total > 128:
            raise unsupported(e, f"lookahead of a struct of {total} bits (more than 128)")
        kind = "128" if total > 64 else "64"
        return f"({{ {'u128' if total > 64 else 'uint64_t'} _v = p4s_peek{kind}(&P->pipe, {pkt}, {total}); " \
               f"{self.cut_fields(t, total)}; }})"

    def bits_of(self, e: ast.Expr, t: Type) -> int:
        if isinstance(t, StructType) and t.kind == "struct":
            return sum(self.bits_of(e, ft) for ft in t.fields.values())
        if isinstance(t, (BitType, BoolType)) or (isinstance(t, EnumType) and t.underlying is not None):
            return width_of(t, e)
        raise unsupported(e, f"lookahead of a struct with a {t} field")

    def cut_fields(self, t: StructType, end: int) -> str:
        """A compound literal of t from _v's bits below bit `end`, MSB first."""
        inits = []
        for f, ft in t.fields.items():
            if isinstance(ft, StructType):
                inits.append(f".{cid(f)} = {self.cut_fields(ft, end)}")
                end -= self.bits_of(None, ft)
                continue
            w = width_of(ft)
            end -= w
            v = f"(_v >> {end})" if end else "_v"
            v = f"((uint64_t){v} & UINT64_C({mask(w)}))" if w <= 64 else f"({v} & p4s_mask128({w}))"
            if isinstance(ft, BitType) and ft.signed:
                v = f"p4s_sext128({v}, {w})" if w > 64 else f"p4s_sext64({v}, {w})"
            inits.append(f".{cid(f)} = {v}")
        return f"(({self.ctype(t)}){{{', '.join(inits)}}})"

    def table_apply(self, table, ctx: Ctx) -> str:
        """A table's apply: its function returns (action index << 1) | hit; an `exit` in the
        action it ran leaves the caller too."""
        call = f"T_{cid(table.qname)}({', '.join(['P'] + ctx.ctl_args)})"
        if not self.may_exit(table):
            return call
        tmp = self.tmp("ap")
        ctx.exit_used = True
        return f"({{ int64_t {tmp} = {call}; if (P->pipe.exiting) goto L_exit; {tmp}; }})"


def inits_of(t: StructType, fields: list[str], values: list[str]) -> list[str]:
    inits = ["._v = 1"] if t.kind == "header" else []
    return inits + [f".{cid(f)} = {v}" for f, v in zip(fields, values)]

