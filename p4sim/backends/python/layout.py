"""Headers, structs and unions as Python classes; per-header extract, emit and packing code.

A header field holds an int (a bool for `bool` fields; int<W> fields hold the signed
value). A varbit field holds its value, and its length in bits in the slot `_n_<name>`.
"""
from __future__ import annotations

from ...frontend.types import (BitType, BoolType, StackType, StructType, TupleType, Type, VarbitType,
                              field_width)
from .common import CodeGen, attr, cls_name, mask


def varbit_len(f: str) -> str:
    """The slot that holds the run-time length (bits) of varbit field f."""
    return f"_n_{f}"


def invalidate(t: StructType, obj: str) -> list[str]:
    """Statements that make every header in obj (of type t) invalid, nested ones inlined."""
    if t.kind == "header":
        return [f"{obj}._v = False"]
    lines = []
    for f, ft in t.fields.items():
        if isinstance(ft, StructType):
            lines += invalidate(ft, f"{obj}.{attr(f)}")
        elif isinstance(ft, StackType):
            lines.append(f"{obj}.{attr(f)}._inv()")
    return lines


class LayoutGen(CodeGen):
    def init_value(self, t: Type) -> str:
        if isinstance(t, StructType):
            return f"{cls_name(t)}()"
        if isinstance(t, StackType):
            return f"Stack([{cls_name(t.elem)}() for _ in range({t.size})], {cls_name(t.elem)})"
        if isinstance(t, BoolType):
            return "False"
        if isinstance(t, TupleType):
            return "(" + "".join(self.init_value(x) + ", " for x in t.elems) + ")"
        return "0"

    def struct_class(self, t: StructType) -> None:
        """The class of a header, struct or union: __init__, _copy, _set (assignment), _eq,
        _inv (every header in it invalid: a new packet in BMv2's reused PHV), and for
        headers _setv (setValid: an invalid header's fields become 0, as BMv2 does)."""
        name = cls_name(t)
        header = t.kind == "header"
        # (slot, deep) for every slot: nested structs, unions and stacks copy deeply.
        slots = [("_v", False)] if header else []
        for f, ft in t.fields.items():
            slots.append((attr(f), isinstance(ft, (StructType, StackType))))
            if isinstance(ft, VarbitType):
                slots.append((varbit_len(attr(f)), False))
        self.emit(f"class {name}:")
        self.ind += 1
        self.emit(f"__slots__ = {tuple(s for s, _ in slots)!r}")
        self.emit("def __init__(self):")
        self.ind += 1
        if header:
            self.emit("self._v = False")
        self.zero_fields(t, "self")
        self.emit("pass")
        self.ind -= 1
        self.emit("def _copy(self):")
        self.ind += 1
        self.emit(f"n = {name}.__new__({name})")
        for s, deep in slots:
            self.emit(f"n.{s} = self.{s}._copy()" if deep else f"n.{s} = self.{s}")
        self.emit("return n")
        self.ind -= 1
        self.emit("def _set(self, o):")
        self.ind += 1
        for s, deep in slots:
            self.emit(f"self.{s}._set(o.{s})" if deep else f"self.{s} = o.{s}")
        self.emit("pass")
        self.ind -= 1
        self.emit("def _inv(self):")
        self.ind += 1
        for line in invalidate(t, "self"):           # flat: it runs for every packet
            self.emit(line)
        self.emit("pass")
        self.ind -= 1
        if header:
            self.emit("def _setv(self):")
            self.ind += 1
            self.emit("if self._v: return")
            self.emit("self._v = True")
            self.zero_fields(t, "self")
            self.ind -= 1
        self.emit("def _eq(self, o):")
        self.ind += 1
        if header:
            self.emit("if self._v != o._v: return False")
            self.emit("if not self._v: return True")
        if t.kind == "header_union":    # equal when the same member is valid, with equal values
            self.emit("return " + (" and ".join(f"self.{attr(f)}._eq(o.{attr(f)})" for f in t.fields) or "True"))
        else:
            parts = []
            for f, ft in t.fields.items():
                a = attr(f)
                parts.append(f"self.{a}._eq(o.{a})" if isinstance(ft, (StructType, StackType)) else f"self.{a} == o.{a}")
                if isinstance(ft, VarbitType):
                    parts.append(f"self.{varbit_len(a)} == o.{varbit_len(a)}")
            self.emit("return " + (" and ".join(parts) if parts else "True"))
        self.ind -= 2
        # N_: the value of a list or structure-valued expression (a header one is valid).
        args = [attr(f) for f in t.fields]
        self.emit(f"def N_{name}({', '.join(args)}):")
        self.ind += 1
        self.emit(f"n = {name}()")
        for a in args:
            self.emit(f"n.{a} = {a}")
        if header:
            self.emit("n._v = True")
        self.emit("return n")
        self.ind -= 1

    def zero_fields(self, t: StructType, obj: str) -> None:
        for f, ft in t.fields.items():
            self.emit(f"{obj}.{attr(f)} = {self.init_value(ft)}")
            if isinstance(ft, VarbitType):
                self.emit(f"{obj}.{varbit_len(attr(f))} = 0")

    def header_io(self, t: StructType) -> None:
        """Extract (X_), lookahead (LK_), to-int (IV_) and emit (E_) of one header type.

        A varbit header's X_ takes the varbit's length in bits; its layout shifts by it."""
        name, fixed = t.name, t.width
        vb = t.varbit
        # (attribute, constant shift, shifted also by the varbit length?, type)
        layout = []
        off = fixed
        seen_vb = False
        for f, ft in t.fields.items():
            if isinstance(ft, VarbitType):
                seen_vb = True
                layout.append((attr(f), off, False, ft))
                continue
            off -= field_width(ft)
            layout.append((attr(f), off, vb is not None and not seen_vb, ft))
        layout = [(a, s if not isinstance(ft, VarbitType) else off_after(layout, i), dyn, ft)
                  for i, (a, s, dyn, ft) in enumerate(layout)]
        nbytes = fixed // 8
        fmt = struct_format(t) if self.optimize else None
        if fmt is not None:
            self.emit(f"ST_{name} = Struct({fmt!r})")
        if vb is None:
            self.emit(f"def X_{name}(pkt, h):")
            self.ind += 1
            self.emit(f"d = pkt.data; o = pkt.off; e = o + {nbytes}")
            self.emit("if e > len(d): raise Reject(1)")
        else:
            vmax = t.fields[vb].max_width
            self.emit(f"def X_{name}(pkt, h, nbits):")
            self.ind += 1
            # As BMv2's extract_VL: a size that is not whole bytes is ParserInvalidArgument,
            # then the packet's length (PacketTooShort), then the varbit's size (HeaderTooShort).
            self.emit("if nbits & 7: raise Reject(6)")
            self.emit(f"d = pkt.data; o = pkt.off; e = o + {nbytes} + (nbits >> 3)")
            self.emit("if e > len(d): raise Reject(1)")
            self.emit(f"if nbits > {vmax}: raise Reject(4)")
            self.emit(f"h.{varbit_len(attr(vb))} = nbits")
        if fmt is not None:
            fields = ", ".join(f"h.{attr(f)}" for f in t.fields) + ("," if len(t.fields) == 1 else "")
            self.emit(f"{fields} = ST_{name}.unpack_from(d, o)")
        else:
            self.emit("v = int.from_bytes(d[o:e], 'big')")
            self.fill_fields(layout)
        self.emit("h._v = True; pkt.off = e")
        if self.trace:
            self.emit(f"LOG('extracted {name} (%d bytes at %d)', e - o, o)")
        self.ind -= 1
        self.emit(f"def LK_{name}(pkt):")          # lookahead: extract, then step back
        self.ind += 1
        self.emit(f"h = H_{name}(); o = pkt.off")
        self.emit(f"X_{name}(pkt, h); pkt.off = o")
        self.emit("return h")
        self.ind -= 1
        parts = []
        for a, shift, dyn, ft in layout:
            if isinstance(ft, VarbitType):
                val = f"h.{a}"
            elif isinstance(ft, BoolType):
                val = f"(1 if h.{a} else 0)"
            elif isinstance(ft, BitType) and ft.signed:
                val = f"(h.{a} & {mask(ft.width)})"
            else:
                val = f"h.{a}"
            amount = f"({shift} + h.{varbit_len(attr(vb))})" if dyn else str(shift)
            parts.append(val if amount == "0" else f"({val} << {amount})")
        value = " | ".join(parts) or "0"
        self.emit(f"def IV_{name}(h):")
        self.ind += 1
        self.emit(f"return {value}")
        self.ind -= 1
        nb = str(nbytes) if vb is None else f"{nbytes} + (h.{varbit_len(attr(vb))} >> 3)"
        self.emit(f"def E_{name}(out, h):")
        self.ind += 1
        if fmt is not None:
            self.emit(f"if h._v: out.append(ST_{name}.pack({', '.join(f'h.{attr(f)}' for f in t.fields)}))")
        else:
            self.emit(f"if h._v: out.append(({value}).to_bytes({nb}, 'big'))")
        self.ind -= 1

    def fill_fields(self, layout: list) -> None:
        for i, (a, shift, dyn, ft) in enumerate(layout):
            if isinstance(ft, VarbitType):
                n = f"h.{varbit_len(a)}"
                self.emit(f"h.{a} = ((v >> {shift}) & ((1 << {n}) - 1))" if shift else f"h.{a} = v & ((1 << {n}) - 1)")
                continue
            amount = f"({shift} + nbits)" if dyn else str(shift)
            v = "v" if amount == "0" else f"(v >> {amount})"
            width = field_width(ft)
            if i:                                    # the top field needs no mask
                v = f"({v} & {mask(width)})"
            if isinstance(ft, BoolType):
                v = f"({v} & 1 == 1)"
            elif isinstance(ft, BitType) and ft.signed:
                h = 1 << (width - 1)
                v = f"(({v} ^ {h}) - {h})"
            self.emit(f"h.{a} = {v}")


def struct_format(t: StructType) -> str | None:
    """A struct module format for a header of whole 8-, 16-, 32- and 64-bit fields, else None.

    Such a header (allreduce.p4's 32 elements, a UDP header) unpacks and packs in C; the
    general path builds one int of the whole header and shifts and masks it per field,
    slow for a wide header (allreduce.p4's 1024-bit inc_data: 1.16x packets/s with struct)."""
    if t.varbit is not None or not t.fields:
        return None
    codes = []
    for ft in t.fields.values():
        if not isinstance(ft, BitType) or ft.width not in (8, 16, 32, 64):
            return None
        code = {8: "B", 16: "H", 32: "I", 64: "Q"}[ft.width]
        codes.append(code.lower() if ft.signed else code)    # int<W> fields hold signed values
    return ">" + "".join(codes)


def off_after(layout: list, i: int) -> int:
    """The constant shift of a varbit field: the fixed bits that follow it."""
    return sum(field_width(ft) for _, _, _, ft in layout[i + 1:])
