"""The words of the `where` language: tokens, and the error that points at one.

User text is cut into tokens by one regular expression; nothing is ever
evaluated as Python. Keywords are case-insensitive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

KEYWORDS = {"and", "or", "not", "in", "between", "is", "null", "true", "false", "timestamp", "date"}
CMP_OPS = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<number>[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
      | (?P<string>'(?:[^']|'')*')
      | (?P<qname>"(?:[^"]|"")+")
      | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
      | (?P<op><=|>=|<>|!=|==|=|<|>)
      | (?P<punct>[(),])
    """,
    re.VERBOSE,
)


class QueryError(UsageError):
    """A bad `where` or `select`: one line of text plus the expression with a caret under the spot."""

    def __init__(self, what: str, text: str, pos: int, todo: str = "") -> None:
        self.text, self.pos = text, pos
        super().__init__(f"bad where expression at character {pos + 1}: {what}", "", todo)

    @property
    def caret(self) -> str:
        """Two lines: the expression and a caret under the offending character."""
        flat = self.text.replace("\n", " ").replace("\t", " ")
        return f"  {flat}\n  {' ' * self.pos}^"


@dataclass(frozen=True)
class Token:
    kind: str  # number, string, name, qname, op, punct, kw, end
    text: str
    pos: int

    @property
    def value(self) -> str:
        if self.kind == "string":
            return self.text[1:-1].replace("''", "'")
        if self.kind == "qname":
            return self.text[1:-1].replace('""', '"')
        return self.text


def tokenize(text: str) -> list[Token]:
    """The tokens of `text`, then an `end` token; QueryError at a character no token starts with."""
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            if ch == "'":
                raise QueryError("string literal is not closed", text, pos, "close it with ' (write '' for a quote)")
            if ch == '"':
                raise QueryError("quoted column name is not closed", text, pos, 'close it with "')
            raise QueryError(f"unexpected character {ch!r}", text, pos)
        kind = m.lastgroup  # None only for a match outside every named group, and _TOKEN has no such part
        if kind is not None and kind != "ws":
            word = m.group()
            if kind == "name" and word.lower() in KEYWORDS:
                out.append(Token("kw", word.lower(), pos))
            else:
                out.append(Token(kind, word, pos))
        pos = m.end()
    out.append(Token("end", "", len(text)))
    return out


__all__ = ["CMP_OPS", "KEYWORDS", "QueryError", "Token", "tokenize"]
