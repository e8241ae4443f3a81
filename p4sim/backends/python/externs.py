"""v1model and core externs: packet_in/out, registers, counters, meters, hashes, checksums,
clone/resubmit/recirculate, digests."""
from __future__ import annotations

from ...frontend import ast
from ...frontend.checker import Sym, Target, const_value, error_at
from ...frontend.types import (BitType, BoolType, EnumType, IntType, StackType, StructType,
                              VarbitType, is_header)
from .common import CodeGen, Ctx, attr, mask, pure
from .layout import varbit_len


def is_stack_next(e: ast.Expr) -> bool:
    return isinstance(e, ast.Member) and isinstance(e.expr.type, StackType) and e.name == "next"


class ExternGen(CodeGen):
    def data_bits(self, e: ast.Expr, ctx: Ctx, skip_invalid: bool = True) -> tuple[str, str]:
        """Statements that pack a field list into an int; returns (value_var, nbits_var).

        Fields of invalid headers contribute nothing, as in BMv2's field lists; runs of
        fields of one header are packed by one statement under one validity test."""
        acc, n = self.tmp("acc"), self.tmp("n")
        self.emit(f"{acc} = 0; {n} = 0")
        pieces: list[tuple[str | None, str, int]] = []
        for item in (e.items if isinstance(e, ast.ListExpr) else [e]):
            self.pack_item(item, pieces, ctx, skip_invalid)
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

    def pack_item(self, item: ast.Expr, pieces: list, ctx: Ctx, skip_invalid: bool) -> None:
        """Flatten one field-list item into (validity owner, value, width) pieces."""
        t = item.type
        if is_header(t):
            h = self.expr(item, ctx)
            pieces.append((h, f"IV_{t.name}({h})", t.width))
        elif isinstance(t, StructType):
            for f, ft in t.fields.items():
                sub = ast.Member(item, f, pos=item.pos)
                sub.type = ft
                self.pack_item(sub, pieces, ctx, skip_invalid)
        elif isinstance(t, StackType):
            s, w = self.expr(item, ctx), t.elem.width
            pieces.append((None, f"for _h in {s}.items:\n{'    ' * (self.ind + 1)}"
                                 f"if _h._v: {{acc}} = ({{acc}} << {w}) | IV_{t.elem.name}(_h); {{n}} += {w}", 0))
        elif isinstance(item, ast.ListExpr):
            for sub in item.items:
                self.pack_item(sub, pieces, ctx, skip_invalid)
        elif isinstance(t, VarbitType):
            h, a = self.expr(item.expr, ctx), attr(item.name)
            n = f"{h}.{varbit_len(a)}"
            pieces.append((None, f"if {h}._v: {{acc}} = ({{acc}} << {n}) | {h}.{a}; {{n}} += {n}", 0))
        else:
            if isinstance(t, BoolType):
                width, v = 1, f"(1 if {self.expr(item, ctx)} else 0)"
            elif isinstance(t, BitType):
                width, v = t.width, self.expr(item, ctx)
                if t.signed:
                    v = f"({v} & {mask(width)})"
            elif isinstance(t, EnumType) and t.underlying:
                width, v = t.underlying.width, self.expr(item, ctx)
            else:
                raise error_at(item, f"cannot put a {t} in a field list (it needs a width)")
            owner = item.expr if isinstance(item, ast.Member) and skip_invalid else None
            pieces.append((self.expr(owner, ctx) if owner is not None and is_header(owner.type) else None,
                           v, width))

    def data_bytes(self, e: ast.Expr, ctx: Ctx, skip_invalid: bool = True) -> str:
        acc, n = self.data_bits(e, ctx, skip_invalid)
        return f"to_bytes({acc}, {n})"

    def store(self, e: ast.Expr, value: str, ctx: Ctx, fits: int | None = None) -> None:
        """Assign a computed int to an out argument of an extern, cut to its width
        (no cut when the value is known to be an unsigned `fits`-bit number that fits)."""
        if isinstance(e, ast.DontCare):
            return
        t = e.type
        if isinstance(t, BitType) and not (fits is not None and not t.signed and fits <= t.width):
            value = f"({value}) & {mask(t.width)}"
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

    def extern_call(self, c: ast.Call, ctx: Ctx) -> None:
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
                    self.extract(a[0], pkt, ctx, self.expr(a[1], ctx) if len(a) > 1 else None)
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
                cells = self.alias(f"{inst}.values", "R_" + str(inst).removeprefix("O_"))   # no other R_ names
                if name == "read":
                    i = self.register_index(a[1], ctx)
                    self.store(a[0], f"{cells}[{i}] if {i} < {info.size} else 0", ctx, info.bitwidth)
                    if self.trace:
                        self.emit(f"LOG('register {t.sym.qname}.read(%d)', {i})")
                else:
                    i = self.register_index(a[0], ctx)
                    v, vt = self.expr(a[1], ctx), a[1].type
                    if not (isinstance(vt, BitType) and not vt.signed and vt.width <= info.bitwidth):
                        v = f"({v}) & {mask(info.bitwidth)}"
                    self.emit(f"if {i} < {info.size}: {cells}[{i}] = {v}")
                    if self.trace:
                        self.emit(f"LOG('register {t.sym.qname}.write(%d, %d)', {i}, {cells}[{i}] if {i} < {info.size} else 0)")
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
            # p4c hands hash() its fields as values: those of an invalid header count with
            # whatever they hold (checksums_hashes #4), unlike checksums' field lists.
            data = self.data_bytes(a[3], ctx, skip_invalid=False)
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
        elif name == "static_assert":
            pass                        # decided by the checker at compile time
        elif name in ("assert", "assume"):
            self.emit(f"if not {self.expr(a[0], ctx)}: raise AssertFailed({name!r} + ' failed at {c.pos.file}:{c.pos.line}')")
        else:
            raise error_at(c, f"extern {name} is not supported by p4sim")

    def register_index(self, e: ast.Expr, ctx: Ctx) -> str:
        """A variable holding a register index: the one an earlier read or write of the
        same block computed, if nothing since wrote what it reads (StmtGen.still_known).
        A read-modify-write (`r.read(x, base + 1); ...; r.write(base + 1, y)`) computes
        its index once."""
        code = self.expr(e, ctx)
        if self.known is not None and self.optimize and code in self.known:
            return self.known[code][0]
        i = self.tmp("i")
        self.emit(f"{i} = {code}")
        if self.known is not None and pure(e):
            self.known[code] = (i, e)
        return i

    def field_list_arg(self, e: ast.Expr, ctx: Ctx) -> str:
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

    def checksum(self, c: ast.Call, name: str, ctx: Ctx) -> None:
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
            self.emit(f"{h} = HASH[{algo!r}]({data}) & {mask(a[2].type.width)}")
        if name.startswith("verify"):
            self.emit(f"if {h} != {self.expr(a[2], ctx)}: PK.sm.checksum_error = 1")
            if self.trace:
                self.emit(f"LOG('verify_checksum: %s', 'ok' if {h} == {self.expr(a[2], ctx)} else 'mismatch')")
        else:
            self.store(a[2], h, ctx)
            if self.trace:
                self.emit(f"LOG('update_checksum -> 0x%x', {h})")
        self.ind -= 1

    def extract(self, target: ast.Expr, pkt: str, ctx: Ctx, nbits: str | None) -> None:
        t = target.type
        if not is_header(t):
            raise error_at(target, f"extract needs a header, got {t}")
        if (nbits is None) != (t.varbit is None):
            raise error_at(target, f"header {t.name} {'has a varbit field: extract it with its size in bits' if nbits is None else 'has no varbit field'}")
        size = "" if nbits is None else f", {nbits}"
        # `s.next` (or `s.next.member` of a stack of unions): the element at nextIndex.
        nxt = target if is_stack_next(target) else target.expr if isinstance(target, ast.Member) and is_stack_next(target.expr) else None
        if nxt is None:
            self.emit(f"X_{t.name}({pkt}, {self.expr(target, ctx)}{size})")
            self.union_siblings(target, ctx)
            return
        s = self.expr(nxt.expr, ctx)
        if nxt is target:
            self.emit(f"X_{t.name}({pkt}, {s}.next_elem(){size}); {s}.nxt += 1")
            return
        u = self.tmp("u")
        self.emit(f"{u} = {s}.next_elem(); X_{t.name}({pkt}, {u}.{attr(target.name)}{size}); {s}.nxt += 1")
        for other in nxt.type.fields:
            if other != target.name:
                self.emit(f"{u}.{attr(other)}._v = False")

    def emit_value(self, e: ast.Expr, out: str, ctx: Ctx) -> None:
        t = e.type
        if is_header(t):
            self.emit(f"E_{t.name}({out}, {self.expr(e, ctx)})")
        elif isinstance(t, StackType) and is_header(t.elem):
            self.emit(f"for _h in {self.expr(e, ctx)}.items: E_{t.elem.name}({out}, _h)")
        elif isinstance(t, StackType):              # a stack of unions: each one's valid member
            self.emit(f"for _u in {self.expr(e, ctx)}.items:")
            self.ind += 1
            for f, ft in t.elem.fields.items():
                self.emit(f"E_{ft.name}({out}, _u.{attr(f)})")
            self.ind -= 1
        elif isinstance(t, StructType):
            for f, ft in t.fields.items():
                sub = ast.Member(e, f, pos=e.pos)
                sub.type = ft
                self.emit_value(sub, out, ctx)
        else:
            raise error_at(e, f"emit needs a header, a stack or a struct of them, got {t}")
