"""Headers, structs, unions and stacks as C structs, and their helpers: extract (X_), emit (E_),
pack into a field list (IV_), setValid (SV_), equality (EQ_), a new packet's invalidation
(INV_), and a stack's element access (AT_, NEXT_, LAST_) and shifts (PUSH_, POP_).

A header's C struct holds `_v` (valid) and its fields in their storage types (common.stype);
a varbit field is its bytes `f` and its length in bits `f__n`. A stack is `{e[N], nxt}`.
"""
from __future__ import annotations

from ....frontend import ast
from ....frontend.types import BitType, StackType, StructType, TupleType, Type, VarbitType, field_width
from .common import CodeGen, cid, composite, mask, stack_name, struct_name, stype, unsupported, vtype


def byte_read(off: int, w: int, src: str = "d") -> str:
    """C reading `w` bits (w <= 128) at bit offset `off` of big-endian bytes `src` as u64/u128."""
    first, last = off // 8, (off + w - 1) // 8
    nb = last - first + 1
    shift = nb * 8 - (off % 8) - w
    if w > 64:
        if nb > 16:                       # split: the top bits, then the low 64
            return f"(((u128){byte_read(off, w - 64, src)} << 64) | (u128){byte_read(off + w - 64, 64, src)})"
        v = f"p4s_be128({src} + {first}, {nb})"
        v = f"({v} >> {shift})" if shift else v
        return f"({v} & {u128_mask(w)})" if off % 8 else v
    if nb > 8:
        v = f"(uint64_t)(p4s_be128({src} + {first}, {nb}) >> {shift})"
    else:
        v = f"p4s_be({src} + {first}, {nb})"
        v = f"({v} >> {shift})" if shift else v
    return f"({v} & UINT64_C({mask(w)}))" if off % 8 and w < 64 else v


def u128_mask(w: int) -> str:
    return f"p4s_mask128({w})"


def field_value(h: str, f: str, ft: Type) -> tuple[str, int]:
    """A header field's bits as an unsigned C value, and its width."""
    w = field_width(ft)
    v = f"{h}->{cid(f)}"
    if isinstance(ft, BitType) and ft.signed:
        v = f"((u128){v} & {u128_mask(w)})" if w > 64 else f"((uint64_t){v} & UINT64_C({mask(w)}))"
    return v, w


class LayoutGen(CodeGen):
    def init_layout(self) -> None:
        self.types: list[str] = []                 # typedefs, in dependency order
        self.support: list[str] = []               # helper functions
        self.made: set[str] = set()                # names of typedefs and helpers already written
        self.scratch: dict[str, str] = {}          # element type name -> its scratch field in pl_t
        self.tuples: dict[tuple, str] = {}         # tuple type -> its C struct

    # ---- types ------------------------------------------------------------------------
    def ctype(self, t: Type, where=None) -> str:
        """The C type of a value of type t (a struct's, a stack's, or a scalar's storage)."""
        if isinstance(t, StructType):
            self.struct_type(t)
            return struct_name(t)
        if isinstance(t, StackType):
            self.stack_type(t)
            return stack_name(t)
        if isinstance(t, TupleType):
            return self.tuple_type(t)
        return stype(t, where)

    def tuple_type(self, t: TupleType) -> str:
        """A tuple as a struct of members e0, e1, ..."""
        key = ("tuple", t)
        if key not in self.tuples:
            name = f"T_{len(self.tuples)}"
            members = [f"{self.ctype(x) if composite(x) else vtype(x, self.where)} e{i};" for i, x in enumerate(t.elems)]
            self.tuples[key] = name
            self.types.append(f"typedef struct {name} {{\n    " + "\n    ".join(members or ["uint8_t _unused;"])
                              + f"\n}} {name};")
        return self.tuples[key]

    def struct_type(self, t: StructType) -> None:
        name = struct_name(t)
        if name in self.made:
            return
        self.made.add(name)
        members = ["uint8_t _v;"] if t.kind == "header" else []
        decl = next((d for d in self.cp.program.declarations
                     if isinstance(d, ast.HeaderDecl) and d.name == t.name), None)
        fields = {f.name: f for f in decl.fields} if decl is not None else {}
        for f, ft in t.fields.items():
            if isinstance(ft, VarbitType):
                members += [f"uint8_t {cid(f)}[{(ft.max_width + 7) // 8}];", f"uint32_t {cid(f)}__n;"]
            else:
                members.append(f"{self.ctype(ft, fields.get(f, self.where))} {cid(f)};")
        if not members:
            members = ["uint8_t _unused;"]          # C has no empty structs
        self.types.append(f"typedef struct {name} {{\n    " + "\n    ".join(members) + f"\n}} {name};")

    def stack_type(self, t: StackType) -> None:
        name = stack_name(t)
        if name in self.made:
            return
        self.struct_type(t.elem)
        self.made.add(name)
        self.types.append(f"typedef struct {name} {{\n    {struct_name(t.elem)} e[{max(t.size, 1)}];\n"
                          f"    uint32_t nxt;\n}} {name};")

    # ---- helpers, written once each into the support section ------------------------
    def helper(self, name: str, lines: list[str]) -> str:
        if name not in self.made:
            self.made.add(name)
            self.support.append("\n".join(lines))
        return name

    def header_layout(self, t: StructType) -> tuple[list, str | None, int, list]:
        """(fields before the varbit with bit offsets, the varbit's name, bytes before it,
        fields after it with bit offsets from its end); no varbit: all fields in the first list."""
        before, after, vb, off = [], [], None, 0
        for f, ft in t.fields.items():
            if isinstance(ft, VarbitType):
                if off % 8:
                    raise unsupported(self.where, f"varbit field {t.name}.{f} not on a byte boundary")
                vb, off = f, 0
                continue
            (after if vb is not None else before).append((f, ft, off))
            off += field_width(ft)
        pre = sum(field_width(ft) for _, ft, _ in before) // 8
        return before, vb, pre, after

    def extract_fn(self, t: StructType) -> str:
        """X_<H>(P, pkt, h[, nbits]): PacketTooShort (1), a bad varbit size HeaderTooShort (4)."""
        name = f"X_{cid(t.name)}"
        if name in self.made:
            return name
        self.struct_type(t)
        before, vb, pre, after = self.header_layout(t)
        fixed = t.width // 8
        lines = []
        if vb is None:
            lines += [f"static inline void {name}(pl_t *P, p4s_pkt *pkt, {struct_name(t)} *h) {{",
                      f"    if (P4S_UNLIKELY(pkt->len - pkt->off < {fixed})) p4s_reject(&P->pipe, 1);",
                      "    const uint8_t *d = pkt->data + pkt->off;"]
            lines += [f"    h->{cid(f)} = {self.read_field(ft, off, 'd')};" for f, ft, off in before]
            lines += ["    h->_v = 1;", f"    pkt->off += {fixed};", "}"]
        else:
            vmax = t.fields[vb].max_width
            lines += [f"static inline void {name}(pl_t *P, p4s_pkt *pkt, {struct_name(t)} *h, uint64_t nbits) {{",
                      "    /* As BMv2's extract_VL: a size that is not whole bytes is ParserInvalidArgument,",
                      "     * then the packet's length (PacketTooShort), then the varbit's size (HeaderTooShort). */",
                      "    if (P4S_UNLIKELY(nbits & 7)) p4s_reject(&P->pipe, 6);",
                      f"    if (P4S_UNLIKELY((uint64_t)(pkt->len - pkt->off) < {fixed} + (nbits >> 3))) "
                      "p4s_reject(&P->pipe, 1);",
                      f"    if (P4S_UNLIKELY(nbits > {vmax})) p4s_reject(&P->pipe, 4);",
                      "    const uint8_t *d = pkt->data + pkt->off;"]
            lines += [f"    h->{cid(f)} = {self.read_field(ft, off, 'd')};" for f, ft, off in before]
            lines += [f"    h->{cid(vb)}__n = (uint32_t)nbits;",
                      f"    memcpy(h->{cid(vb)}, d + {pre}, nbits >> 3);",
                      f"    const uint8_t *d2 = d + {pre} + (nbits >> 3);"]
            lines += [f"    h->{cid(f)} = {self.read_field(ft, off, 'd2')};" for f, ft, off in after]
            lines += ["    h->_v = 1;", f"    pkt->off += {fixed} + (uint32_t)(nbits >> 3);", "}"]
        return self.helper(name, lines)

    def read_field(self, ft: Type, off: int, src: str) -> str:
        w = field_width(ft)
        v = byte_read(off, w, src)
        if isinstance(ft, BitType) and ft.signed:
            return f"p4s_sext128({v}, {w})" if w > 64 else f"p4s_sext64({v}, {w})"
        return v

    def emit_fn(self, t: StructType) -> str:
        """E_<H>(P, h): a valid header's bytes onto the deparser's output."""
        name = f"E_{cid(t.name)}"
        if name in self.made:
            return name
        self.struct_type(t)
        before, vb, pre, after = self.header_layout(t)
        fixed = t.width // 8
        lines = [f"static inline void {name}(pl_t *P, const {struct_name(t)} *h) {{",
                 "    if (!h->_v) return;"]
        if vb is None:
            lines.append(f"    uint8_t *d = p4s_emit_room(&P->pipe, {fixed});")
            lines += self.write_bytes(before, fixed, "d")
        else:
            n = f"(h->{cid(vb)}__n >> 3)"
            lines.append(f"    uint8_t *d = p4s_emit_room(&P->pipe, {fixed} + {n});")
            lines += self.write_bytes(before, pre, "d")
            lines.append(f"    memcpy(d + {pre}, h->{cid(vb)}, {n});")
            lines.append(f"    uint8_t *d2 = d + {pre} + {n};")
            lines += self.write_bytes(after, fixed - pre, "d2")
        lines.append("}")
        return self.helper(name, lines)

    @staticmethod
    def write_bytes(fields: list, nbytes: int, dst: str) -> list[str]:
        """Each byte as the OR of the fields' bits in it (field values are within their width);
        a field of 16, 32 or 64 bits that starts a byte is stored whole (p4s_put_be)."""
        lines = []
        whole = {off // 8: (f, ft, field_width(ft)) for f, ft, off in fields
                 if off % 8 == 0 and field_width(ft) in (16, 32, 64) and off // 8 + field_width(ft) // 8 <= nbytes}
        b = 0
        while b < nbytes:
            if b in whole:
                f, ft, w = whole[b]
                lines.append(f"    p4s_put_be{w}({dst} + {b}, {field_value('h', f, ft)[0]});")
                b += w // 8
                continue
            parts = []
            for f, ft, off in fields:
                w = field_width(ft)
                if off + w <= 8 * b or off >= 8 * b + 8:
                    continue
                v, _ = field_value("h", f, ft)
                s = (off + w) - (8 * b + 8)
                parts.append(f"(uint8_t)({v} >> {s})" if s > 0 else f"(uint8_t)({v} << {-s})" if s < 0
                             else f"(uint8_t)({v})")
            lines.append(f"    {dst}[{b}] = {' | '.join(parts) if parts else '0'};")
            b += 1
        return lines

    def pack_fn(self, t: StructType) -> str:
        """IV_<H>(bits, h): the header's fields onto a field list (the caller tests validity)."""
        name = f"IV_{cid(t.name)}"
        if name in self.made:
            return name
        self.struct_type(t)
        lines = [f"static inline void {name}(p4s_bits *b, const {struct_name(t)} *h) {{"]
        for f, ft in t.fields.items():
            if isinstance(ft, VarbitType):
                lines.append(f"    p4s_bits_bytes(b, h->{cid(f)}, h->{cid(f)}__n >> 3);")
                continue
            v, w = field_value("h", f, ft)
            lines.append(f"    p4s_bits_put128(b, {v}, {w});" if w > 64 else f"    p4s_bits_put(b, {v}, {w});")
        lines.append("}")
        return self.helper(name, lines)

    def setvalid_fn(self, t: StructType) -> str:
        """SV_<H>(h): setValid; an invalid header's fields become 0, as BMv2 does."""
        name = f"SV_{cid(t.name)}"
        self.struct_type(t)
        return self.helper(name, [f"static inline void {name}({struct_name(t)} *h) {{",
                                  "    if (h->_v) return;", "    memset(h, 0, sizeof *h);", "    h->_v = 1;", "}"])

    def eq_fn(self, t: Type) -> str:
        """EQ_<T>(a, b): P4's == on headers (validity, then fields), unions, structs and stacks."""
        if isinstance(t, StackType):
            name = f"EQ_{stack_name(t)}"
            if name in self.made:
                return name
            inner = self.eq_fn(t.elem)
            return self.helper(name, [
                f"static int {name}(const {self.ctype(t)} *a, const {self.ctype(t)} *b) {{",
                f"    for (int i = 0; i < {t.size}; i++)",
                f"        if (!{inner}(&a->e[i], &b->e[i])) return 0;",
                "    return 1;", "}"])
        name = f"EQ_{struct_name(t)}"
        if name in self.made:
            return name
        parts = []
        for f, ft in t.fields.items():
            if isinstance(ft, (StructType, StackType)):
                parts.append(f"{self.eq_fn(ft)}(&a->{cid(f)}, &b->{cid(f)})")
            elif isinstance(ft, VarbitType):
                parts.append(f"a->{cid(f)}__n == b->{cid(f)}__n && !memcmp(a->{cid(f)}, b->{cid(f)}, a->{cid(f)}__n >> 3)")
            else:
                parts.append(f"a->{cid(f)} == b->{cid(f)}")
        lines = [f"static int {name}(const {self.ctype(t)} *a, const {self.ctype(t)} *b) {{"]
        if t.kind == "header":
            lines += ["    if (a->_v != b->_v) return 0;", "    if (!a->_v) return 1;"]
        lines += [f"    return {' && '.join(parts) if parts else '1'};", "}"]
        return self.helper(name, lines)

    def invalidate_fn(self, t: Type) -> str | None:
        """INV_<T>(x): every header in x invalid (a new packet in BMv2's reused PHV), stacks
        emptied; field values stay. None when t holds no header."""
        if isinstance(t, StackType):
            name = f"INV_{stack_name(t)}"
            if name not in self.made:
                inner = self.invalidate_fn(t.elem)
                self.helper(name, [f"static void {name}({self.ctype(t)} *s) {{",
                                   f"    for (int i = 0; i < {t.size}; i++) {inner}(&s->e[i]);",
                                   "    s->nxt = 0;", "}"])
            return name
        if not isinstance(t, StructType):
            return None
        name = f"INV_{struct_name(t)}"
        if name in self.made:
            return name
        lines = [f"static void {name}({self.ctype(t)} *x) {{"]
        if t.kind == "header":
            lines.append("    x->_v = 0;")
        else:
            for f, ft in t.fields.items():
                inner = self.invalidate_fn(ft)
                if inner is not None:
                    lines.append(f"    {inner}(&x->{cid(f)});")
        lines.append("}")
        return self.helper(name, lines)

    # ---- stacks ------------------------------------------------------------------------
    def scratch_of(self, elem: StructType) -> str:
        """pl_t's throwaway element: an index out of bounds reads a fresh invalid element and
        writes go nowhere (the P4_16 spec; BMv2 1.15.0 crashes)."""
        key = struct_name(elem)
        self.struct_type(elem)
        self.scratch.setdefault(key, f"scr_{key}")
        return self.scratch[key]

    def at_fn(self, t: StackType) -> str:
        name = f"AT_{stack_name(t)}"
        if name not in self.made:
            e = struct_name(t.elem)
            scr = self.scratch_of(t.elem)
            self.helper(name, [
                f"static inline {e} *{name}(pl_t *P, {self.ctype(t)} *s, uint64_t i) {{",
                f"    if (P4S_LIKELY(i < {t.size})) return &s->e[i];",
                f"    memset(&P->{scr}, 0, sizeof P->{scr});",
                f"    return &P->{scr};", "}"])
        return name

    def next_fn(self, t: StackType, last: bool) -> str:
        """`.next` / `.last` in a parser: StackOutOfBounds (3) past the end / on an empty stack."""
        name = f"{'LAST' if last else 'NEXT'}_{stack_name(t)}"
        if name not in self.made:
            e = struct_name(t.elem)
            test, at = ("s->nxt == 0", "s->nxt - 1") if last else (f"s->nxt >= {t.size}", "s->nxt")
            self.helper(name, [
                f"static inline {e} *{name}(pl_t *P, {self.ctype(t)} *s) {{",
                f"    if (P4S_UNLIKELY({test})) p4s_reject(&P->pipe, 3);",
                f"    return &s->e[{at}];", "}"])
        return name

    def shift_fn(self, t: StackType, front: bool) -> str:
        """push_front(n) / pop_front(n): elements move, fresh (invalid, zero) ones fill in."""
        name = f"{'PUSH' if front else 'POP'}_{stack_name(t)}"
        if name not in self.made:
            n = t.size
            if front:
                body = [f"    memmove(&s->e[k], &s->e[0], ({n} - k) * sizeof s->e[0]);",
                        "    memset(&s->e[0], 0, k * sizeof s->e[0]);",
                        f"    s->nxt = s->nxt + count > {n} ? {n} : (uint32_t)(s->nxt + count);"]
            else:
                body = [f"    memmove(&s->e[0], &s->e[k], ({n} - k) * sizeof s->e[0]);",
                        f"    memset(&s->e[{n} - k], 0, k * sizeof s->e[0]);",
                        "    s->nxt = s->nxt > count ? (uint32_t)(s->nxt - count) : 0;"]
            self.helper(name, [f"static inline void {name}({self.ctype(t)} *s, uint64_t count) {{",
                               f"    uint64_t k = count < {n} ? count : {n};"] + body + ["}"])
        return name

