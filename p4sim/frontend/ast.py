"""The AST of a P4_16 program: dataclasses built by frontend.parser from lark's tree.

The checker annotates expressions in place (``type``, ``decl``); the compiler reads
those annotations and never re-resolves names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pos:
    """A place in the original source (after mapping back through cpp's # line markers)."""
    file: str
    line: int
    column: int


NOWHERE = Pos("<builtin>", 0, 0)


@dataclass(eq=False)
class Node:
    pos: Pos = field(default=NOWHERE, kw_only=True)


@dataclass(eq=False)
class Annotation(Node):
    name: str
    args: list[Any] = field(default_factory=list)   # Exprs


# ---- type references ------------------------------------------------------
@dataclass(eq=False)
class TypeRef(Node):
    pass


@dataclass(eq=False)
class BitTypeRef(TypeRef):
    width: Any            # Expr, or None for plain `bit` (bit<1>)
    signed: bool = False


@dataclass(eq=False)
class VarbitTypeRef(TypeRef):
    width: Any


@dataclass(eq=False)
class SimpleTypeRef(TypeRef):
    """bool, error, string, int (infinite precision), void, or `_`."""
    kind: str


@dataclass(eq=False)
class NamedTypeRef(TypeRef):
    name: str
    args: list[TypeRef] = field(default_factory=list)


@dataclass(eq=False)
class StackTypeRef(TypeRef):
    elem: TypeRef
    size: Any             # Expr


@dataclass(eq=False)
class TupleTypeRef(TypeRef):
    args: list[TypeRef]


# ---- expressions ----------------------------------------------------------
@dataclass(eq=False)
class Expr(Node):
    type: Any = field(default=None, kw_only=True, repr=False)   # set by the checker


@dataclass(eq=False)
class IntLit(Expr):
    value: int
    width: int | None = None
    signed: bool = False


@dataclass(eq=False)
class BoolLit(Expr):
    value: bool


@dataclass(eq=False)
class StrLit(Expr):
    value: str


@dataclass(eq=False)
class NameRef(Expr):
    name: str
    decl: Any = field(default=None, kw_only=True, repr=False)   # set by the checker


@dataclass(eq=False)
class Member(Expr):
    expr: Expr
    name: str


@dataclass(eq=False)
class TypeMember(Expr):
    """`Enum.member`, `error.Name`, or a member of a type name."""
    type_name: str
    name: str


@dataclass(eq=False)
class Index(Expr):
    expr: Expr
    index: Expr


@dataclass(eq=False)
class Slice(Expr):
    expr: Expr
    hi: Expr
    lo: Expr


@dataclass(eq=False)
class Call(Expr):
    func: Expr
    args: list[Any]                 # Expr, or DontCare
    type_args: list[TypeRef] = field(default_factory=list)
    target: Any = field(default=None, kw_only=True, repr=False)   # set by the checker


@dataclass(eq=False)
class Constructor(Expr):
    type_ref: NamedTypeRef
    args: list[Any]


@dataclass(eq=False)
class Unary(Expr):
    op: str
    expr: Expr


@dataclass(eq=False)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(eq=False)
class Cond(Expr):
    cond: Expr
    then: Expr
    else_: Expr


@dataclass(eq=False)
class Cast(Expr):
    type_ref: TypeRef
    expr: Expr


@dataclass(eq=False)
class ListExpr(Expr):
    items: list[Expr]


@dataclass(eq=False)
class StructExpr(Expr):
    """A structure-valued expression `{x = 1, y = 2}`."""
    names: list[str]
    items: list[Expr]


@dataclass(eq=False)
class Mask(Expr):
    value: Expr
    mask: Expr


@dataclass(eq=False)
class Range(Expr):
    lo: Expr
    hi: Expr


@dataclass(eq=False)
class DefaultKey(Expr):
    """`default` in a select case or a table entry."""


@dataclass(eq=False)
class DontCare(Expr):
    """`_` as an argument or a keyset."""


@dataclass(eq=False)
class TupleKey(Expr):
    items: list[Expr]


# ---- statements -----------------------------------------------------------
@dataclass(eq=False)
class Stmt(Node):
    pass


@dataclass(eq=False)
class Assign(Stmt):
    lhs: Expr
    rhs: Expr


@dataclass(eq=False)
class CallStmt(Stmt):
    call: Call


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@dataclass(eq=False)
class Block(Stmt):
    stmts: list[Stmt]


@dataclass(eq=False)
class Return(Stmt):
    expr: Expr | None = None


@dataclass(eq=False)
class Exit(Stmt):
    pass


@dataclass(eq=False)
class SwitchCase(Node):
    label: Expr | None          # None for `default`
    body: Block | None          # None: falls through to the next case


@dataclass(eq=False)
class Switch(Stmt):
    expr: Expr
    cases: list[SwitchCase]


@dataclass(eq=False)
class VarDecl(Stmt):
    type_ref: TypeRef
    name: str
    init: Expr | None = None
    annotations: list[Annotation] = field(default_factory=list)
    type: Any = field(default=None, kw_only=True, repr=False)


@dataclass(eq=False)
class ConstDecl(Stmt):
    type_ref: TypeRef
    name: str
    value: Expr
    annotations: list[Annotation] = field(default_factory=list)
    type: Any = field(default=None, kw_only=True, repr=False)


@dataclass(eq=False)
class Empty(Stmt):
    pass


# P4_16 1.2.5's loops: new statement kinds a backend must run or refuse (p4sim/README.md).
@dataclass(eq=False)
class For(Stmt):
    """`for (init; cond; update) body`: init once; then while cond (None: true) holds,
    body, then update. `continue` goes on to update, `break` leaves the loop."""
    init: list[Stmt]
    cond: Expr | None
    update: list[Stmt]
    body: Stmt


@dataclass(eq=False)
class ForIn(Stmt):
    """`for (T x in collection) body`: x takes each value in turn: the elements of a header
    stack (all of them, index 0 up, valid or not), or lo, lo+1, ..., hi of `lo .. hi`
    (bounds evaluated once; none when lo > hi). `var` is the loop variable's declaration."""
    var: VarDecl
    collection: Expr                    # a stack, or a Range (lo .. hi)
    body: Stmt


@dataclass(eq=False)
class Break(Stmt):
    pass


@dataclass(eq=False)
class Continue(Stmt):
    pass


# ---- declarations ---------------------------------------------------------
@dataclass(eq=False)
class Field(Node):
    name: str
    type_ref: TypeRef
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class HeaderDecl(Node):
    kind: str                   # "header", "struct" or "header_union"
    name: str
    fields: list[Field]
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class TypedefDecl(Node):
    type_ref: TypeRef
    name: str
    new_type: bool = False      # `type T U;`: the same values and operations as T here


@dataclass(eq=False)
class EnumDecl(Node):
    name: str
    width: Expr | None          # serializable enum: enum bit<W> E
    members: list[tuple[str, Expr | None]]


@dataclass(eq=False)
class ErrorDecl(Node):
    members: list[str]


@dataclass(eq=False)
class MatchKindDecl(Node):
    members: list[str]


@dataclass(eq=False)
class Param(Node):
    direction: str              # "in", "out", "inout" or "" (none)
    type_ref: TypeRef
    name: str
    default: Expr | None = None
    annotations: list[Annotation] = field(default_factory=list)
    type: Any = field(default=None, kw_only=True, repr=False)


@dataclass(eq=False)
class MethodDecl(Node):
    """A method or constructor of an extern, or an extern function."""
    name: str
    ret: TypeRef | None         # None for a constructor
    type_params: list[str]
    params: list[Param]
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class ExternDecl(Node):
    name: str
    type_params: list[str]
    methods: list[MethodDecl]
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class BlockTypeDecl(Node):
    """A parser, control or package type without a body (v1model's Parser, V1Switch ...)."""
    kind: str
    name: str
    type_params: list[str]
    params: list[Param]
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class Instantiation(Node):
    type_ref: TypeRef
    args: list[Any]
    name: str
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class FunctionDecl(Node):
    ret: TypeRef
    name: str
    params: list[Param]
    body: Block
    annotations: list[Annotation] = field(default_factory=list)
    type_params: list[str] = field(default_factory=list)       # a generic function: `T f<T>(...)`


@dataclass(eq=False)
class SelectCase(Node):
    keyset: Expr
    next_state: str


@dataclass(eq=False)
class Transition(Node):
    next_state: str | None      # direct transition
    select: list[Expr] | None = None
    cases: list[SelectCase] = field(default_factory=list)


@dataclass(eq=False)
class ParserState(Node):
    name: str
    stmts: list[Stmt]
    transition: Transition
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class ParserDecl(Node):
    name: str
    params: list[Param]
    locals: list[Node]
    states: list[ParserState]
    annotations: list[Annotation] = field(default_factory=list)
    ctor_params: list[Param] = field(default_factory=list)     # `parser P(...)(bit<8> n)`
    ctor_values: list[Any] | None = None                        # bound by the instantiation
    type_params: list[str] = field(default_factory=list)       # `parser P<T>(...)`
    type_values: list[Any] | None = None                        # bound by the instantiation


@dataclass(eq=False)
class ValueSetDecl(Node):
    """`value_set<T>(size) name;` in a parser: select cases the control plane fills."""
    type_ref: TypeRef
    size: Expr
    name: str
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class ActionDecl(Node):
    name: str
    params: list[Param]
    body: Block
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class KeyElement(Node):
    expr: Expr
    match_kind: str
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class ActionRefNode(Node):
    name: str
    args: list[Any] | None = None
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class EntryNode(Node):
    keyset: Expr
    action: str
    args: list[Any]
    priority: Expr | None = None
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class TableProperty(Node):
    name: str
    value: Expr
    const: bool = False
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class TableDecl(Node):
    name: str
    keys: list[KeyElement] = field(default_factory=list)
    actions: list[ActionRefNode] = field(default_factory=list)
    entries: list[EntryNode] | None = None
    entries_const: bool = False
    properties: dict[str, TableProperty] = field(default_factory=dict)
    annotations: list[Annotation] = field(default_factory=list)


@dataclass(eq=False)
class ControlDecl(Node):
    name: str
    params: list[Param]
    locals: list[Node]
    body: Block
    annotations: list[Annotation] = field(default_factory=list)
    ctor_params: list[Param] = field(default_factory=list)     # `control C(...)(bit<8> n)`
    ctor_values: list[Any] | None = None                        # bound by the instantiation
    type_params: list[str] = field(default_factory=list)       # `control C<T>(...)`
    type_values: list[Any] | None = None                        # bound by the instantiation


@dataclass(eq=False)
class Program(Node):
    declarations: list[Node]
    source_file: str = ""
