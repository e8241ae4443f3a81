"""P4 types as the checker resolves them and the compiler lays them out.

Scalar types are frozen values; headers, structs and unions are identified by
their declaration (one object per declared type).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class Type:
    def __str__(self) -> str:
        return self.__class__.__name__


@dataclass(frozen=True)
class BitType(Type):
    width: int
    signed: bool = False

    def __str__(self) -> str:
        return f"{'int' if self.signed else 'bit'}<{self.width}>"


@dataclass(frozen=True)
class IntType(Type):
    """An infinite-precision integer: an unsized literal or constant."""

    def __str__(self) -> str:
        return "int"


@dataclass(frozen=True)
class BoolType(Type):
    def __str__(self) -> str:
        return "bool"


@dataclass(frozen=True)
class StringType(Type):
    def __str__(self) -> str:
        return "string"


@dataclass(frozen=True)
class VoidType(Type):
    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True)
class ErrorType(Type):
    def __str__(self) -> str:
        return "error"


@dataclass(frozen=True)
class MatchKindType(Type):
    def __str__(self) -> str:
        return "match_kind"


@dataclass(frozen=True)
class AnyType(Type):
    """A type parameter of an extern or package: anything fits."""
    name: str = "T"

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class StructType(Type):
    kind: str                                  # "header", "struct", "header_union"
    name: str
    fields: dict[str, Type] = field(default_factory=dict)
    field_annotations: dict[str, tuple[str, ...]] = field(default_factory=dict)
    annotations: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name

    @property
    def width(self) -> int:
        """Bits of a header's fixed part (a varbit field counts 0)."""
        return sum(field_width(f) for f in self.fields.values())

    @property
    def varbit(self) -> str | None:
        """The name of a header's varbit field, if it has one."""
        return next((n for n, f in self.fields.items() if isinstance(f, VarbitType)), None)


@dataclass(frozen=True)
class VarbitType(Type):
    """varbit<W>: up to W bits, its length known at run time."""
    max_width: int

    def __str__(self) -> str:
        return f"varbit<{self.max_width}>"


@dataclass(frozen=True)
class StackType(Type):
    elem: StructType            # a header or a header_union
    size: int

    def __str__(self) -> str:
        return f"{self.elem.name}[{self.size}]"


@dataclass(eq=False)
class EnumType(Type):
    name: str
    members: dict[str, int]
    underlying: BitType | None = None          # serializable enums have one

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TupleType(Type):
    elems: tuple[Type, ...]

    def __str__(self) -> str:
        return "tuple<" + ", ".join(map(str, self.elems)) + ">"


@dataclass(eq=False)
class ExternType(Type):
    decl: Any                                  # ast.ExternDecl
    args: tuple[Type, ...] = ()

    def __str__(self) -> str:
        return self.decl.name


@dataclass(eq=False)
class BlockType(Type):
    """A parser or control declaration used as a type (sub-parser/sub-control)."""
    decl: Any

    def __str__(self) -> str:
        return self.decl.name


@dataclass(frozen=True)
class TableType(Type):
    name: str

    def __str__(self) -> str:
        return "table"


@dataclass(frozen=True)
class ApplyResultType(Type):
    """What `t.apply()` returns: .hit, .miss and .action_run."""
    table: str

    def __str__(self) -> str:
        return "apply_result"


@dataclass(frozen=True)
class ActionRunType(Type):
    table: str


def is_header(t: Type) -> bool:
    return isinstance(t, StructType) and t.kind == "header"


def field_width(t: Type) -> int:
    """Bits a header field of type t takes on the wire (0 for varbit, counted apart)."""
    if isinstance(t, BitType):
        return t.width
    if isinstance(t, BoolType):
        return 1
    if isinstance(t, EnumType) and t.underlying is not None:
        return t.underlying.width
    return 0


def is_bits(t: Type) -> bool:
    return isinstance(t, BitType)
