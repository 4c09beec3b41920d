"""The `where` language's parser: tokens to a syntax tree, by hand (recursive descent).

Grammar (keywords are case-insensitive)::

    expr       := or_expr
    or_expr    := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | predicate
    predicate  := "(" expr ")"
                | operand [ CMP operand
                          | ["not"] "in" "(" literal ("," literal)* ")"
                          | ["not"] "between" operand "and" operand
                          | "is" ["not"] "null" ]
    operand    := column | literal
    column     := NAME | "double-quoted name"
    literal    := NUMBER | 'string' | timestamp 'ISO-8601' | date 'YYYY-MM-DD' | true | false
    CMP        := = | == | != | <> | < | <= | > | >=

A bare operand is a predicate only when it is a boolean column (checked when
the tree is compiled against a schema). Only syntax is checked here.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable

from .lexer import CMP_OPS, QueryError, Token, tokenize
from .syntax import Between, BoolCol, BoolOp, Cmp, Col, In, IsNull, Lit, Node, Not, Operand


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def is_kw(self, word: str) -> bool:
        return self.tok.kind == "kw" and self.tok.text == word

    def expect_punct(self, ch: str, what: str) -> Token:
        if self.tok.kind == "punct" and self.tok.text == ch:
            return self.take()
        raise self.error(f"expected {what}")

    def error(self, what: str, tok: Token | None = None, todo: str = "") -> QueryError:
        tok = tok or self.tok
        found = "the end of the expression" if tok.kind == "end" else repr(tok.text)
        return QueryError(f"{what}, found {found}", self.text, tok.pos, todo)

    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise QueryError("the expression is empty", self.text, 0, "e.g. --where 'humidity > 50'")
        node = self.or_expr()
        if self.tok.kind != "end":
            raise self.error("expected 'and', 'or' or the end of the expression")
        return node

    def or_expr(self) -> Node:
        return self.joined("or", self.and_expr)

    def and_expr(self) -> Node:
        return self.joined("and", self.not_expr)

    def joined(self, op: str, part: Callable[[], Node]) -> Node:
        """`part (op part)*`: one part alone, or all of them under one BoolOp."""
        pos = self.tok.pos
        parts = [part()]
        while self.is_kw(op):
            self.take()
            parts.append(part())
        return parts[0] if len(parts) == 1 else BoolOp(op, parts, pos)

    def not_expr(self) -> Node:
        if self.is_kw("not"):
            pos = self.take().pos
            return Not(self.not_expr(), pos)
        return self.predicate()

    def predicate(self) -> Node:
        if self.tok.kind == "punct" and self.tok.text == "(":
            self.take()
            node = self.or_expr()
            self.expect_punct(")", "')' to close the parenthesis")
            return node
        left = self.operand()
        tok = self.tok
        if tok.kind == "op":
            self.take()
            return Cmp(CMP_OPS[tok.text], left, self.operand(), tok.pos)
        negated = False
        if self.is_kw("not"):
            nxt = self.toks[self.i + 1]
            if nxt.kind == "kw" and nxt.text in ("in", "between"):
                self.take()
                negated = True
            else:
                raise self.error("expected 'in' or 'between' after 'not'", nxt)
        if self.is_kw("in"):
            pos = self.take().pos
            self.expect_punct("(", "'(' to start the list of values")
            values = [self.literal()]
            while self.tok.kind == "punct" and self.tok.text == ",":
                self.take()
                values.append(self.literal())
            self.expect_punct(")", "',' or ')' in the list of values")
            return In(left, values, negated, pos)
        if self.is_kw("between"):
            pos = self.take().pos
            low = self.operand()
            if not self.is_kw("and"):
                raise self.error("expected 'and' in 'between LOW and HIGH'")
            self.take()
            return Between(left, low, self.operand(), negated, pos)
        if self.is_kw("is"):
            pos = self.take().pos
            neg = False
            if self.is_kw("not"):
                self.take()
                neg = True
            if not self.is_kw("null"):
                raise self.error("expected 'null' after 'is'" + (" not" if neg else ""))
            self.take()
            return IsNull(left, neg, pos)
        if isinstance(left, Col):
            return BoolCol(left)  # checked for a boolean type at compile time
        raise self.error("expected a comparison after the value (=, !=, <, <=, >, >=, in, between, is null)")

    def operand(self) -> Operand:
        tok = self.tok
        if tok.kind in ("name", "qname"):
            self.take()
            return Col(tok.value, tok.pos)
        return self.literal()

    def literal(self) -> Lit:
        tok = self.tok
        if tok.kind == "number":
            self.take()
            text = tok.text
            is_int = re.fullmatch(r"[+-]?\d+", text) is not None
            return Lit("number", int(text) if is_int else float(text), tok.pos)
        if tok.kind == "string":
            self.take()
            return Lit("string", tok.value, tok.pos)
        if tok.kind == "kw" and tok.text in ("true", "false"):
            self.take()
            return Lit("bool", tok.text == "true", tok.pos)
        if tok.kind == "kw" and tok.text in ("timestamp", "date"):
            self.take()
            if self.tok.kind != "string":
                raise self.error(f"expected a quoted value after {tok.text}", todo=f"e.g. {tok.text} '2020-01-31'")
            s = self.take()
            value = parse_time(s.value, tok.text, self.text, s.pos)
            return Lit(tok.text, value, tok.pos)
        if tok.kind == "kw" and tok.text == "null":
            raise self.error("null cannot be compared", todo="use 'is null' or 'is not null'")
        raise self.error("expected a column name or a value")


def parse_time(value: str, kind: str, text: str, pos: int) -> _dt.date:
    """A date or timestamp literal (ISO 8601; a trailing Z is UTC); QueryError at `pos` otherwise."""
    try:
        if kind == "date":
            return _dt.date.fromisoformat(value)
        v = value.strip()
        if v.endswith(("Z", "z")):
            v = v[:-1] + "+00:00"
        return _dt.datetime.fromisoformat(v)
    except ValueError:
        example = "2020-01-31" if kind == "date" else "2020-01-31T12:00:00"
        raise QueryError(
            f"not a valid {kind}: {value!r}", text, pos, f"write it as ISO 8601, e.g. '{example}'"
        ) from None


def parse(text: str) -> Node:
    """The syntax tree of `text` (no schema needed: syntax errors only)."""
    return _Parser(text).parse()


__all__ = ["parse", "parse_time"]
