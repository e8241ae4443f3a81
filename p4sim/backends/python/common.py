"""What every part of the code generator shares: naming of generated Python, the
output buffer, and where the statement being compiled lives (Ctx)."""
from __future__ import annotations

import contextlib
import keyword
from dataclasses import dataclass, field
from typing import Any, Iterator

from ...frontend import ast
from ...frontend.checker import CheckedProgram, Sym, const_value, error_at
from ...frontend.types import BitType, BoolType, EnumType, ErrorType, IntType, StackType, StructType, Type


def attr(name: str) -> str:
    """A P4 field name as a Python attribute (keywords get a trailing underscore)."""
    return name + "_" if keyword.iskeyword(name) or name.startswith("_") else name


def cls_name(t: StructType) -> str:
    return {"header": "H_", "struct": "S_", "header_union": "U_"}[t.kind] + t.name


def mask(w: int) -> int:
    return (1 << w) - 1


def py_ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def path_of(e: ast.Expr) -> str | None:
    """`hdr.ipv4.ttl` for a variable or a (nested) member of one; None for anything else."""
    if isinstance(e, ast.NameRef):
        return e.name
    if isinstance(e, ast.Member) and not isinstance(e.expr.type, StackType):
        base = path_of(e.expr)
        return None if base is None else f"{base}.{e.name}"
    return None


def mentions(node: object, path: str) -> bool:
    """Does anything in node read or write path, a prefix of it or a part of it?"""
    p = path_of(node) if isinstance(node, ast.Expr) else None
    if p is not None and (p == path or path.startswith(p + ".") or p.startswith(path + ".")):
        return True
    children = vars(node).values() if hasattr(node, "__dict__") else ()
    for c in children:
        for item in (c if isinstance(c, list) else [c]):
            if isinstance(item, ast.Node) and mentions(item, path):
                return True
    return False


def pure(e: ast.Expr) -> bool:
    """A scalar expression that only reads variables and fields: no call, no exception."""
    if isinstance(e, (ast.IntLit, ast.BoolLit, ast.TypeMember)):
        return True
    if isinstance(e, ast.NameRef):
        return e.decl is not None and e.decl.kind in ("var", "param", "const")
    if isinstance(e, ast.Member):
        return isinstance(e.expr.type, StructType) and pure(e.expr)
    if isinstance(e, ast.Slice):
        return pure(e.expr)
    if isinstance(e, (ast.Unary, ast.Cast)):
        return scalar(e.type) and pure(e.expr)
    if isinstance(e, ast.Binary):
        return e.op not in ("/", "%") and scalar(e.left.type) and pure(e.left) and pure(e.right)
    if isinstance(e, ast.Cond):
        return pure(e.cond) and pure(e.then) and pure(e.else_)
    return False


def reads(e: ast.Expr, path: str) -> bool:
    """Does expression e read path, a part of it or a whole that holds it? Unlike mentions,
    `meta.a` does not read `meta.b`: a member's base counts only as the member's path."""
    p = path_of(e)
    if p is not None:
        return p == path or path.startswith(p + ".") or p.startswith(path + ".")
    return any(isinstance(v, ast.Expr) and reads(v, path) for v in vars(e).values())


def param_py(p: ast.Param) -> str:
    return p.decl_sym.pyname


def scalar(t: Type) -> bool:
    return isinstance(t, (BitType, IntType, BoolType, EnumType, ErrorType))


def unique_actions(allowed: dict[str, Sym]) -> list[tuple[str, Sym]]:
    seen, out = set(), []
    for sym in allowed.values():
        if sym.qname not in seen:
            seen.add(sym.qname)
            out.append((sym.qname, sym))
    return out


@dataclass
class Ctx:
    """Where the statement being compiled lives."""
    kind: str                            # "parser", "control", "action", "function"
    block: Any = None                    # BlockInfo
    ctl_args: str = ""                   # control params (+ L) to pass to local actions/tables
    pkt: str = ""                        # packet_in / packet_out param
    outs: list[Sym] = field(default_factory=list)   # out/inout params to hand back to the caller
    returns: bool = False                # a function's value comes first in what it hands back
    exits: bool = False                  # `exit` must hand the out/inout params back too


class CodeGen:
    """The output buffer and helpers every generator part uses."""

    def __init__(self, cp: CheckedProgram, trace: bool, optimize: bool = True) -> None:
        self.cp = cp
        self.trace = trace
        # Off: none of the speed-ups that keep the values (single-use temporaries moved,
        # local aliases, register indexes reused, struct unpacking): a plainer twin of the
        # same program that tests/p4sim/p4fuzz.py compares with the optimised code.
        self.optimize = optimize
        self.lines: list[str] = []
        self.ind = 0
        self.uid = 0
        self.where: ast.Node | None = None          # what is being compiled, for internal errors
        self.aliases: dict[str, tuple[str, str]] | None = None   # ref -> (placeholder, local name)
        # In a block's straight-line run: register index code -> (its variable, the index).
        self.known: dict[str, tuple[str, ast.Expr]] | None = None
        # A sub-parser's scalar out/inout parameters (Sym ids): every state writes them,
        # so they live on its frame L, not in one state function's locals.
        self.framed_params: set[int] = set()

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    @contextlib.contextmanager
    def local_aliases(self) -> Iterator[None]:
        """Around the body of one generated function: a header of a parameter (`b_hdr.inc`)
        or a register's cells (`O_r.values`) that the body uses more than once is read
        into a local first (`h_inc = b_hdr.inc`, `R_MyIngress_r = O_MyIngress_r.values`),
        and the body uses the local: an attribute (or global) lookup less per use.

        Safe because those objects never change identity while a function runs: header,
        struct and union assignments, setValid/setInvalid and copy-out all write into the
        existing objects (_set, _setv, _v), a parameter is never rebound, and register
        resets refill the same list. Stack elements do change (push_front, pop_front), so
        stacks and anything reached through them are not aliased."""
        assert self.aliases is None
        if not self.optimize:
            yield
            return
        self.aliases = {}
        start, indent = len(self.lines), "    " * self.ind
        try:
            yield
        finally:
            aliases, self.aliases = self.aliases, None
        body = self.lines[start:]
        names: set[str] = set()
        head = []
        for ref, (ph, name) in aliases.items():
            if sum(line.count(ph) for line in body) < 2:
                body = [line.replace(ph, ref) for line in body]
                continue
            while name in names:
                name += "_"
            names.add(name)
            head.append(f"{indent}{name} = {ref}")
            body = [line.replace(ph, name) for line in body]
        self.lines[start:] = head + body

    def alias(self, ref: str, name: str) -> str:
        """ref, or in a local_aliases body a placeholder for it (a NUL never appears
        in generated code otherwise: string literals are written with repr)."""
        if self.aliases is None:
            return ref
        if ref not in self.aliases:
            self.aliases[ref] = (f"\0{len(self.aliases)}\0", name)
        return self.aliases[ref][0]

    def tmp(self, base: str = "t") -> str:
        self.uid += 1
        return f"_{base}{self.uid}"

    def const(self, e: ast.Expr) -> Any:
        v = const_value(e, self.cp.errors)
        if v is None:
            raise error_at(e, "expected a compile-time constant")
        return v
