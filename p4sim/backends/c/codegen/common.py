"""What every part of the C code generator shares: C names and types of P4 values, the output
buffers, where the statement being compiled lives (Ctx), and the error for what this backend
does not support yet."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

from ....errors import P4Error
from ....frontend import ast
from ....frontend.checker import CheckedProgram, Sym, const_value, error_at
from ....frontend.types import (BitType, BoolType, EnumType, ErrorType, ExternType, IntType, StackType,
                                StructType, TupleType, Type)

MAX_WIDTH = 128          # bit<W> and int<W> wider than this are not supported yet

C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto
if inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert
_Thread_local asm typeof P L""".split())


class CUnsupported(P4Error):
    """A construct the C backend cannot compile yet (the program runs on the Python backend)."""


def unsupported(node: ast.Node | None, what: str) -> CUnsupported:
    pos = node.pos if node is not None else ast.NOWHERE
    return CUnsupported(f"{what}: the C backend does not support this yet", pos.file, pos.line, pos.column)


def cid(name: str) -> str:
    """A P4 name as a C identifier: a C keyword, or a name starting with `_` like the
    generator's own (`_v`), gets a trailing underscore."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out + "_" if out in C_KEYWORDS or out.startswith("_") else out


def struct_name(t: StructType) -> str:
    return {"header": "H_", "struct": "S_", "header_union": "U_"}[t.kind] + cid(t.name)


def stack_name(t: StackType) -> str:
    return f"K_{cid(t.elem.name)}_{t.size}"


def composite(t: Type) -> bool:
    return isinstance(t, (StructType, StackType, TupleType))


def is_packet_out(t: Type) -> bool:
    return isinstance(t, ExternType) and t.decl.name == "packet_out"


def is_packet_in(t: Type) -> bool:
    return isinstance(t, ExternType) and t.decl.name == "packet_in"


def width_of(t: Type, where: ast.Node | None = None) -> int:
    """The bits a scalar value of type t takes (bool 1, error 32, an enum its underlying)."""
    if isinstance(t, BitType):
        if t.width > MAX_WIDTH:
            raise unsupported(where, f"{t} (wider than {MAX_WIDTH} bits)")
        return t.width
    if isinstance(t, BoolType):
        return 1
    if isinstance(t, EnumType):
        return t.underlying.width if t.underlying is not None else 32
    if isinstance(t, ErrorType):
        return 32
    raise unsupported(where, f"a value of type {t}")


def wide(t: Type) -> bool:
    return isinstance(t, BitType) and t.width > 64


def signed(t: Type) -> bool:
    return isinstance(t, BitType) and t.signed


def vtype(t: Type, where: ast.Node | None = None) -> str:
    """The C type an expression of type t is computed in."""
    if isinstance(t, BoolType):
        return "int"
    if isinstance(t, IntType):
        return "int64_t"
    w = width_of(t, where)
    if isinstance(t, BitType) and t.signed:
        return "i128" if w > 64 else "int64_t"
    return "u128" if w > 64 else "uint64_t"


def utype(t: Type, where: ast.Node | None = None) -> str:
    """The unsigned C type of t's bits."""
    return "u128" if width_of(t, where) > 64 else "uint64_t"


def stype(t: Type, where: ast.Node | None = None) -> str:
    """The C type a value of scalar type t is stored in (header and struct fields, registers)."""
    if isinstance(t, BoolType):
        return "uint8_t"
    w = width_of(t, where)
    bits = 8 if w <= 8 else 16 if w <= 16 else 32 if w <= 32 else 64 if w <= 64 else 128
    if bits == 128:
        return "i128" if signed(t) else "u128"
    return f"{'int' if signed(t) else 'uint'}{bits}_t"


def mask(w: int) -> int:
    return (1 << w) - 1


def literal(v: Any, t: Type) -> str:
    """A compile-time value as a C expression of vtype(t)."""
    if isinstance(v, bool) or isinstance(t, BoolType):
        return "1" if v else "0"
    v = int(v)
    if isinstance(t, IntType):
        if -(1 << 63) <= v < (1 << 63):
            return int_lit(v, True)
        if 0 <= v < (1 << 64):
            return int_lit(v, False)
        return u128_lit(v & mask(128))
    if wide(t):
        lit = u128_lit(v & mask(128))
        return f"((i128){lit})" if signed(t) else lit
    return int_lit(v, signed(t))


def int_lit(v: int, is_signed: bool) -> str:
    if is_signed:
        if v == -(1 << 63):
            return "(-INT64_C(9223372036854775807) - 1)"
        return f"INT64_C({v})"
    return f"UINT64_C({v & mask(64)})"


def u128_lit(v: int) -> str:
    hi, lo = v >> 64, v & mask(64)
    return f"P4S_U128(UINT64_C({hi}), UINT64_C({lo}))" if hi else f"((u128)UINT64_C({lo}))"


@dataclass
class Ctx:
    """Where the statement being compiled lives."""
    kind: str                                       # "parser", "control", "action", "function"
    block: Any = None                               # BlockInfo
    ctl_args: list[str] = field(default_factory=list)   # what local actions and tables get
    pkt: str = ""                                   # the packet_in parameter's C name
    outs: list[Sym] = field(default_factory=list)   # scalar out/inout params written back on return
    ret: Type | None = None                         # a function's return type
    top: bool = False                               # a V1Switch block (the pipeline catches its exit)
    exit_used: bool = False                         # the function's L_exit label is jumped to


class CodeGen:
    """The output buffers and helpers every generator part uses."""

    def __init__(self, cp: CheckedProgram) -> None:
        self.cp = cp
        self.lines: list[str] = []                  # the function being generated
        self.ind = 0
        self.uid = 0
        self.where: ast.Node | None = None          # what is being compiled, for internal errors

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    @contextlib.contextmanager
    def indented(self) -> Iterator[None]:
        self.ind += 1
        try:
            yield
        finally:
            self.ind -= 1

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[str]]:
        """Generate into a separate list (a condition's statements, a function body)."""
        saved, self.lines = self.lines, []
        out = self.lines
        try:
            yield out
        finally:
            self.lines = saved

    def tmp(self, base: str = "t") -> str:
        self.uid += 1
        return f"_{base}{self.uid}"

    def const(self, e: ast.Expr) -> Any:
        v = const_value(e, self.cp.errors)
        if v is None:
            raise error_at(e, "expected a compile-time constant")
        return v
