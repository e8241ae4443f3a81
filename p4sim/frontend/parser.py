"""Parse preprocessed P4_16 text into the AST with an LALR table that lark builds.

P4's grammar needs to know which names are types; like p4c's lexer feedback, the
lexer here retypes identifiers declared as types (a pre-scan of the token stream).
The AST is built while parsing (no parse tree first): each reduction calls the
builder's method for its rule with the rule's position, as lark's propagate_positions
would give it.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import lark
from lark.parsers.lalr_analysis import Shift

from ..cbuild import cache_dir
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
    grammar = _grammar()
    program = grammar.parse(_p4_tokens(grammar.tokens(text, smap)), _ToAst(smap))
    program.source_file = source_file
    return program


@functools.lru_cache(maxsize=1)
def _grammar() -> _Grammar:
    text = _GRAMMAR.read_text()
    return _Grammar(lark.Lark(text, parser="lalr", lexer="basic", maybe_placeholders=True, cache=_lark_cache(text)))


def _lark_cache(grammar: str) -> str | bool:
    """Where lark keeps its analysis of the grammar (0.4 s to redo in each process): beside
    cbuild's objects. lark checks the file against the grammar, its options and its version,
    and redoes the analysis (and the file) when it cannot read it."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return str(folder / f"p4-{hashlib.sha256(grammar.encode()).hexdigest()[:16]}.lark")


@dataclass(slots=True, eq=False)
class Token:
    """A token: its terminal (`type`: lark's name, or the lexer feedback's), its text, where it
    starts and the offset after it. About half the size of lark's Token (a large program has
    hundreds of thousands)."""
    type: str
    value: str
    line: int
    column: int
    start_pos: int
    end_pos: int

    def __str__(self) -> str:
        return self.value


def _unexpected(tok: Token, smap: SourceMap) -> P4Error:
    pos = smap.pos(tok.line or 0, tok.column or 0)
    what = "end of file" if tok.type == "$END" else f"`{tok.value}`"
    return P4Error(f"syntax error, unexpected {what}", pos.file, pos.line, pos.column)


# A value's place on the parse stack: (line, column, container line, container column, is a
# token), or None for a value that takes no text. These are lark's propagate_positions: a
# node starts where its first child that has a place starts (the container's start for a
# node that passed through a rule with tokens of its own: `(a + b) * c` starts at `(`).
_Place = tuple[int, int, int, int, bool]


@dataclass(frozen=True)
class _Reduction:
    """How a reduction by one rule of the grammar builds its value (lark's parse-tree
    builder: the children it keeps, the None placeholders of missing `[x]`, the children of
    `_rule`s spliced in, and `?rule`s passing their single child through)."""
    size: int                                   # symbols the rule pops
    origin: str                                 # the nonterminal it makes
    passes_child: bool                          # a `?rule` of one kept symbol: nothing to build
    expand1: bool                               # a `?rule`: one child passes through
    include: tuple[tuple[int, bool, int], ...]  # (index, spliced, Nones before it)
    trailing_nones: int
    build: Callable[[Any, ast.Pos, list], Any] | None   # the builder's method; None: a list to splice


class _Grammar:
    """p4.lark's LALR table, as lark computes it, and the loop that runs it."""

    def __init__(self, parser: lark.Lark) -> None:
        self.lark = parser
        table = parser.parser.parser._parse_table     # lark's own LALR(1) table (lark is pinned)
        reductions = {rule: self._reduction(rule) for rule in parser.rules}
        # state -> symbol -> the next state (shift, goto) or the _Reduction to make
        self.states = {state: {str(sym): arg if action is Shift else reductions[arg]
                               for sym, (action, arg) in actions.items()}
                       for state, actions in table.states.items()}
        self.start_state = table.start_states["start"]
        self.end_state = table.end_states["start"]
        self._passes: dict[tuple[int, int, str], int] = {}

    @staticmethod
    def _reduction(rule: Any) -> _Reduction:
        expansion, options = rule.expansion, rule.options
        if options.empty_indices:
            bits = "".join(str(int(b)) for b in options.empty_indices)
            empty = [len(ones) for ones in bits.split("0")]
        else:
            empty = [0] * (len(expansion) + 1)
        include, nones = [], 0
        for i, sym in enumerate(expansion):
            nones += empty[i]
            if options.keep_all_tokens or not (sym.is_term and sym.filter_out):
                include.append((i, not sym.is_term and sym.name.startswith("_"), nones))
                nones = 0
        trailing = nones + empty[len(expansion)]
        expand1 = options.expand1 and not rule.alias
        name = rule.alias or options.template_source or rule.origin.name
        spliced = rule.origin.name.startswith("_")
        build = None if spliced else getattr(_ToAst, name, None)
        one_child = expand1 and len(include) + sum(n for _, _, n in include) + trailing == 1
        if build is None and not (spliced or one_child):
            raise AssertionError(f"p4.lark's rule {name} has no method in _ToAst")
        if expand1 and any(s for _, s, _ in include):
            raise AssertionError(f"p4.lark's ?rule {name} splices a _rule: not supported")
        passes = expand1 and len(expansion) == 1 and len(include) == 1 and not include[0][1] \
            and not include[0][2] and not trailing
        return _Reduction(len(expansion), str(rule.origin.name), passes, expand1, tuple(include), trailing, build)

    def _after_passes(self, under: int, top: int, kind: str) -> int:
        """The state after the run of `?rule`s passing one child through that the table does
        in state top (above state under) before a `kind` token (`1` is an expression through
        all the precedence levels): the same states, so the same syntax errors."""
        key = (under, top, kind)
        state = self._passes.get(key)
        if state is None:
            state = top
            r = self.states[state].get(kind)
            while isinstance(r, _Reduction) and r.passes_child:
                state = self.states[under][r.origin]
                r = self.states[state].get(kind)
            self._passes[key] = state
        return state

    def tokens(self, text: str, smap: SourceMap) -> list[Token]:
        """lark's basic lexer's tokens in a tighter loop: lark's regex of every terminal (in
        lark's order), its callbacks (keywords out of IDENTIFIER: the same type for the same
        text, so asked once per text), its lines and columns. Equal texts share one str."""
        lexer = self.lark.parser.lexer
        (terminals,) = lexer.scanner._mres             # one regex: fewer than 100 terminals
        match, callbacks = terminals.match, lexer.callback
        ignore, newline = lexer.ignore_types, lexer.newline_types
        retyped: dict[str, dict[str, str]] = {kind: {} for kind in callbacks}
        texts: dict[str, str] = {}
        out: list[Token] = []
        pos, end, line, line_start = 0, len(text), 1, 0
        while pos < end:
            m = match(text, pos)
            if m is None:
                where = smap.pos(line, pos - line_start + 1)
                raise P4Error(f"syntax error, unexpected character `{text[pos]}`", where.file, where.line, where.column)
            kind, after = m.lastgroup, m.end()
            start_line, start_column = line, pos - line_start + 1
            if kind in newline:
                n = text.count("\n", pos, after)
                if n:
                    line += n
                    line_start = text.rindex("\n", pos, after) + 1
            if kind not in ignore:
                value = m.group()
                value = texts.setdefault(value, value)
                if kind in retyped:
                    types = retyped[kind]
                    if value not in types:
                        types[value] = callbacks[kind](lark.Token(kind, value)).type
                    kind = types[value]
                out.append(Token(kind, value, start_line, start_column, pos, after))
            pos = after
        return out

    def parse(self, tokens: list[Token], builder: _ToAst) -> Any:
        """Run the LALR table over the tokens, building the AST bottom-up; P4Error on a syntax
        error. The list is emptied as it goes: a token's memory goes once it is reduced."""
        states, end_state = self.states, self.end_state
        state_stack: list[int] = [self.start_state]
        values: list[Any] = []
        places: list[_Place | None] = []
        smap = builder._smap
        positions: dict[tuple[int, int], ast.Pos] = {}
        last = tokens[-1] if tokens else Token("$END", "", 1, 1, 0, 0)
        tokens.append(replace(last, type="$END", value=""))
        tokens.reverse()
        while tokens:
            tok = tokens.pop()
            kind = tok.type
            while True:
                try:
                    r = states[state_stack[-1]][kind]
                except KeyError:
                    raise _unexpected(tok, smap) from None
                if r.__class__ is int:                 # shift
                    state_stack.append(r)
                    values.append(tok)
                    places.append((tok.line, tok.column, tok.line, tok.column, True))
                    break
                if r.passes_child:             # the value stays: only the state changes
                    state_stack[-1] = self._after_passes(state_stack[-2], state_stack[-1], kind)
                    continue
                size = r.size
                if size:
                    raw, raw_places = values[-size:], places[-size:]
                    del state_stack[-size:], values[-size:], places[-size:]
                else:
                    raw, raw_places = [], []
                first = None
                for first in raw_places:
                    if first is not None:
                        break
                children: list = []
                for i, spliced, nones in r.include:
                    if nones:
                        children += [None] * nones
                    if not spliced:
                        children.append(raw[i])
                    elif children:
                        children += raw[i]
                    else:                   # left recursion: extend the list in place
                        children = raw[i]
                if r.trailing_nones:
                    children += [None] * r.trailing_nones
                if r.expand1 and len(children) == 1:
                    if r.include:
                        i = r.include[0][0]
                        value, place = raw[i], raw_places[i]
                        if place is not None and not place[4]:
                            place = (place[0], place[1], first[2], first[3], False)
                    else:
                        value, place = None, None
                else:
                    if first is None:
                        pos, place = ast.NOWHERE, None
                    else:
                        key = (first[2], first[3])
                        pos = positions.get(key)
                        if pos is None:
                            pos = positions[key] = smap.pos(*key)
                        place = (key[0], key[1], key[0], key[1], False)
                    value = children if r.build is None else r.build(builder, pos, children)
                state = states[state_stack[-1]][r.origin]
                state_stack.append(state)
                values.append(value)
                places.append(place)
                if kind == "$END" and state == end_state:
                    return value
        raise AssertionError("the LALR table ended without accepting")      # lark's tables always accept


def _p4_tokens(toks: list[Token]) -> list[Token]:
    """lark's basic tokens plus P4's context: type names, `>>` and generic calls."""
    types = _type_names(toks)
    out: list[Token] = []
    for i, t in enumerate(toks):
        if t.type == "IDENTIFIER" and t.value in types:
            t = replace(t, type="TYPE_IDENTIFIER")
        elif t.value == ">" and i + 1 < len(toks) and toks[i + 1].value == ">" \
                and toks[i + 1].start_pos == t.end_pos:
            t = replace(t, type="SHR_ANGLE")
        out.append(t)
    for i, t in enumerate(out):
        # `x.lookahead<bit<8>>()`: a '<' after a plain name, opening a type.
        if t.value == "<" and t.type != "SHR_ANGLE" and i and out[i - 1].type == "IDENTIFIER" \
                and i + 1 < len(out) and out[i + 1].type in _TYPE_STARTS \
                and not (i + 2 < len(out) and out[i + 2].value == "."):
            out[i] = replace(t, type="TYPE_LT")
    return out


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


class _ToAst:
    """A rule's children -> its ast node, one method per rule (named as the rule or its
    alias), called with the rule's position mapped to the original files."""

    def __init__(self, smap: SourceMap) -> None:
        self._smap = smap

    def _tpos(self, tok: Token) -> ast.Pos:
        return self._smap.pos(tok.line, tok.column)

    # ---- top level / annotations / names
    def start(self, pos, ch):
        return ast.Program([c for c in ch if not isinstance(c, ast.Empty)], pos=pos)

    def empty_decl(self, pos, ch):
        return ast.Empty(pos=pos)

    def annotations(self, pos, ch):
        return list(ch)

    def annotation(self, pos, ch):
        return ast.Annotation(ch[0], list(ch[1] or []) if len(ch) > 1 else [], pos=pos)

    def anno_args(self, pos, ch):
        return list(ch)

    def name(self, pos, ch):
        return str(ch[0])

    any_name = name
    nontype_name = name

    # ---- types
    def bool_type(self, pos, ch):
        return ast.SimpleTypeRef("bool", pos=pos)

    def error_type(self, pos, ch):
        return ast.SimpleTypeRef("error", pos=pos)

    def string_type(self, pos, ch):
        return ast.SimpleTypeRef("string", pos=pos)

    def int_type(self, pos, ch):
        return ast.SimpleTypeRef("int", pos=pos)

    def void_type(self, pos, ch):
        return ast.SimpleTypeRef("void", pos=pos)

    def dont_care_type(self, pos, ch):
        return ast.SimpleTypeRef("_", pos=pos)

    def _width(self, ch):
        rest = [c for c in ch[1:] if not (isinstance(c, Token) and c.type == "SHR_ANGLE")]
        if not rest:
            return None
        w = rest[0]
        if isinstance(w, Token):
            value, _, _ = parse_int(w.value)
            return ast.IntLit(value, pos=self._tpos(w))
        return w

    def bit_type(self, pos, ch):
        return ast.BitTypeRef(self._width(ch), False, pos=pos)

    def signed_type(self, pos, ch):
        return ast.BitTypeRef(self._width(ch), True, pos=pos)

    def varbit_type(self, pos, ch):
        return ast.VarbitTypeRef(self._width(ch), pos=pos)

    def named_type(self, pos, ch):
        return ast.NamedTypeRef(str(ch[0]), list(ch[1] or []), pos=pos)

    def type_args(self, pos, ch):
        return ch[0]

    def generic_args(self, pos, ch):
        return ch[1]

    def type_arg_list(self, pos, ch):
        return list(ch)

    def close_angle(self, pos, ch):
        return None

    def stack_type(self, pos, ch):
        return ast.StackTypeRef(ch[0], ch[1], pos=pos)

    def tuple_type(self, pos, ch):
        return ast.TupleTypeRef(ch[1], pos=pos)

    def type_or_void(self, pos, ch):
        return ch[0]

    def type_params(self, pos, ch):
        return [c for c in ch if isinstance(c, str)]

    # ---- type declarations
    def header_kind(self, pos, ch):
        return str(ch[0])

    def header_decl(self, pos, ch):
        return ast.HeaderDecl(ch[1], ch[2], list(ch[3:]), ch[0], pos=pos)

    def field(self, pos, ch):
        return ast.Field(ch[2], ch[1], ch[0], pos=pos)

    def typedef_decl(self, pos, ch):
        return ast.TypedefDecl(ch[2], ch[3], pos=pos)

    def type_decl(self, pos, ch):
        return ast.TypedefDecl(ch[2], ch[3], True, pos=pos)

    def enum_decl(self, pos, ch):
        width = ch[3]
        if isinstance(width, Token):
            width = ast.IntLit(parse_int(width.value)[0], pos=self._tpos(width))
        return ast.EnumDecl(ch[4], width, list(ch[5:]), pos=pos)

    def enum_member(self, pos, ch):
        return (ch[0], ch[1])

    def error_decl(self, pos, ch):
        return ast.ErrorDecl(list(ch[1:]), pos=pos)

    def match_kind_decl(self, pos, ch):
        return ast.MatchKindDecl(list(ch[1:]), pos=pos)

    def const_decl(self, pos, ch):
        return ast.ConstDecl(ch[2], ch[3], ch[4], ch[0], pos=pos)

    # ---- externs and prototypes
    def extern_decl(self, pos, ch):
        nt: ast.NamedTypeRef = ch[2]
        params = []
        for a in nt.args:
            if not (isinstance(a, ast.NamedTypeRef) and not a.args):
                raise P4Error("expected a type parameter name", a.pos.file, a.pos.line, a.pos.column)
            params.append(a.name)
        return ast.ExternDecl(nt.name, params, list(ch[3:]), ch[0], pos=pos)

    def method_decl(self, pos, ch):
        return ast.MethodDecl(ch[2], ch[1], ch[3] or [], ch[4] or [], ch[0], pos=pos)

    def ctor_decl(self, pos, ch):
        return ast.MethodDecl(str(ch[1]), None, [], ch[2] or [], ch[0], pos=pos)

    def extern_function_decl(self, pos, ch):
        return ast.MethodDecl(ch[3], ch[2], ch[4] or [], ch[5] or [], ch[0], pos=pos)

    def _block_type(self, kind, pos, ch):
        return ast.BlockTypeDecl(kind, ch[2], ch[3] or [], ch[4] or [], ch[0], pos=pos)

    def package_decl(self, pos, ch):
        return self._block_type("package", pos, ch)

    def parser_type_decl(self, pos, ch):
        return self._block_type("parser", pos, ch)

    def control_type_decl(self, pos, ch):
        return self._block_type("control", pos, ch)

    def params(self, pos, ch):
        return list(ch)

    def param(self, pos, ch):
        return ast.Param(ch[1] or "", ch[2], ch[3], ch[4], ch[0], pos=pos)

    def direction(self, pos, ch):
        return str(ch[0])

    def instantiation(self, pos, ch):
        return ast.Instantiation(ch[1], ch[2] or [], ch[3], ch[0], pos=pos)

    def function_decl(self, pos, ch):
        return ast.FunctionDecl(ch[1], ch[2], ch[4] or [], ch[5], ch[0], ch[3] or [], pos=pos)

    # ---- parsers
    def parser_decl(self, pos, ch):
        rest = list(ch[6:])
        states = [c for c in rest if isinstance(c, ast.ParserState)]
        local = [c for c in rest if not isinstance(c, ast.ParserState)]
        return ast.ParserDecl(ch[2], ch[4] or [], local, states, ch[0], ch[5] or [],
                              type_params=ch[3] or [], pos=pos)

    def ctor_params(self, pos, ch):
        return ch[0] or []

    def value_set_decl(self, pos, ch):
        return ast.ValueSetDecl(ch[2], ch[4], ch[5], ch[0], pos=pos)

    def parser_state(self, pos, ch):
        return ast.ParserState(ch[2], list(ch[3:-1]), ch[-1], ch[0], pos=pos)

    def transition_direct(self, pos, ch):
        return ast.Transition(ch[1], pos=pos)

    def transition_select(self, pos, ch):
        return ast.Transition(None, ch[2], list(ch[3:]), pos=pos)

    def select_case(self, pos, ch):
        return ast.SelectCase(ch[0], ch[1], pos=pos)

    def tuple_keyset(self, pos, ch):
        return ast.TupleKey(list(ch), pos=pos)

    def mask_keyset(self, pos, ch):
        return ast.Mask(ch[0], ch[2], pos=pos)

    def range_keyset(self, pos, ch):
        return ast.Range(ch[0], ch[2], pos=pos)

    def default_keyset(self, pos, ch):
        return ast.DefaultKey(pos=pos)

    def dont_care_keyset(self, pos, ch):
        return ast.DontCare(pos=pos)

    # ---- controls
    def control_decl(self, pos, ch):
        local = [c for c in ch[6:-2]]
        return ast.ControlDecl(ch[2], ch[4] or [], local, ch[-1], ch[0], ch[5] or [],
                               type_params=ch[3] or [], pos=pos)

    def action_decl(self, pos, ch):
        return ast.ActionDecl(ch[2], ch[3] or [], ch[4], ch[0], pos=pos)

    def table_decl(self, pos, ch):
        table = ast.TableDecl(ch[2], annotations=ch[0], pos=pos)
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

    def key_property(self, pos, ch):
        return ("key", list(ch[2:]))

    def key_element(self, pos, ch):
        return ast.KeyElement(ch[0], ch[1], ch[2], pos=pos)

    def actions_property(self, pos, ch):
        return ("actions", list(ch[2:]))

    def action_ref(self, pos, ch):
        args = ch[2] if len(ch) > 2 else None
        return ast.ActionRefNode(ch[1], args, ch[0], pos=pos)

    def entries_property(self, pos, ch):
        return ("entries", (list(ch[3:]), ch[1] is not None))

    def table_entry(self, pos, ch):
        return ast.EntryNode(ch[2], ch[3], ch[4] or [], ch[1], ch[5], pos=pos)

    def simple_property(self, pos, ch):
        return ("prop", ast.TableProperty(str(ch[2]), ch[3], ch[1] is not None, ch[0], pos=pos))

    # ---- statements
    def block(self, pos, ch):
        return ast.Block([c for c in ch if not isinstance(c, ast.Empty)], pos=pos)

    def annotated_block(self, pos, ch):
        return ch[1]                         # @atomic and the like change nothing here

    def empty_statement(self, pos, ch):
        return ast.Empty(pos=pos)

    def var_decl(self, pos, ch):
        return ast.VarDecl(ch[1], ch[2], ch[3], ch[0], pos=pos)

    def assignment(self, pos, ch):
        return ast.Assign(ch[0], ch[1], pos=pos)

    def compound_assignment(self, pos, ch):
        """`lv op= e` is `lv = lv op e` with lv evaluated once: the Binary's left operand is
        the lhs node itself (frontend/effects.py keeps a side-effecting index single)."""
        lhs, op, rhs = ch[0], ch[1].value[:-1], ch[2]
        return ast.Assign(lhs, ast.Binary(op, lhs, rhs, pos=pos), pos=pos)

    def for_statement(self, pos, ch):
        return ast.For(ch[2] or [], ch[3], ch[4] or [], ch[5], pos=pos)

    def for_inits(self, pos, ch):
        return list(ch)

    for_updates = for_inits

    def for_var_decl(self, pos, ch):
        return ast.VarDecl(ch[1], ch[2], ch[3], ch[0], pos=pos)

    def for_assignment(self, pos, ch):
        return ast.Assign(ch[0], ch[1], pos=pos)

    for_compound_assignment = compound_assignment

    def for_call(self, pos, ch):
        return ast.CallStmt(ast.Call(ch[0], ch[2] or [], ch[1] or [], pos=pos), pos=pos)

    def for_in_statement(self, pos, ch):
        var = ast.VarDecl(ch[3], ch[4], None, ch[2], pos=pos)
        return ast.ForIn(var, ch[6], ch[7], pos=pos)

    def for_range(self, pos, ch):
        return ast.Range(ch[0], ch[2], pos=pos)

    def break_statement(self, pos, ch):
        return ast.Break(pos=pos)

    def continue_statement(self, pos, ch):
        return ast.Continue(pos=pos)

    def call_statement(self, pos, ch):
        return ast.CallStmt(ast.Call(ch[0], ch[2] or [], ch[1] or [], pos=pos), pos=pos)

    def if_statement(self, pos, ch):
        return ast.If(ch[1], ch[2], ch[4], pos=pos)

    def return_statement(self, pos, ch):
        return ast.Return(ch[1], pos=pos)

    def exit_statement(self, pos, ch):
        return ast.Exit(pos=pos)

    def switch_statement(self, pos, ch):
        return ast.Switch(ch[1], list(ch[2:]), pos=pos)

    def switch_case(self, pos, ch):
        label = None if isinstance(ch[0], ast.DefaultKey) else ch[0]
        return ast.SwitchCase(label, ch[1], pos=pos)

    def default_label(self, pos, ch):
        return ast.DefaultKey(pos=pos)

    # ---- expressions
    def expression_list(self, pos, ch):
        return list(ch)

    def args(self, pos, ch):
        return list(ch)

    def dont_care_arg(self, pos, ch):
        return ast.DontCare(pos=pos)

    def name_ref(self, pos, ch):
        return ast.NameRef(ch[0], pos=pos)

    def member(self, pos, ch):
        return ast.Member(ch[0], ch[1], pos=pos)

    def index(self, pos, ch):
        return ast.Index(ch[0], ch[1], pos=pos)

    def slice(self, pos, ch):
        return ast.Slice(ch[0], ch[1], ch[2], pos=pos)

    def call(self, pos, ch):
        return ast.Call(ch[0], ch[1] or [], pos=pos)

    def generic_call(self, pos, ch):
        return ast.Call(ch[0], ch[2] or [], ch[1], pos=pos)

    def integer(self, pos, ch):
        value, width, signed = parse_int(ch[0].value)
        return ast.IntLit(value, width, signed, pos=pos)

    def true(self, pos, ch):
        return ast.BoolLit(True, pos=pos)

    def false(self, pos, ch):
        return ast.BoolLit(False, pos=pos)

    def string(self, pos, ch):
        raw = ch[0].value[1:-1]
        return ast.StrLit(raw.encode().decode("unicode_escape"), pos=pos)

    def list_expr(self, pos, ch):
        return ast.ListExpr(list(ch[0] or []), pos=pos)

    def struct_expr(self, pos, ch):
        pairs = [c for c in ch if c is not None]
        return ast.StructExpr([n for n, _ in pairs], [e for _, e in pairs], pos=pos)

    def named_expr(self, pos, ch):
        return (ch[0], ch[1])

    def type_member(self, pos, ch):
        return ast.TypeMember(str(ch[0]), ch[1], pos=pos)

    def error_member(self, pos, ch):
        return ast.TypeMember("error", ch[1], pos=pos)

    def constructor(self, pos, ch):
        return ast.Constructor(ch[0], ch[1] or [], pos=pos)

    def cond(self, pos, ch):
        return ast.Cond(ch[0], ch[1], ch[2], pos=pos)

    def binop(self, pos, ch):
        return ast.Binary(ch[1].value, ch[0], ch[2], pos=pos)

    def _bin(op):
        def build(self, pos, ch):
            ch = _drop_tokens(ch)
            return ast.Binary(op, ch[0], ch[1], pos=pos)
        return build

    lt = _bin("<")
    gt = _bin(">")
    bor = _bin("|")
    bxor = _bin("^")
    band = _bin("&")
    shr = _bin(">>")

    def lnot(self, pos, ch):
        return ast.Unary("!", ch[0], pos=pos)

    def bnot(self, pos, ch):
        return ast.Unary("~", ch[0], pos=pos)

    def neg(self, pos, ch):
        return ast.Unary("-", ch[1], pos=pos)

    def cast(self, pos, ch):
        return ast.Cast(ch[0], ch[1], pos=pos)
