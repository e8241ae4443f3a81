"""Parse preprocessed P4_16 text into the AST with lark's LALR parser.

P4's grammar needs to know which names are types; like p4c's lexer feedback, the
lexer here retypes identifiers declared as types (a pre-scan of the token stream).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Iterator

import lark
from lark import Token, Transformer, v_args
from lark.lexer import BasicLexer, Lexer

from ..errors import P4Error
from . import ast
from .preprocess import SourceMap

_GRAMMAR = Path(__file__).with_name("p4.lark")
_TYPE_STARTS = {"BIT", "INT_KW", "BOOL", "VARBIT", "TYPE_IDENTIFIER"}
# After these `type` is a name (a field or a parameter called `type`), not `type T U;`.
_NOT_A_TYPE_DECL = {";", "=", ")", ",", ".", "]", ":", "[", "}"}


def parse_text(text: str, source_file: str) -> ast.Program:
    """Parse preprocessed text (with # line markers); P4Error on a syntax error."""
    smap = SourceMap.of(text, source_file)
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedInput as err:
        raise _syntax_error(err, smap) from None
    try:
        program = _ToAst(smap).transform(tree)
    except lark.exceptions.VisitError as err:
        if isinstance(err.orig_exc, P4Error):
            raise err.orig_exc from None
        raise
    program.source_file = source_file
    return program


@functools.lru_cache(maxsize=1)
def _lark() -> lark.Lark:
    return lark.Lark(_GRAMMAR.read_text(), parser="lalr", lexer=_P4Lexer,
                     propagate_positions=True, maybe_placeholders=True)


def _syntax_error(err: lark.exceptions.UnexpectedInput, smap: SourceMap) -> P4Error:
    pos = smap.pos(getattr(err, "line", 0) or 0, getattr(err, "column", 0) or 0)
    if isinstance(err, lark.exceptions.UnexpectedToken):
        tok = err.token
        what = "end of file" if tok.type == "$END" else f"`{tok.value}`"
        message = f"syntax error, unexpected {what}"
    elif isinstance(err, lark.exceptions.UnexpectedCharacters):
        message = f"syntax error, unexpected character `{err.char}`"
    else:
        message = "syntax error, unexpected end of file"
    return P4Error(message, pos.file, pos.line, pos.column)


class _P4Lexer(Lexer):
    """lark's basic lexer plus P4's context: type names, `>>` and generic calls."""

    __future_interface__ = 2

    def __init__(self, conf: Any) -> None:
        self._basic = BasicLexer(conf)

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Token]:
        toks = list(self._basic.lex(lexer_state, parser_state))
        types = _type_names(toks)
        out: list[Token] = []
        for i, t in enumerate(toks):
            if t.type == "IDENTIFIER" and t.value in types:
                t = Token.new_borrow_pos("TYPE_IDENTIFIER", t.value, t)
            elif t.value == ">" and i + 1 < len(toks) and toks[i + 1].value == ">" \
                    and toks[i + 1].start_pos == t.end_pos:
                t = Token.new_borrow_pos("SHR_ANGLE", ">", t)
            out.append(t)
        for i, t in enumerate(out):
            # `x.lookahead<bit<8>>()`: a '<' after a plain name, opening a type.
            if t.value == "<" and t.type != "SHR_ANGLE" and i and out[i - 1].type == "IDENTIFIER" \
                    and i + 1 < len(out) and out[i + 1].type in _TYPE_STARTS \
                    and not (i + 2 < len(out) and out[i + 2].value == "."):
                out[i] = Token.new_borrow_pos("TYPE_LT", "<", t)
        yield from out


def _type_names(toks: list[Token]) -> set[str]:
    """Names the program declares as types, including type parameters."""
    types: set[str] = set()
    n = len(toks)

    def next_ident(i: int) -> int:
        while i < n and toks[i].type != "IDENTIFIER":
            i += 1
        return i

    def type_params(i: int) -> None:        # toks[i] is '<'
        j = i + 1
        while j < n and toks[j].value != ">":
            if toks[j].type == "IDENTIFIER":
                types.add(toks[j].value)
            elif toks[j].value != ",":
                return
            j += 1

    for i, t in enumerate(toks):
        kind = t.type
        if kind in ("HEADER", "STRUCT", "HEADER_UNION", "ENUM", "CONTROL", "PARSER", "PACKAGE"):
            j = next_ident(i + 1)
            if j < n:
                types.add(toks[j].value)
                if j + 1 < n and toks[j + 1].value == "<":
                    type_params(j + 1)
        elif kind == "EXTERN" and i + 2 < n and toks[i + 1].type == "IDENTIFIER" \
                and toks[i + 2].value in ("<", "{"):
            types.add(toks[i + 1].value)
            if toks[i + 2].value == "<":
                type_params(i + 2)
        elif kind == "TYPEDEF" or (kind == "TYPE" and i + 1 < n and toks[i + 1].value not in _NOT_A_TYPE_DECL):
            j = i
            while j < n and toks[j].value != ";":
                j += 1
            if toks[j - 1].type == "IDENTIFIER":
                types.add(toks[j - 1].value)
        elif kind == "IDENTIFIER" and i + 1 < n and toks[i + 1].value == "<" and i \
                and (toks[i - 1].type in ("VOID", "IDENTIFIER") or toks[i - 1].value == ">"):
            # `void extract<T>(...)`, `T lookahead<T>()`: a generic method or function.
            j = i + 2
            while j < n and (toks[j].type == "IDENTIFIER" or toks[j].value == ","):
                j += 1
            if j + 1 < n and toks[j].value == ">" and toks[j + 1].value == "(":
                type_params(i + 1)
    return types


def parse_int(text: str) -> tuple[int, int | None, bool]:
    """A P4 integer literal -> (value, width or None, signed)."""
    width, signed = None, False
    body = text.replace("_", "")
    for sep in ("w", "s"):
        head, found, tail = body.partition(sep)
        if found and head.isdigit():
            width, signed, body = int(head), sep == "s", tail
            break
    base = 10
    if len(body) > 1 and body[0] == "0" and body[1] in "xXbBoOdD":
        base = {"x": 16, "b": 2, "o": 8, "d": 10}[body[1].lower()]
        body = body[2:]
    return int(body, base), width, signed


def _drop_tokens(children: list) -> list:
    return [c for c in children if not isinstance(c, Token)]


@v_args(meta=True)
class _ToAst(Transformer):
    """lark tree -> ast nodes; positions mapped to the original files."""

    def __init__(self, smap: SourceMap) -> None:
        super().__init__()
        self._smap = smap

    def _pos(self, meta: Any) -> ast.Pos:
        if getattr(meta, "empty", True):
            return ast.NOWHERE
        return self._smap.pos(meta.line, meta.column)

    def _tpos(self, tok: Token) -> ast.Pos:
        return self._smap.pos(tok.line, tok.column)

    # ---- top level / annotations / names
    def start(self, meta, ch):
        return ast.Program([c for c in ch if not isinstance(c, ast.Empty)], pos=self._pos(meta))

    def empty_decl(self, meta, ch):
        return ast.Empty(pos=self._pos(meta))

    def annotations(self, meta, ch):
        return list(ch)

    def annotation(self, meta, ch):
        return ast.Annotation(ch[0], list(ch[1] or []) if len(ch) > 1 else [], pos=self._pos(meta))

    def anno_args(self, meta, ch):
        return list(ch)

    def name(self, meta, ch):
        return str(ch[0])

    any_name = name
    nontype_name = name

    # ---- types
    def bool_type(self, meta, ch):
        return ast.SimpleTypeRef("bool", pos=self._pos(meta))

    def error_type(self, meta, ch):
        return ast.SimpleTypeRef("error", pos=self._pos(meta))

    def string_type(self, meta, ch):
        return ast.SimpleTypeRef("string", pos=self._pos(meta))

    def int_type(self, meta, ch):
        return ast.SimpleTypeRef("int", pos=self._pos(meta))

    def void_type(self, meta, ch):
        return ast.SimpleTypeRef("void", pos=self._pos(meta))

    def dont_care_type(self, meta, ch):
        return ast.SimpleTypeRef("_", pos=self._pos(meta))

    def _width(self, ch):
        rest = [c for c in ch[1:] if not (isinstance(c, Token) and c.type == "SHR_ANGLE")]
        if not rest:
            return None
        w = rest[0]
        if isinstance(w, Token):
            value, _, _ = parse_int(w.value)
            return ast.IntLit(value, pos=self._tpos(w))
        return w

    def bit_type(self, meta, ch):
        return ast.BitTypeRef(self._width(ch), False, pos=self._pos(meta))

    def signed_type(self, meta, ch):
        return ast.BitTypeRef(self._width(ch), True, pos=self._pos(meta))

    def varbit_type(self, meta, ch):
        return ast.VarbitTypeRef(self._width(ch), pos=self._pos(meta))

    def named_type(self, meta, ch):
        return ast.NamedTypeRef(str(ch[0]), list(ch[1] or []), pos=self._pos(meta))

    def type_args(self, meta, ch):
        return ch[0]

    def generic_args(self, meta, ch):
        return ch[1]

    def type_arg_list(self, meta, ch):
        return list(ch)

    def close_angle(self, meta, ch):
        return None

    def stack_type(self, meta, ch):
        return ast.StackTypeRef(ch[0], ch[1], pos=self._pos(meta))

    def tuple_type(self, meta, ch):
        return ast.TupleTypeRef(ch[1], pos=self._pos(meta))

    def type_or_void(self, meta, ch):
        return ch[0]

    def type_params(self, meta, ch):
        return [c for c in ch if isinstance(c, str) and not isinstance(c, Token)]

    # ---- type declarations
    def header_kind(self, meta, ch):
        return str(ch[0])

    def header_decl(self, meta, ch):
        return ast.HeaderDecl(ch[1], ch[2], list(ch[3:]), ch[0], pos=self._pos(meta))

    def field(self, meta, ch):
        return ast.Field(ch[2], ch[1], ch[0], pos=self._pos(meta))

    def typedef_decl(self, meta, ch):
        return ast.TypedefDecl(ch[2], ch[3], pos=self._pos(meta))

    def type_decl(self, meta, ch):
        return ast.TypedefDecl(ch[2], ch[3], True, pos=self._pos(meta))

    def enum_decl(self, meta, ch):
        width = ch[3]
        if isinstance(width, Token):
            width = ast.IntLit(parse_int(width.value)[0], pos=self._tpos(width))
        return ast.EnumDecl(ch[4], width, list(ch[5:]), pos=self._pos(meta))

    def enum_member(self, meta, ch):
        return (ch[0], ch[1])

    def error_decl(self, meta, ch):
        return ast.ErrorDecl(list(ch[1:]), pos=self._pos(meta))

    def match_kind_decl(self, meta, ch):
        return ast.MatchKindDecl(list(ch[1:]), pos=self._pos(meta))

    def const_decl(self, meta, ch):
        return ast.ConstDecl(ch[2], ch[3], ch[4], ch[0], pos=self._pos(meta))

    # ---- externs and prototypes
    def extern_decl(self, meta, ch):
        nt: ast.NamedTypeRef = ch[2]
        params = []
        for a in nt.args:
            if not (isinstance(a, ast.NamedTypeRef) and not a.args):
                raise P4Error("expected a type parameter name", a.pos.file, a.pos.line, a.pos.column)
            params.append(a.name)
        return ast.ExternDecl(nt.name, params, list(ch[3:]), ch[0], pos=self._pos(meta))

    def method_decl(self, meta, ch):
        return ast.MethodDecl(ch[2], ch[1], ch[3] or [], ch[4] or [], ch[0], pos=self._pos(meta))

    def ctor_decl(self, meta, ch):
        return ast.MethodDecl(str(ch[1]), None, [], ch[2] or [], ch[0], pos=self._pos(meta))

    def extern_function_decl(self, meta, ch):
        return ast.MethodDecl(ch[3], ch[2], ch[4] or [], ch[5] or [], ch[0], pos=self._pos(meta))

    def _block_type(self, kind, meta, ch):
        return ast.BlockTypeDecl(kind, ch[2], ch[3] or [], ch[4] or [], ch[0], pos=self._pos(meta))

    def package_decl(self, meta, ch):
        return self._block_type("package", meta, ch)

    def parser_type_decl(self, meta, ch):
        return self._block_type("parser", meta, ch)

    def control_type_decl(self, meta, ch):
        return self._block_type("control", meta, ch)

    def params(self, meta, ch):
        return list(ch)

    def param(self, meta, ch):
        return ast.Param(ch[1] or "", ch[2], ch[3], ch[4], ch[0], pos=self._pos(meta))

    def direction(self, meta, ch):
        return str(ch[0])

    def instantiation(self, meta, ch):
        return ast.Instantiation(ch[1], ch[2] or [], ch[3], ch[0], pos=self._pos(meta))

    def function_decl(self, meta, ch):
        return ast.FunctionDecl(ch[1], ch[2], ch[4] or [], ch[5], ch[0], ch[3] or [], pos=self._pos(meta))

    # ---- parsers
    def parser_decl(self, meta, ch):
        rest = list(ch[6:])
        states = [c for c in rest if isinstance(c, ast.ParserState)]
        local = [c for c in rest if not isinstance(c, ast.ParserState)]
        return ast.ParserDecl(ch[2], ch[4] or [], local, states, ch[0], ch[5] or [],
                              type_params=ch[3] or [], pos=self._pos(meta))

    def ctor_params(self, meta, ch):
        return ch[0] or []

    def value_set_decl(self, meta, ch):
        return ast.ValueSetDecl(ch[2], ch[4], ch[5], ch[0], pos=self._pos(meta))

    def parser_state(self, meta, ch):
        return ast.ParserState(ch[2], list(ch[3:-1]), ch[-1], ch[0], pos=self._pos(meta))

    def transition_direct(self, meta, ch):
        return ast.Transition(ch[1], pos=self._pos(meta))

    def transition_select(self, meta, ch):
        return ast.Transition(None, ch[2], list(ch[3:]), pos=self._pos(meta))

    def select_case(self, meta, ch):
        return ast.SelectCase(ch[0], ch[1], pos=self._pos(meta))

    def tuple_keyset(self, meta, ch):
        return ast.TupleKey(list(ch), pos=self._pos(meta))

    def mask_keyset(self, meta, ch):
        return ast.Mask(ch[0], ch[2], pos=self._pos(meta))

    def range_keyset(self, meta, ch):
        return ast.Range(ch[0], ch[2], pos=self._pos(meta))

    def default_keyset(self, meta, ch):
        return ast.DefaultKey(pos=self._pos(meta))

    def dont_care_keyset(self, meta, ch):
        return ast.DontCare(pos=self._pos(meta))

    # ---- controls
    def control_decl(self, meta, ch):
        local = [c for c in ch[6:-2]]
        return ast.ControlDecl(ch[2], ch[4] or [], local, ch[-1], ch[0], ch[5] or [],
                               type_params=ch[3] or [], pos=self._pos(meta))

    def action_decl(self, meta, ch):
        return ast.ActionDecl(ch[2], ch[3] or [], ch[4], ch[0], pos=self._pos(meta))

    def table_decl(self, meta, ch):
        table = ast.TableDecl(ch[2], annotations=ch[0], pos=self._pos(meta))
        for kind, value in ch[3:]:
            if kind == "key":
                table.keys = value
            elif kind == "actions":
                table.actions = value
            elif kind == "entries":
                table.entries, table.entries_const = value
            else:
                if value.name in table.properties:
                    p = value.pos
                    raise P4Error(f"table property {value.name} given twice", p.file, p.line, p.column)
                table.properties[value.name] = value
        return table

    def key_property(self, meta, ch):
        return ("key", list(ch[2:]))

    def key_element(self, meta, ch):
        return ast.KeyElement(ch[0], ch[1], ch[2], pos=self._pos(meta))

    def actions_property(self, meta, ch):
        return ("actions", list(ch[2:]))

    def action_ref(self, meta, ch):
        args = ch[2] if len(ch) > 2 else None
        return ast.ActionRefNode(ch[1], args, ch[0], pos=self._pos(meta))

    def entries_property(self, meta, ch):
        return ("entries", (list(ch[3:]), ch[1] is not None))

    def table_entry(self, meta, ch):
        return ast.EntryNode(ch[2], ch[3], ch[4] or [], ch[1], ch[5], pos=self._pos(meta))

    def simple_property(self, meta, ch):
        return ("prop", ast.TableProperty(str(ch[2]), ch[3], ch[1] is not None, ch[0], pos=self._pos(meta)))

    # ---- statements
    def block(self, meta, ch):
        return ast.Block([c for c in ch if not isinstance(c, ast.Empty)], pos=self._pos(meta))

    def annotated_block(self, meta, ch):
        return ch[1]                         # @atomic and the like change nothing here

    def empty_statement(self, meta, ch):
        return ast.Empty(pos=self._pos(meta))

    def var_decl(self, meta, ch):
        return ast.VarDecl(ch[1], ch[2], ch[3], ch[0], pos=self._pos(meta))

    def assignment(self, meta, ch):
        return ast.Assign(ch[0], ch[1], pos=self._pos(meta))

    def compound_assignment(self, meta, ch):
        """`lv op= e` is `lv = lv op e` with lv evaluated once: the Binary's left operand is
        the lhs node itself (frontend/effects.py keeps a side-effecting index single)."""
        lhs, op, rhs = ch[0], ch[1].value[:-1], ch[2]
        pos = self._pos(meta)
        return ast.Assign(lhs, ast.Binary(op, lhs, rhs, pos=pos), pos=pos)

    def for_statement(self, meta, ch):
        return ast.For(ch[2] or [], ch[3], ch[4] or [], ch[5], pos=self._pos(meta))

    def for_inits(self, meta, ch):
        return list(ch)

    for_updates = for_inits

    def for_var_decl(self, meta, ch):
        return ast.VarDecl(ch[1], ch[2], ch[3], ch[0], pos=self._pos(meta))

    def for_assignment(self, meta, ch):
        return ast.Assign(ch[0], ch[1], pos=self._pos(meta))

    for_compound_assignment = compound_assignment

    def for_call(self, meta, ch):
        pos = self._pos(meta)
        return ast.CallStmt(ast.Call(ch[0], ch[2] or [], ch[1] or [], pos=pos), pos=pos)

    def for_in_statement(self, meta, ch):
        pos = self._pos(meta)
        var = ast.VarDecl(ch[3], ch[4], None, ch[2], pos=pos)
        return ast.ForIn(var, ch[6], ch[7], pos=pos)

    def for_range(self, meta, ch):
        return ast.Range(ch[0], ch[2], pos=self._pos(meta))

    def break_statement(self, meta, ch):
        return ast.Break(pos=self._pos(meta))

    def continue_statement(self, meta, ch):
        return ast.Continue(pos=self._pos(meta))

    def call_statement(self, meta, ch):
        pos = self._pos(meta)
        return ast.CallStmt(ast.Call(ch[0], ch[2] or [], ch[1] or [], pos=pos), pos=pos)

    def if_statement(self, meta, ch):
        return ast.If(ch[1], ch[2], ch[4], pos=self._pos(meta))

    def return_statement(self, meta, ch):
        return ast.Return(ch[1], pos=self._pos(meta))

    def exit_statement(self, meta, ch):
        return ast.Exit(pos=self._pos(meta))

    def switch_statement(self, meta, ch):
        return ast.Switch(ch[1], list(ch[2:]), pos=self._pos(meta))

    def switch_case(self, meta, ch):
        label = None if isinstance(ch[0], ast.DefaultKey) else ch[0]
        return ast.SwitchCase(label, ch[1], pos=self._pos(meta))

    def default_label(self, meta, ch):
        return ast.DefaultKey(pos=self._pos(meta))

    # ---- expressions
    def expression_list(self, meta, ch):
        return list(ch)

    def args(self, meta, ch):
        return list(ch)

    def dont_care_arg(self, meta, ch):
        return ast.DontCare(pos=self._pos(meta))

    def name_ref(self, meta, ch):
        return ast.NameRef(ch[0], pos=self._pos(meta))

    def member(self, meta, ch):
        return ast.Member(ch[0], ch[1], pos=self._pos(meta))

    def index(self, meta, ch):
        return ast.Index(ch[0], ch[1], pos=self._pos(meta))

    def slice(self, meta, ch):
        return ast.Slice(ch[0], ch[1], ch[2], pos=self._pos(meta))

    def call(self, meta, ch):
        return ast.Call(ch[0], ch[1] or [], pos=self._pos(meta))

    def generic_call(self, meta, ch):
        return ast.Call(ch[0], ch[2] or [], ch[1], pos=self._pos(meta))

    def integer(self, meta, ch):
        value, width, signed = parse_int(ch[0].value)
        return ast.IntLit(value, width, signed, pos=self._pos(meta))

    def true(self, meta, ch):
        return ast.BoolLit(True, pos=self._pos(meta))

    def false(self, meta, ch):
        return ast.BoolLit(False, pos=self._pos(meta))

    def string(self, meta, ch):
        raw = ch[0].value[1:-1]
        return ast.StrLit(raw.encode().decode("unicode_escape"), pos=self._pos(meta))

    def list_expr(self, meta, ch):
        return ast.ListExpr(list(ch[0] or []), pos=self._pos(meta))

    def struct_expr(self, meta, ch):
        pairs = [c for c in ch if c is not None]
        return ast.StructExpr([n for n, _ in pairs], [e for _, e in pairs], pos=self._pos(meta))

    def named_expr(self, meta, ch):
        return (ch[0], ch[1])

    def type_member(self, meta, ch):
        return ast.TypeMember(str(ch[0]), ch[1], pos=self._pos(meta))

    def error_member(self, meta, ch):
        return ast.TypeMember("error", ch[1], pos=self._pos(meta))

    def constructor(self, meta, ch):
        return ast.Constructor(ch[0], ch[1] or [], pos=self._pos(meta))

    def cond(self, meta, ch):
        return ast.Cond(ch[0], ch[1], ch[2], pos=self._pos(meta))

    def binop(self, meta, ch):
        return ast.Binary(ch[1].value, ch[0], ch[2], pos=self._pos(meta))

    def _bin(op):
        def build(self, meta, ch):
            ch = _drop_tokens(ch)
            return ast.Binary(op, ch[0], ch[1], pos=self._pos(meta))
        return build

    lt = _bin("<")
    gt = _bin(">")
    bor = _bin("|")
    bxor = _bin("^")
    band = _bin("&")
    shr = _bin(">>")

    def lnot(self, meta, ch):
        return ast.Unary("!", ch[0], pos=self._pos(meta))

    def bnot(self, meta, ch):
        return ast.Unary("~", ch[0], pos=self._pos(meta))

    def neg(self, meta, ch):
        return ast.Unary("-", ch[1], pos=self._pos(meta))

    def cast(self, meta, ch):
        return ast.Cast(ch[0], ch[1], pos=self._pos(meta))
