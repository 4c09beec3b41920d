"""Checks of operator arguments at DAG parse time: a wrong type or range fails the DAG
import with a ValueError naming the argument, not the task later with a TypeError."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, overload


def templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def whole(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum} (got {value!r})")
    return value


@overload
def number(name: str, value: Any, *, optional: Literal[False] = False, allow_zero: bool = False) -> float: ...
@overload
def number(name: str, value: Any, *, optional: bool, allow_zero: bool = False) -> float | None: ...
def number(name: str, value: Any, *, optional: bool = False, allow_zero: bool = False) -> float | None:
    """A finite number (> 0, or >= 0 with allow_zero): seconds, milliseconds, Mbit/s."""
    if value is None and optional:
        return None
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound} (got {value!r})")
    return float(value)


def choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if templated(value):
        return value
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of: {', '.join(choices)} (got {value!r})")
    return value


def text(name: str, value: Any, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string (got {value!r})")
    return value


def names(name: str, value: Any) -> list[str]:
    """A list of strings; one string is read as a comma-separated list (as on the command line)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{name} must be a list of strings (got {value!r})")
    return list(value)
