"""The syntax tree of a `where` expression, and what can be read from it without a schema."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    left: Operand
    right: Operand
    pos: int


@dataclass
class In:
    operand: Operand
    values: list[Lit]
    negated: bool
    pos: int


@dataclass
class Between:
    operand: Operand
    low: Operand
    high: Operand
    negated: bool
    pos: int


@dataclass
class IsNull:
    operand: Operand
    negated: bool
    pos: int


@dataclass
class BoolCol:
    col: Col


@dataclass
class Not:
    inner: Node
    pos: int


@dataclass
class BoolOp:
    op: str  # and / or
    parts: list[Node]
    pos: int


Operand = Col | Lit  # either side of a comparison
Node = Cmp | In | Between | IsNull | BoolCol | Not | BoolOp  # a condition: what a tree and its branches are


# The branches of each node that can name a column, in reading order; a BoolOp's are its parts.
_BRANCHES: dict[type, tuple[str, ...]] = {
    Cmp: ("left", "right"),
    In: ("operand",),
    Between: ("operand", "low", "high"),
    IsNull: ("operand",),
    BoolCol: ("col",),
    Not: ("inner",),
}


def columns_of(node: Node) -> list[tuple[str, int]]:
    """Every column the tree names, with the position of its first use, in order."""
    seen: dict[str, int] = {}

    def walk(n: Node | Operand) -> None:
        if isinstance(n, Col):
            seen.setdefault(n.name, n.pos)
            return
        branches = n.parts if isinstance(n, BoolOp) else [getattr(n, name) for name in _BRANCHES.get(type(n), ())]
        for branch in branches:
            walk(branch)

    walk(node)
    return list(seen.items())


def known_columns(names: list[str]) -> str:
    """What to do about an unknown column: the source's names (the first 20 of them)."""
    return "columns are: " + ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")


__all__ = [
    "Between",
    "BoolCol",
    "BoolOp",
    "Cmp",
    "Col",
    "In",
    "IsNull",
    "Lit",
    "Node",
    "Not",
    "Operand",
    "columns_of",
    "known_columns",
]
