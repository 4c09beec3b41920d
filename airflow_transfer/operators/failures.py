"""How a task fails on an error of the core: the one mapping every operator and sensor uses.

    try:
        ...core call...
    except TransferError as exc:
        raise task_error(exc) from exc

What a retry cannot fix (an unknown or changed host key, refused credentials, a usage or
configuration error, an unsafe path) fails the task at once with AirflowFailException,
whatever ``retries`` says; the rest (an unreachable host, a lost connection, I/O) is a
RuntimeError that Airflow retries as configured. The message is the core's one line (what
failed, where, what to do) with the "what to do" worded for Airflow: connections, their
extras and operator arguments, never the command line's flags. The core error stays the
cause, so the traceback still reaches the first failure.
"""

from __future__ import annotations

import re
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from ..errors import PERMANENT_ERRORS, TransferError
from ..query.expr import QueryError

FAILURES_LOGGED = 20  # failed files named in the task log; the summary (XCom) has them all

# The "what to do" of the SSH errors, as a task's author acts on it.
HOST_KEY_UNKNOWN = (
    "check the fingerprint with the server's admin, then add the key to the Airflow connection's extra "
    "`host_key` (`ssh-keyscan` prints it) or set its extra `known_hosts` to a file that lists it"
)
HOST_KEY_CHANGED = (
    "if the server was re-keyed on purpose, put its new key in the Airflow connection's extra `host_key`, "
    "or replace the old entry in the `known_hosts` file the connection reads"
)
AUTH_FAILED = (
    "check the Airflow connection's login and its password, or its extra `key_file` / `private_key` "
    "(and `private_key_passphrase`)"
)

# Command-line flags that are connection settings (or Airflow configuration) in a task.
_FLAG_SETTINGS = {
    "known-hosts": "the connection's extra `known_hosts`",
    "identity": "the connection's extra `key_file`",
    "stall-timeout": "the connection's extra `stall_timeout`",
    "ssh-client": "the connection's extra `ssh_client`",
    "ssh-config": "the worker's ~/.ssh/config",
    "store": "[airflow_transfer] store_url",
}
# --flag, with the value an example gives it ("--verify none", "--progress-interval 5")
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(?: (none|FILE|\d[\w.]*))?")


def task_error(exc: TransferError) -> Exception:
    """The exception a task raises for ``exc``: AirflowFailException (no retry) for a permanent
    error, else a RuntimeError; a bad ``where`` / ``select`` gets the expression and a caret
    under the bad spot on a second line.

    ``exc`` itself is reworded for Airflow too: the task log prints it below as the cause."""
    exc.what, exc.todo = airflow_words(exc)
    exc.args = (exc.message,)
    message = exc.message
    if isinstance(exc, QueryError):
        message = f"{message}\n{exc.caret}"
    if isinstance(exc, PERMANENT_ERRORS):
        return AirflowFailException(message)
    return RuntimeError(message)


def airflow_words(exc: TransferError) -> tuple[str, str]:
    """``exc``'s what and what-to-do as a task's author acts on them: Airflow connections, their
    extras and operator arguments (the store keeps these for the UI: CopyRequest.reword)."""
    todo = exc.todo
    if exc.kind == "host_key" and "pinned" not in exc.what:  # a pinned key's hint already names the extra
        todo = HOST_KEY_CHANGED if "CHANGED" in exc.what else HOST_KEY_UNKNOWN
    elif exc.kind == "auth":
        todo = AUTH_FAILED
    return operator_words(exc.what), operator_words(todo)


def operator_words(text: str) -> str:
    """``text`` with each command-line flag as the operator argument or connection setting it is."""

    def setting(match: re.Match[str]) -> str:
        flag, value = match.group(1), match.group(2)
        if flag in _FLAG_SETTINGS:
            return _FLAG_SETTINGS[flag]
        name = flag.replace("-", "_")
        if value is None or value == "FILE":
            return f"`{name}`"
        return f"`{name}={'None' if value == 'none' else value}`"

    return _FLAG.sub(setting, text)


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
