"""v1model and core externs as C: packet_in/out, registers, counters, meters, hashes, checksums,
clone/resubmit/recirculate, digests; the same choices as backends/python/externs.py."""
from __future__ import annotations

from ....frontend import ast
from ....frontend.checker import Target, const_value
from ....frontend.types import (BitType, BoolType, EnumType, IntType, StackType, StructType, Type, VarbitType,
                                field_width, is_header)
from .common import CodeGen, Ctx, cid, composite, literal, mask, unsupported, utype, vtype, wide, width_of
from .expressions import has_effects, is_lvalue

ALGORITHMS = {"crc32": "P4S_CRC32", "crc32_custom": "P4S_CRC32_CUSTOM", "crc16": "P4S_CRC16",
              "crc16_custom": "P4S_CRC16_CUSTOM", "random": "P4S_RANDOM", "identity": "P4S_IDENTITY",
              "csum16": "P4S_CSUM16", "xor16": "P4S_XOR16"}
SYNTHETIC_FIELD_LISTS = 1 << 20     # ids of field lists named by their fields (clone3, resubmit(data))


def is_stack_next(e: ast.Expr) -> bool:
    return isinstance(e, ast.Member) and isinstance(e.expr.type, StackType) and e.name == "next"


def list_bits(e: ast.Expr) -> int:
    """The most bits a field list item can pack into."""
    t = e.type
    if isinstance(e, ast.ListExpr):
        return sum(list_bits(x) for x in e.items)
    return type_bits(t)


def type_bits(t: Type) -> int:
    if isinstance(t, StructType):
        return sum(type_bits(ft) for ft in t.fields.values())
    if isinstance(t, StackType):
        return t.size * type_bits(t.elem)
    if isinstance(t, VarbitType):
        return t.max_width
    return field_width(t) or 64


class ExternGen(CodeGen):
    def init_externs(self) -> None:
        self.synthetic_lists: dict[tuple[str, ...], int] = {}

    def data_bits(self, e: ast.Expr, ctx: Ctx, skip_invalid: bool = True) -> tuple[str, str]:
        """Statements that pack a field list MSB first; returns (bytes buffer, byte count).

        Fields of invalid headers contribute nothing, as in BMv2's field lists (with
        skip_invalid False, as for hash(), scalar fields of invalid headers still count)."""
        buf, bits, n = self.tmp("buf"), self.tmp("b"), self.tmp("n")
        self.emit(f"uint8_t {buf}[{list_bits(e) // 8 + 2}];")
        self.emit(f"p4s_bits {bits};")
        self.emit(f"p4s_bits_init(&{bits}, {buf});")
        for item in (e.items if isinstance(e, ast.ListExpr) else [e]):
            self.pack_item(item, bits, ctx, skip_invalid)
        self.emit(f"uint32_t {n} = p4s_bits_end(&{bits});")
        return buf, n

    def pack_item(self, item: ast.Expr, bits: str, ctx: Ctx, skip_invalid: bool) -> None:
        t = item.type
        if is_header(t):
            h = self.expr(item, ctx)
            if not is_lvalue(item):
                raise unsupported(item, "a header value that is not a variable in a field list")
            self.emit(f"if ({h}._v) {self.pack_fn(t)}(&{bits}, &{h});")
        elif isinstance(t, StructType):
            if t.kind == "header_union":
                raise unsupported(item, "a header union in a field list")
            for f, ft in t.fields.items():
                sub = ast.Member(item, f, pos=item.pos)
                sub.type = ft
                self.pack_item(sub, bits, ctx, skip_invalid)
        elif isinstance(t, StackType):
            if not is_header(t.elem):
                raise unsupported(item, "a stack of header unions in a field list")
            s = self.expr(item, ctx)
            self.emit(f"for (int _i = 0; _i < {t.size}; _i++) "
                      f"if ({s}.e[_i]._v) {self.pack_fn(t.elem)}(&{bits}, &{s}.e[_i]);")
        elif isinstance(item, ast.ListExpr):
            for sub in item.items:
                self.pack_item(sub, bits, ctx, skip_invalid)
        elif isinstance(t, VarbitType):
            h, f = self.expr(item.expr, ctx), cid(item.name)
            self.emit(f"if ({h}._v) p4s_bits_bytes(&{bits}, {h}.{f}, {h}.{f}__n >> 3);")
        else:
            if isinstance(t, BoolType):
                w, v = 1, f"(uint64_t)({self.expr(item, ctx)} ? 1 : 0)"
            elif isinstance(t, BitType):
                w, v = width_of(t, item), self.expr(item, ctx)
                if t.signed:
                    v = f"(({utype(t)}){v} & {literal(mask(w), BitType(w))})"
            elif isinstance(t, EnumType) and t.underlying:
                w, v = t.underlying.width, self.expr(item, ctx)
            else:
                raise unsupported(item, f"a {t} in a field list")
            put = f"p4s_bits_put128(&{bits}, {v}, {w});" if w > 64 else f"p4s_bits_put(&{bits}, {v}, {w});"
            owner = item.expr if isinstance(item, ast.Member) and skip_invalid else None
            if owner is not None and is_header(owner.type):
                self.emit(f"if ({self.expr(owner, ctx)}._v) {put}")
            else:
                self.emit(put)

    def store(self, e: ast.Expr, value: str, ctx: Ctx, fits: int | None = None) -> None:
        """Assign a computed value to an out argument of an extern, cut to its width (no cut
        when the value is known to be an unsigned `fits`-bit number that fits)."""
        if isinstance(e, ast.DontCare):
            return
        t = e.type
        if isinstance(t, BitType):
            w = width_of(t, e)
            if fits is not None and not t.signed and fits <= w:
                value = f"(({vtype(t)})({value}))"
            else:
                value = f"(({utype(t)})({value}) & {literal(mask(w), BitType(w))})"
                if t.signed:
                    value = f"p4s_sext128({value}, {w})" if w > 64 else f"p4s_sext64({value}, {w})"
        elif not composite(t):
            value = f"(({vtype(t, e)})({value}))"
        if isinstance(e, ast.Slice):
            tmp = self.tmp("v")
            self.emit(f"{vtype(t)} {tmp} = {value};")
            self.assign_value(e, tmp, ctx)
            return
        self.emit(f"{self.lvalue(e, ctx)} = {value};")

    def extern_call(self, c: ast.Call, ctx: Ctx) -> None:
        t: Target = c.target
        name = t.name
        a = c.args
        pk = "P->pipe.pk"
        if t.kind == "method":
            ext = t.base.type.decl.name
            if ext == "packet_in":
                pkt = self.expr(t.base, ctx)
                if name == "extract":
                    self.extract(a[0], pkt, ctx, self.expr(a[1], ctx) if len(a) > 1 else None,
                                 a[1] if len(a) > 1 else None)
                elif name == "advance":
                    self.emit(f"p4s_advance(&P->pipe, {pkt}, (u128){self.expr(a[0], ctx)});")
                else:
                    self.emit(f"(void){self.expr(c, ctx)};")
                return
            if ext == "packet_out" and name == "emit":
                self.emit_value(a[0], ctx)
                return
            if t.sym is None or t.sym.kind != "instance":
                raise unsupported(c, f"{ext}.{name} on a parameter")
            qname = t.sym.qname
            if ext == "register":
                info = self.cp.info.registers[qname]
                cells = f"P->{self.register_ref(qname)}"
                if name == "read":
                    i = self.tmp("i")
                    self.emit(f"uint64_t {i} = {self.index64(a[1], ctx)};")
                    self.store(a[0], f"({i} < {info.size} ? {cells}[{i}] : 0)", ctx, info.bitwidth)
                else:
                    i = self.tmp("i")
                    self.emit(f"uint64_t {i} = {self.index64(a[0], ctx)};")
                    v, vt = self.expr(a[1], ctx), a[1].type
                    if not (isinstance(vt, BitType) and not vt.signed and vt.width <= info.bitwidth):
                        if info.bitwidth > 64 or wide(vt):
                            v = f"((u128)({v}) & p4s_mask128({info.bitwidth}))"
                        else:
                            v = f"((uint64_t)({v}) & UINT64_C({mask(info.bitwidth)}))"
                    self.emit(f"if ({i} < {info.size}) {cells}[{i}] = {v};")
                return
            if ext == "counter":
                cid_ = self.counter_id(qname)
                i = self.tmp("i")
                self.emit(f"uint64_t {i} = {self.index64(a[0], ctx)};")
                self.emit(f"if ({i} < {self.cp.info.counters[qname].size}) {{ "
                          f"P->pipe.counters[{cid_}].packets[{i}]++; "
                          f"P->pipe.counters[{cid_}].bytes[{i}] += {pk}.length; }}")
                return
            if ext == "direct_counter":
                return                                  # counted on every hit of its table
            if ext == "meter":
                idx = self.index64(a[0], ctx)
                self.store(a[1], f"p4s_meter_exec(&P->pipe.meters[{self.meter_id(qname)}], {idx}, {pk}.length)", ctx)
                return
            if ext == "direct_meter":
                units = "1" if self.cp.info.meters[qname].unit == "PACKETS" else f"{pk}.length"
                self.store(a[0], f"({pk}.entry != NULL ? (uint64_t)p4s_meter_execute(&{pk}.entry->d.meter, {units}) : 0)",
                           ctx)
                return
            raise unsupported(c, f"{ext}.{name}")
        if name == "mark_to_drop":
            sm = self.expr(a[0], ctx) if a else f"(*(sm_t *){pk}.sm)"
            self.emit(f"{sm}.egress_spec = 511;")
            self.emit(f"{sm}.mcast_grp = 0;")
        elif name == "verify":
            self.emit(f"if (!{self.expr(a[0], ctx)}) p4s_reject(&P->pipe, {self.expr(a[1], ctx)});")
        elif name in ("verify_checksum", "update_checksum", "verify_checksum_with_payload",
                      "update_checksum_with_payload"):
            self.checksum(c, name, ctx)
        elif name == "hash":
            self.hash(c, ctx)
        elif name == "random":
            lo, hi = a[1].type, a[2].type
            if wide(lo) or wide(hi) or wide(a[0].type):
                raise unsupported(c, "random() on values wider than 64 bits")
            self.store(a[0], f"p4s_randint(&P->pipe, (i128){self.expr(a[1], ctx)}, (i128){self.expr(a[2], ctx)})", ctx)
        elif name == "digest":
            self.digest(c, ctx)
        elif name in ("clone", "clone3", "clone_preserving_field_list"):
            kind = self.const(a[0])
            preserve = self.field_list_arg(a[2]) if len(a) > 2 else -1
            self.emit(f"{pk}.dirty = 1; {pk}.clone_set = 1; {pk}.clone_kind = {int(kind)}; "
                      f"{pk}.clone_session = (uint64_t){self.expr(a[1], ctx)}; {pk}.clone_fl = {preserve};")
        elif name in ("resubmit", "resubmit_preserving_field_list"):
            fl = self.field_list_arg(a[0]) if a else -1
            self.emit(f"{pk}.dirty = 1; {pk}.resubmit_fl = {fl}; {pk}.resubmit_flag = 1;")
        elif name in ("recirculate", "recirculate_preserving_field_list"):
            fl = self.field_list_arg(a[0]) if a else -1
            self.emit(f"{pk}.dirty = 1; {pk}.recirculate_fl = {fl}; {pk}.recirculate_flag = 1;")
        elif name == "truncate":
            self.emit(f"{pk}.dirty = 1; {pk}.truncate = (uint64_t){self.expr(a[0], ctx)};")
        elif name == "log_msg":
            if len(a) > 1:                              # a no-op unless tracing (the Python backend)
                for x in (a[1].items if isinstance(a[1], ast.ListExpr) else [a[1]]):
                    v = self.expr(x, ctx)
                    if has_effects(x):
                        self.emit(f"(void)({v});")
        elif name == "static_assert":
            pass                        # decided by the checker at compile time
        elif name in ("assert", "assume"):
            where = f"{name} failed at {c.pos.file}:{c.pos.line}".replace("\\", "/").replace('"', "'")
            self.emit(f'if (!{self.expr(a[0], ctx)}) p4s_fault(&P->pipe, "{where}");')
        else:
            raise unsupported(c, f"extern {name}")

    def hash(self, c: ast.Call, ctx: Ctx) -> None:
        a = c.args
        algo = self.algo(a[1])
        # p4c hands hash() its fields as values: those of an invalid header count with
        # whatever they hold (checksums_hashes #4), unlike checksums' field lists.
        buf, n = self.data_bits(a[3], ctx, skip_invalid=False)
        base, mx = self.expr(a[2], ctx), self.expr(a[4], ctx)
        h, m = self.tmp("h"), self.tmp("m")
        self.emit(f"uint64_t {h} = p4s_hash(P->pipe.core, {ALGORITHMS[algo]}, {buf}, {n}, NULL, 0);")
        big = any(wide(x.type) or (isinstance(x.type, BitType) and x.type.signed) for x in (a[0], a[2], a[4]))
        ct = "u128" if big else "uint64_t"
        self.emit(f"{ct} {m} = ({ct}){mx};")
        self.store(a[0], f"({m} ? ({ct}){base} + ({ct}){h} % {m} : ({ct}){base})", ctx)

    def digest(self, c: ast.Call, ctx: Ctx) -> None:
        dt: StructType = c.digest_type
        data = c.args[1]
        if isinstance(data, ast.ListExpr):
            vals = [self.expr(x, ctx) for x in data.items]
        else:
            base = self.expr(data, ctx)
            vals = [f"{base}.{cid(f)}" for f in dt.fields]
        temps, nwords = [], 0
        for v, (f, ft) in zip(vals, dt.fields.items()):
            if composite(ft):
                raise unsupported(c, f"digest field {dt.name}.{f} of type {ft}")
            tmp = self.tmp("d")
            self.emit(f"{vtype(ft, c)} {tmp} = {v};")
            temps.append((tmp, ft))
            nwords += 2 if wide(ft) else 1
        w = self.tmp("w")
        self.emit(f"uint64_t *{w} = p4s_digest_begin(&P->pipe, {self.digest_id(dt)}, {nwords});")
        at = 0
        for tmp, ft in temps:
            if wide(ft):
                self.emit(f"{w}[{at}] = (uint64_t){tmp}; {w}[{at + 1}] = (uint64_t)((u128){tmp} >> 64);")
                at += 2
            else:
                self.emit(f"{w}[{at}] = (uint64_t){tmp};")
                at += 1

    def field_list_arg(self, e: ast.Expr) -> int:
        """A @field_list index, or (old clone3/resubmit forms) the id of the metadata fields listed."""
        v = const_value(e, self.cp.errors)
        if v is not None and isinstance(e.type, (BitType, IntType)):
            return int(v)
        items = e.items if isinstance(e, ast.ListExpr) else [e]
        names: list[str] = []
        for item in items:
            if isinstance(item, ast.Member) and item.expr.type is self.cp.meta_type:
                names.append(item.name)
            elif isinstance(item.type, StructType) and item.type is self.cp.meta_type:
                names.extend(item.type.fields)
        key = tuple(names)
        if key not in self.synthetic_lists:
            self.synthetic_lists[key] = SYNTHETIC_FIELD_LISTS + len(self.synthetic_lists)
        return self.synthetic_lists[key]

    def algo(self, e: ast.Expr) -> str:
        if not isinstance(e, ast.TypeMember) or e.name not in ALGORITHMS:
            raise unsupported(e, "a hash algorithm that is not a HashAlgorithm member")
        return e.name

    def checksum(self, c: ast.Call, name: str, ctx: Ctx) -> None:
        a = c.args
        algo = self.algo(a[3])
        payload = name.endswith("_with_payload")
        self.emit(f"if ({self.expr(a[0], ctx)}) {{")
        with self.indented():
            buf, n = self.data_bits(a[1], ctx)
            h = self.tmp("ck")
            tail = "P->pipe.pk.payload, P->pipe.pk.payload_len" if payload else "NULL, 0"
            value = f"p4s_hash(P->pipe.core, {ALGORITHMS[algo]}, {buf}, {n}, {tail})"
            if algo != "csum16" or payload:         # the Python backend cuts all but plain csum16
                value = f"({value} & UINT64_C({mask(min(width_of(a[2].type, a[2]), 64))}))"
            self.emit(f"uint64_t {h} = {value};")
            if name.startswith("verify"):
                self.emit(f"if ({h} != (uint64_t){self.expr(a[2], ctx)}) (*(sm_t *)P->pipe.pk.sm).checksum_error = 1;")
            else:
                self.store(a[2], h, ctx)
        self.emit("}")

    def extract(self, target: ast.Expr, pkt: str, ctx: Ctx, nbits: str | None, nbits_e: ast.Expr | None) -> None:
        t = target.type
        if not is_header(t):
            raise unsupported(target, f"extract into a {t}")
        if (nbits is None) != (t.varbit is None):
            raise unsupported(target, f"extract of header {t.name} with{'out' if nbits is None else ''} a size")
        x = self.extract_fn(t)
        size = ""
        if nbits is not None:
            size = f", ({{ u128 _nb = (u128){nbits}; _nb > UINT64_MAX ? UINT64_MAX : (uint64_t)_nb; }})" \
                if wide(nbits_e.type) else f", (uint64_t){nbits}"
        # `s.next` (or `s.next.member` of a stack of unions): the element at nextIndex.
        nxt = target if is_stack_next(target) else target.expr if isinstance(target, ast.Member) \
            and is_stack_next(target.expr) else None
        if nxt is None:
            if not is_lvalue(target):
                raise unsupported(target, "extract into this expression")
            self.emit(f"{x}(P, {pkt}, &{self.expr(target, ctx)}{size});")
            self.union_siblings(target, ctx)
            return
        s = self.expr(nxt.expr, ctx)
        elem = self.next_fn(nxt.expr.type, False)
        if nxt is target:
            self.emit(f"{x}(P, {pkt}, {elem}(P, &{s}){size}); {s}.nxt += 1;")
            return
        u = self.tmp("u")
        self.emit(f"{self.ctype(nxt.type)} *{u} = {elem}(P, &{s}); {x}(P, {pkt}, &{u}->{cid(target.name)}{size}); "
                  f"{s}.nxt += 1;")
        for other in nxt.type.fields:
            if other != target.name:
                self.emit(f"{u}->{cid(other)}._v = 0;")

    def emit_value(self, e: ast.Expr, ctx: Ctx) -> None:
        t = e.type
        if is_header(t):
            if not is_lvalue(e):
                raise unsupported(e, "emit of a header value that is not a variable")
            self.emit(f"{self.emit_fn(t)}(P, &{self.expr(e, ctx)});")
        elif isinstance(t, StackType) and is_header(t.elem):
            s = self.expr(e, ctx)
            self.emit(f"for (int _i = 0; _i < {t.size}; _i++) {self.emit_fn(t.elem)}(P, &{s}.e[_i]);")
        elif isinstance(t, StackType):              # a stack of unions: each one's valid member
            s = self.expr(e, ctx)
            self.emit(f"for (int _i = 0; _i < {t.size}; _i++) {{")
            with self.indented():
                for f, ft in t.elem.fields.items():
                    self.emit(f"{self.emit_fn(ft)}(P, &{s}.e[_i].{cid(f)});")
            self.emit("}")
        elif isinstance(t, StructType):
            for f, ft in t.fields.items():
                sub = ast.Member(e, f, pos=e.pos)
                sub.type = ft
                self.emit_value(sub, ctx)
        else:
            raise unsupported(e, f"emit of a {t}")
