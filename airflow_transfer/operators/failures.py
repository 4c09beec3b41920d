"""How a task fails on an error of the core: the one mapping every operator and sensor uses.

    try:
        ...core call...
    except TransferError as exc:
        raise task_error(exc) from exc

The task log shows the one-line message (what failed, where, what to do) and, below it,
the core error it came from with its own cause (the OSError, the server's reply), so the
traceback still reaches the first failure.
"""

from __future__ import annotations

from ..errors import TransferError
from ..query.expr import QueryError


def task_error(exc: TransferError) -> Exception:
    """The exception a task raises for `exc`: a ValueError with the expression and a caret under
    the bad spot for a bad ``where`` / ``select``, else a RuntimeError with the one-line message."""
    if isinstance(exc, QueryError):
        return ValueError(f"{exc.message}\n{exc.caret}")
    return RuntimeError(exc.message)
