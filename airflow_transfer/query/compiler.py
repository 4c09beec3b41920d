"""A type-checked `where` tree compiled into a pyarrow compute expression.

Literals become Arrow scalars of the column they are compared with, so no
column is cast per row; comparisons with null follow SQL (a row whose
condition is null is not selected).
"""

from __future__ import annotations

import datetime as _dt

import pyarrow as pa
import pyarrow.compute as pc

from .parser import parse_time
from .syntax import Between, BoolCol, BoolOp, Cmp, Col, In, IsNull, Lit, Node, Not, Operand
from .typecheck import TypeChecker, kind_of_type


class Compiler(TypeChecker):
    """Compiles a tree against `schema`, type-checking each comparison on the way."""

    def compile(self, node: Node) -> pc.Expression:
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
            if kind_of_type(t) != "bool":
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
            hint: Operand | None = node.left if isinstance(node.left, Col) else node.right
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

    def scalar(self, lit: Lit, hint: Operand | None) -> pa.Scalar:
        """The literal as an Arrow scalar of the hinted column's type (so no column is cast per row)."""
        if not isinstance(hint, Col):
            return pa.scalar(lit.value)
        t = self.col_type(hint)
        if pa.types.is_dictionary(t):
            t = t.value_type
        value = lit.value
        kind = kind_of_type(t)
        if kind in ("timestamp", "date") and lit.kind == "string":
            value = parse_time(
                value, "date" if kind == "date" and len(value.strip()) <= 10 else "timestamp", self.text, lit.pos
            )
        if kind == "timestamp":
            if isinstance(value, _dt.datetime):
                value = align_tz(value, t.tz)
            elif isinstance(value, _dt.date):
                value = align_tz(_dt.datetime(value.year, value.month, value.day), t.tz)
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

    def value(self, operand: Operand, hint: Operand | None) -> pc.Expression:
        if isinstance(operand, Col):
            self.col_type(operand)
            return pc.field(operand.name)
        return pc.scalar(self.scalar(operand, hint))


def align_tz(value: _dt.datetime, tz: str | None) -> _dt.datetime:
    """Naive literals mean UTC for a zoned column; zoned literals are converted to UTC for a naive one."""
    if tz:
        return value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
    if value.tzinfo:
        return value.astimezone(_dt.UTC).replace(tzinfo=None)
    return value


def compile_where(text: str, tree: Node, schema: pa.Schema) -> pc.Expression:
    """The pyarrow expression of `tree` (parsed from `text`) over columns of `schema`."""
    return Compiler(text, schema).compile(tree)


__all__ = ["Compiler", "compile_where"]
