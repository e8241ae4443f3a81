"""P4 expressions as Python expressions, with P4's bit-width arithmetic inlined."""
from __future__ import annotations

from ...frontend import ast
from ...frontend.checker import Target, const_value, error_at, expr_text
from ...frontend.types import (ActionRunType, ApplyResultType, BitType, BoolType, EnumType,
                              StackType, StructType, TupleType, Type, field_width, is_header)
from .common import CodeGen, Ctx, attr, cls_name, mask, py_ident


class ExprGen(CodeGen):
    # ---- expressions --------------------------------------------------------------------
    def expr(self, e: ast.Expr, ctx: Ctx) -> str:
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
            if e.name == "last":     # in a parser an empty stack's last is StackOutOfBounds
                return f"{base}.last_elem()" if ctx.kind == "parser" else f"{base}.at({base}.nxt - 1)"
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
        return self.member_ref(e, base)

    def member_ref(self, e: ast.Member, base: str) -> str:
        """`base.field`; a header or struct of a parameter through its local alias, if any
        (`h_<field>`: no other generated name starts with h_)."""
        ref = f"{base}.{attr(e.name)}"
        if isinstance(e.expr, ast.NameRef) and e.expr.decl.kind == "param" and not e.expr.decl.frame \
                and isinstance(e.type, StructType):
            return self.alias(ref, f"h_{py_ident(e.name)}")
        return ref

    def x_Index(self, e: ast.Index, ctx) -> str:
        i = const_value(e.index, self.cp.errors)
        if isinstance(e.expr.type, TupleType):
            return f"{self.expr(e.expr, ctx)}[{i}]"
        if i is not None:                        # the checker proved it in bounds
            return f"{self.expr(e.expr, ctx)}.items[{i}]"
        return f"{self.expr(e.expr, ctx)}.at({self.expr(e.index, ctx)})"

    def x_Slice(self, e: ast.Slice, ctx) -> str:
        v = self.expr(e.expr, ctx)
        m = mask(e.hi_v - e.lo_v + 1)
        return f"(({v} >> {e.lo_v}) & {m})" if e.lo_v else f"({v} & {m})"

    def x_Cond(self, e: ast.Cond, ctx) -> str:
        return f"({self.expr(e.then, ctx)} if {self.expr(e.cond, ctx)} else {self.expr(e.else_, ctx)})"

    def x_ListExpr(self, e: ast.ListExpr, ctx) -> str:
        if isinstance(e.type, StructType):       # `{a, b}` as a header or struct value
            values = []
            for x in e.items:
                v = self.expr(x, ctx)
                fresh = isinstance(x, (ast.ListExpr, ast.StructExpr))
                values.append(f"{v}._copy()" if isinstance(x.type, (StructType, StackType)) and not fresh else v)
            return f"N_{cls_name(e.type)}({', '.join(values)})"
        return "(" + "".join(self.expr(x, ctx) + ", " for x in e.items) + ")"

    x_StructExpr = x_ListExpr

    def x_Unary(self, e: ast.Unary, ctx) -> str:
        v = self.expr(e.expr, ctx)
        t = e.type
        if e.op == "!":
            return f"(not {v})"
        if e.op == "~":
            return f"(~{v})" if t.signed else f"({v} ^ {mask(t.width)})"
        if isinstance(t, BitType):
            return self.wrap(f"-{v}", t)
        return f"(-{v})"

    def wrap(self, v: str, t: Type) -> str:
        if not isinstance(t, BitType):
            return f"({v})"
        if t.signed:
            h = 1 << (t.width - 1)
            return f"(((({v}) + {h}) & {mask(t.width)}) - {h})"
        return f"(({v}) & {mask(t.width)})"

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
            b_ = f"({b} & {mask(rt.width)})" if rt.signed else b
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
            lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if t.signed else (0, mask(w))
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
                if isinstance(src, BitType) and src.width <= t.width:
                    # Every bit<W> value p4sim computes or stores is already in [0, 2^W)
                    # (fields, locals, parameters, registers); only the sign needs flipping.
                    return f"(({v} ^ {h}) - {h})"
                return f"((({v} & {mask(t.width)}) ^ {h}) - {h})"
            if sw is not None and sw <= t.width and not (isinstance(src, BitType) and src.signed):
                return v
            return f"({v} & {mask(t.width)})"
        if isinstance(t, EnumType):
            return f"({v} & {mask(t.underlying.width)})"
        return v

    def lookahead_struct(self, e: ast.Call, t: StructType, pkt: str) -> str:
        """lookahead<S>() of a struct of bit<W>, int<W>, bool, serializable enum or struct
        fields: the next bits cut into its fields, MSB first, as p4c's midend
        ExpandLookahead lowers it for BMv2."""
        total = self.bits_of(e, t)
        return f"(lambda v: {self.cut_fields(t, total)})({pkt}.peek({total}))"

    def bits_of(self, e: ast.Expr, t: Type) -> int:
        if isinstance(t, StructType) and t.kind == "struct":
            return sum(self.bits_of(e, ft) for ft in t.fields.values())
        if isinstance(t, (BitType, BoolType)) or (isinstance(t, EnumType) and t.underlying is not None):
            return field_width(t)
        raise error_at(e, f"lookahead<T>: T must be made of bit<W>, int<W>, bool, serializable enums "
                          f"and structs of them, not {t}")

    def cut_fields(self, t: StructType, end: int) -> str:
        """N_S(...) of the fields of t found in v's bits below bit `end` (MSB first)."""
        parts = []
        for ft in t.fields.values():
            if isinstance(ft, StructType):
                parts.append(self.cut_fields(ft, end))
                end -= self.bits_of(None, ft)
                continue
            w = field_width(ft)
            end -= w
            v = f"((v >> {end}) & {mask(w)})" if end else f"(v & {mask(w)})"
            if isinstance(ft, BoolType):
                v = f"({v} == 1)"
            elif isinstance(ft, BitType) and ft.signed:
                v = f"(({v} ^ {1 << (w - 1)}) - {1 << (w - 1)})"
            parts.append(v)
        return f"N_{cls_name(t)}({', '.join(parts)})"

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
            return self.gen_call(t.sym, t.sym.node.params, e.args, ctx)
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
                if isinstance(rt, StructType) and rt.kind == "struct":
                    return self.lookahead_struct(e, rt, pkt)
                raise error_at(e, f"lookahead of a {rt} is not supported by p4sim")
        if t.kind == "method" and t.base.type.decl.name == "Checksum16" and t.name == "get":
            acc, n = self.data_bits(e.args[0], ctx)     # deprecated; BMv2 sums the fields as csum16
            return f"CSUM16_BITS({acc}, {n})"
        raise error_at(e, f"`{expr_text(e.func)}` cannot be used in an expression here")
