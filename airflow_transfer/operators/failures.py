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

from typing import Any

from ..errors import TransferError
from ..query.expr import QueryError

FAILURES_LOGGED = 20  # failed files named in the task log; the summary (XCom) has them all


def task_error(exc: TransferError) -> Exception:
    """The exception a task raises for `exc`: a ValueError with the expression and a caret under
    the bad spot for a bad ``where`` / ``select``, else a RuntimeError with the one-line message."""
    if isinstance(exc, QueryError):
        return ValueError(f"{exc.message}\n{exc.caret}")
    return RuntimeError(exc.message)


def failed_files_error(summary: dict, *, of: str = "", again: str = "re-run") -> RuntimeError:
    """The task's error when some files of a copy failed: how many, and that running it again finishes."""
    return RuntimeError(
        f"{len(summary['failed'])} of {summary['files']} files{of} failed; "
        f"{again} the task to finish (completed files are kept)"
    )


def fail_on_failed_files(task: Any, context: Any, summary: dict, *, of: str = "", again: str = "re-run") -> None:
    """When files failed: push the summary under the key ``summary`` (the task's return value is
    lost when it fails), log the first failures and fail the task."""
    if not summary["failed"]:
        return
    context["ti"].xcom_push(key="summary", value=summary)
    for f in summary["failed"][:FAILURES_LOGGED]:
        task.log.error("failed %s: %s", f["path"], f["error"])
    raise failed_files_error(summary, of=of, again=again)
