"""Type checking of a `where` tree against a source's schema: columns exist, and both sides of
every comparison are of kinds that compare (numbers with numbers, times with times or quoted
strings read as times...). Errors point at the offending spot of the expression.
"""

from __future__ import annotations

import pyarrow as pa

from .lexer import QueryError
from .syntax import Col, Lit, Operand, known_columns


def kind_of_type(t: pa.DataType) -> str:
    """What a column's Arrow type compares as: number, string, timestamp, date, bool, or the type's name."""
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


KIND_WORDS = {
    "number": "a number",
    "string": "a string",
    "timestamp": "a timestamp",
    "date": "a date",
    "bool": "a boolean",
}


class TypeChecker:
    """A tree's columns and comparisons checked against `schema` (a pyarrow.Schema)."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.schema = schema
        self.names = list(schema.names)

    def fail(self, what: str, pos: int, todo: str = "") -> QueryError:
        return QueryError(what, self.text, pos, todo)

    def col_type(self, col: Col) -> pa.DataType:
        if col.name not in self.names:
            raise self.fail(f"unknown column {col.name!r}", col.pos, known_columns(self.names))
        return self.schema.field(col.name).type

    def kind(self, operand: Operand) -> str:
        return kind_of_type(self.col_type(operand)) if isinstance(operand, Col) else operand.kind

    def check_pair(self, a: Operand, ak: str, b: Operand, bk: str, pos: int) -> None:
        """Operands `a` and `b`, of kinds `ak` and `bk`, can be compared; QueryError at the odd one out."""
        if ak == bk:
            return
        temporal = {"timestamp", "date"}
        # A quoted string next to a time column is read as that time (as SQL engines do).
        if ak in temporal and (bk in temporal or (bk == "string" and isinstance(b, Lit))):
            return
        if bk in temporal and ak == "string" and isinstance(a, Lit):
            return
        bad = b if isinstance(b, Lit) or not isinstance(a, Lit) else a

        def describe(x: Operand, k: str) -> str:
            return f"column {x.name!r} ({self.col_type(x)})" if isinstance(x, Col) else KIND_WORDS.get(k, k)

        raise self.fail(
            f"cannot compare {describe(a, ak)} with {describe(b, bk)}", bad.pos, "use a value of the column's type"
        )


__all__ = ["KIND_WORDS", "TypeChecker", "kind_of_type"]
