"""The `where` language: a small SQL-like filter parsed into a pyarrow compute expression.

User text is tokenized and parsed by hand (recursive descent); nothing is ever
evaluated as Python. Grammar (keywords are case-insensitive)::

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

A bare operand is a predicate only when it is a boolean column. Comparisons
with null follow SQL: a row whose condition is null is not selected.
Columns are checked against the source's schema when the expression is
compiled: unknown names and mismatched types fail with the position.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from typing import Any

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
        kind = m.lastgroup
        if kind != "ws":
            word = m.group()
            if kind == "name" and word.lower() in KEYWORDS:
                out.append(Token("kw", word.lower(), pos))
            else:
                out.append(Token(kind, word, pos))
        pos = m.end()
    out.append(Token("end", "", len(text)))
    return out


# -- syntax tree -------------------------------------------------------------------------------------
@dataclass
class Col:
    name: str
    pos: int


@dataclass
class Lit:
    kind: str  # number, string, timestamp, date, bool
    value: Any
    pos: int


@dataclass
class Cmp:
    op: str
    left: Col | Lit
    right: Col | Lit
    pos: int


@dataclass
class In:
    operand: Col | Lit
    values: list[Lit]
    negated: bool
    pos: int


@dataclass
class Between:
    operand: Col | Lit
    low: Col | Lit
    high: Col | Lit
    negated: bool
    pos: int


@dataclass
class IsNull:
    operand: Col | Lit
    negated: bool
    pos: int


@dataclass
class BoolCol:
    col: Col


@dataclass
class Not:
    inner: Any
    pos: int


@dataclass
class BoolOp:
    op: str  # and / or
    parts: list
    pos: int


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

    def parse(self):
        if self.tok.kind == "end":
            raise QueryError("the expression is empty", self.text, 0, "e.g. --where 'humidity > 50'")
        node = self.or_expr()
        if self.tok.kind != "end":
            raise self.error("expected 'and', 'or' or the end of the expression")
        return node

    def or_expr(self):
        pos = self.tok.pos
        parts = [self.and_expr()]
        while self.is_kw("or"):
            self.take()
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else BoolOp("or", parts, pos)

    def and_expr(self):
        pos = self.tok.pos
        parts = [self.not_expr()]
        while self.is_kw("and"):
            self.take()
            parts.append(self.not_expr())
        return parts[0] if len(parts) == 1 else BoolOp("and", parts, pos)

    def not_expr(self):
        if self.is_kw("not"):
            pos = self.take().pos
            return Not(self.not_expr(), pos)
        return self.predicate()

    def predicate(self):
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

    def operand(self) -> Col | Lit:
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
            value = _parse_time(s.value, tok.text, self.text, s.pos)
            return Lit(tok.text, value, tok.pos)
        if tok.kind == "kw" and tok.text == "null":
            raise self.error("null cannot be compared", todo="use 'is null' or 'is not null'")
        raise self.error("expected a column name or a value")


def _parse_time(value: str, kind: str, text: str, pos: int):
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


def parse(text: str):
    """The syntax tree of `text` (no schema needed: syntax errors only)."""
    return _Parser(text).parse()


def columns_of(node) -> list[tuple[str, int]]:
    """Every column the tree names, with the position of its first use, in order."""
    seen: dict[str, int] = {}

    def walk(n) -> None:
        if isinstance(n, Col):
            seen.setdefault(n.name, n.pos)
        elif isinstance(n, Cmp):
            walk(n.left)
            walk(n.right)
        elif isinstance(n, In):
            walk(n.operand)
        elif isinstance(n, Between):
            walk(n.operand)
            walk(n.low)
            walk(n.high)
        elif isinstance(n, IsNull):
            walk(n.operand)
        elif isinstance(n, BoolCol):
            walk(n.col)
        elif isinstance(n, Not):
            walk(n.inner)
        elif isinstance(n, BoolOp):
            for p in n.parts:
                walk(p)

    walk(node)
    return list(seen.items())


# -- compilation against a schema -------------------------------------------------------------------------
def _kind_of_type(t) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return "string"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_boolean(t):
        return "bool"
    return str(t)


_KIND_WORDS = {
    "number": "a number",
    "string": "a string",
    "timestamp": "a timestamp",
    "date": "a date",
    "bool": "a boolean",
}


class _Compiler:
    def __init__(self, text: str, schema) -> None:
        self.text = text
        self.schema = schema
        self.names = list(schema.names)

    def fail(self, what: str, pos: int, todo: str = "") -> QueryError:
        return QueryError(what, self.text, pos, todo)

    def col_type(self, col: Col):
        if col.name not in self.names:
            known = ", ".join(self.names[:20]) + (", ..." if len(self.names) > 20 else "")
            raise self.fail(f"unknown column {col.name!r}", col.pos, f"columns are: {known}")
        return self.schema.field(col.name).type

    def kind(self, operand: Col | Lit) -> str:
        return _kind_of_type(self.col_type(operand)) if isinstance(operand, Col) else operand.kind

    def compile(self, node):
        import pyarrow.compute as pc

        if isinstance(node, BoolOp):
            parts = [self.compile(p) for p in node.parts]
            out = parts[0]
            for p in parts[1:]:
                out = (out & p) if node.op == "and" else (out | p)
            return out
        if isinstance(node, Not):
            return ~self.compile(node.inner)
        if isinstance(node, BoolCol):
            t = self.col_type(node.col)
            if _kind_of_type(t) != "bool":
                raise self.fail(
                    f"column {node.col.name!r} ({t}) is not a condition by itself",
                    node.col.pos,
                    "compare it with a value, e.g. name > 0",
                )
            return pc.field(node.col.name)
        if isinstance(node, IsNull):
            e = self.value(node.operand, None)
            return ~e.is_null() if node.negated else e.is_null()
        if isinstance(node, Cmp):
            lk, rk = self.kind(node.left), self.kind(node.right)
            self.check_pair(node.left, lk, node.right, rk, node.pos)
            hint = node.left if isinstance(node.left, Col) else node.right
            left, right = self.value(node.left, hint), self.value(node.right, hint)
            return {
                "==": left.__eq__,
                "!=": left.__ne__,
                "<": left.__lt__,
                "<=": left.__le__,
                ">": left.__gt__,
                ">=": left.__ge__,
            }[node.op](right)
        if isinstance(node, Between):
            kinds = [self.kind(x) for x in (node.operand, node.low, node.high)]
            self.check_pair(node.operand, kinds[0], node.low, kinds[1], node.pos)
            self.check_pair(node.operand, kinds[0], node.high, kinds[2], node.pos)
            hint = node.operand if isinstance(node.operand, Col) else None
            v = self.value(node.operand, hint)
            e = (v >= self.value(node.low, hint)) & (v <= self.value(node.high, hint))
            return ~e if node.negated else e
        if isinstance(node, In):
            kind = self.kind(node.operand)
            for lit in node.values:
                self.check_pair(node.operand, kind, lit, lit.kind, lit.pos)
            v = self.value(node.operand, None)
            import pyarrow as pa

            if isinstance(node.operand, Col):
                t = self.col_type(node.operand)
                if pa.types.is_dictionary(t):
                    t = t.value_type
                values = pa.array([self.scalar(lit, node.operand).as_py() for lit in node.values], type=t)
            else:
                values = pa.array([lit.value for lit in node.values])
            e = v.isin(values)
            # SQL: null NOT IN (...) is null, so such rows are not selected either.
            return (~e & ~v.is_null()) if node.negated else e
        raise self.fail("unsupported expression", getattr(node, "pos", 0))

    def check_pair(self, a, ak: str, b, bk: str, pos: int) -> None:
        if ak == bk:
            return
        temporal = {"timestamp", "date"}
        # A quoted string next to a time column is read as that time (as SQL engines do).
        if ak in temporal and (bk in temporal or (bk == "string" and isinstance(b, Lit))):
            return
        if bk in temporal and ak == "string" and isinstance(a, Lit):
            return
        bad = b if isinstance(b, Lit) or not isinstance(a, Lit) else a

        def describe(x, k):
            return f"column {x.name!r} ({self.col_type(x)})" if isinstance(x, Col) else _KIND_WORDS.get(k, k)

        raise self.fail(
            f"cannot compare {describe(a, ak)} with {describe(b, bk)}", bad.pos, "use a value of the column's type"
        )

    def scalar(self, lit: Lit, hint: Col | Lit | None):
        """The literal as an Arrow scalar of the hinted column's type (so no column is cast per row)."""
        import pyarrow as pa

        if not isinstance(hint, Col):
            return pa.scalar(lit.value)
        t = self.col_type(hint)
        if pa.types.is_dictionary(t):
            t = t.value_type
        value = lit.value
        kind = _kind_of_type(t)
        if kind in ("timestamp", "date") and lit.kind == "string":
            value = _parse_time(
                value, "date" if kind == "date" and len(value.strip()) <= 10 else "timestamp", self.text, lit.pos
            )
        if kind == "timestamp":
            if isinstance(value, _dt.datetime):
                value = _align_tz(value, t.tz)
            elif isinstance(value, _dt.date):
                value = _align_tz(_dt.datetime(value.year, value.month, value.day), t.tz)
        if kind == "date" and isinstance(value, _dt.datetime):
            # Comparing a date column with a timestamp: compare on the timestamp's axis.
            return pa.scalar(value)
        if kind == "number" and pa.types.is_integer(t) and isinstance(value, float):
            return pa.scalar(value)  # 2.5 against an int column: keep the fraction, compare as float
        try:
            return pa.scalar(value, type=t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
            if kind == "number" and lit.kind == "number":
                return pa.scalar(value)  # out of the column's range: compare in a wider type

            raise self.fail(f"value {lit.value!r} does not fit column {hint.name!r} ({t}): {exc}", lit.pos) from None

    def value(self, operand: Col | Lit, hint: Col | Lit | None):
        import pyarrow.compute as pc

        if isinstance(operand, Col):
            self.col_type(operand)
            return pc.field(operand.name)
        return pc.scalar(self.scalar(operand, hint))


def _align_tz(value: _dt.datetime, tz: str | None) -> _dt.datetime:
    """Naive literals mean UTC for a zoned column; zoned literals are converted to UTC for a naive one."""
    if tz:
        return value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
    if value.tzinfo:
        return value.astimezone(_dt.UTC).replace(tzinfo=None)
    return value


@dataclass
class Where:
    """A parsed `where`; compile() checks it against a schema and returns the pyarrow expression."""

    text: str
    tree: Any

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
                known = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
                raise QueryError(f"unknown column {name!r}", self.text, pos, f"columns are: {known}")

    def compile(self, schema):
        return _Compiler(self.text, schema).compile(self.tree)


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
