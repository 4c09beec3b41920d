"""The `where` language and `--select`: what a query's filter and column list are.

A `where` is a small SQL-like filter (grammar in parser.py)::

    humidity > 50 and station in ('A', 'B') and time between '2020-01-01' and '2020-02-01'

`Where.parse` checks its syntax only, so a DAG or a command line can reject a bad
expression before any data is read; `Where.compile` checks it against the
source's schema (unknown names and mismatched types fail with the position) and
returns the pyarrow expression the readers filter with. The pieces: lexer.py
(tokens, QueryError), syntax.py (the tree), parser.py, typecheck.py, compiler.py.

This module imports no pyarrow: the command line imports it (QueryError) at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .lexer import QueryError, Token, tokenize
from .parser import parse
from .syntax import Node, columns_of, known_columns


@dataclass
class Where:
    """A parsed `where`; compile() checks it against a schema and returns the pyarrow expression."""

    text: str
    tree: Node

    @classmethod
    def parse(cls, text: str) -> Where:
        return cls(text, parse(text))

    @property
    def columns(self) -> list[str]:
        return [name for name, _ in columns_of(self.tree)]

    def check_names(self, names: list[str]) -> None:
        """Unknown columns, before any data is read (CSV sources know their names from the header)."""
        for name, pos in columns_of(self.tree):
            if name not in names:
                raise QueryError(f"unknown column {name!r}", self.text, pos, known_columns(names))

    def compile(self, schema: Any) -> Any:
        """The pyarrow compute expression over columns of `schema` (a pyarrow.Schema)."""
        # heavy: pyarrow with pyarrow.compute costs ~80 ms at import, and this module is imported by
        # the command line at start-up; only a query that runs needs them
        from .compiler import compile_where

        return compile_where(self.text, self.tree, schema)


def parse_select(text: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """`--select a,b,"c d"` (or a list) -> column names; None or '*' -> every column."""
    if text is None:
        return None
    if isinstance(text, (list, tuple)):
        names = [str(n).strip() for n in text]
    else:
        if text.strip() == "*":
            return None
        names = []
        for tok in _split_select(text):
            names.append(tok)
    names = [n for n in names if n]
    if not names:
        raise UsageError("--select names no column", "", "e.g. --select temperature,time (or '*' for all)")
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UsageError(f"--select names {sorted(dup)[0]!r} twice", "", "name each column once")
    return names


def _split_select(text: str) -> list[str]:
    out, cur, quoted, i = [], "", False, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            if quoted and i + 1 < len(text) and text[i + 1] == '"':
                cur += '"'
                i += 2
                continue
            quoted = not quoted
        elif ch == "," and not quoted:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    if quoted:
        raise UsageError("--select has an unclosed quote", text, 'close it with "')
    out.append(cur.strip())
    return out


__all__ = ["QueryError", "Token", "Where", "columns_of", "parse", "parse_select", "tokenize"]
