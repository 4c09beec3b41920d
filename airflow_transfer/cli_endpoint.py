"""What every subcommand (cli.py, cmd_*.py) shares: its SRC / DST arguments as Endpoints (the SSH
flags become resolve.SSHOptions, the rest is protocols.resolve), its --json output, and how an
error reads on the terminal and in that JSON."""

from __future__ import annotations

import argparse
import difflib
import errno
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from .errors import AuthError, ConnectError, HostKeyError, TransferError, UnsafePathError, UsageError
from .protocols.endpoint import FSSPEC_SCHEMES, SUPPORTED, Endpoint
from .protocols.resolve import SSHOptions, resolve_endpoint
from .query.lexer import QueryError

SCHEMES = SUPPORTED + FSSPEC_SCHEMES
# A relative "path" whose first component is WORD: or [user@]host: is a URL or an scp-style
# location typed wrong (sftp:/host/x, sftp:host, user@host:/data); taken as a path it would
# become a local directory named "sftp:" and the copy would report success.
_URL_LIKE = re.compile(r"^(?:(?P<user>[^/@:]+)@)?(?P<word>[A-Za-z0-9][A-Za-z0-9+.\-]*):(?P<rest>.*)$", re.S)


def ssh_options(args) -> SSHOptions:
    """--ssh-config, --identity, --known-hosts, --stall-timeout, --ssh-client (those a subcommand has)."""
    return SSHOptions(
        ssh_config=getattr(args, "ssh_config", None),
        identity=getattr(args, "identity", None),
        known_hosts=getattr(args, "known_hosts", None),
        stall_timeout=getattr(args, "stall_timeout", None),
        client=getattr(args, "ssh_client", None),
    )


def check_location(text: str) -> None:
    """A UsageError for a location that is a mistyped URL: an unknown scheme (sfpt://), a scheme
    without its two slashes (sftp:/host/x, sftp:host) or an scp-style host:path. A local name of
    that shape stays reachable as ./name or by its absolute path."""
    if "://" in text:
        scheme, rest = text.split("://", 1)
        if scheme.lower() not in SCHEMES:
            best = _close_scheme(scheme.lower())
            todo = f"did you mean {best}://{rest}?" if best else f"use one of {_KNOWN} or a plain path"
            raise UsageError(f"unknown URL scheme {scheme!r}", text, todo)
        return
    m = _URL_LIKE.match(text)
    if m is None:
        return
    word, rest = m["word"].lower(), m["rest"]
    best = word if word in SCHEMES else _close_scheme(word)
    if m["user"] is None and best is not None:
        raise UsageError(
            f"malformed URL: {m['word']}: must be followed by //",
            text,
            f"write {best}://{rest.lstrip('/')}, or ./{text} for a local path of that name",
        )
    host = f"{m['user']}@{m['word']}" if m["user"] else m["word"]
    path = rest if rest.startswith("/") else "/~/" + rest
    raise UsageError(
        "scp-style HOST:PATH is not a location here",
        text,
        f"write sftp://{host}{path} for a remote path, or ./{text} for a local path of that name",
    )


_KNOWN = ", ".join(s + "://" for s in SUPPORTED)


def _close_scheme(word: str) -> str | None:
    close = difflib.get_close_matches(word, SCHEMES, n=1, cutoff=0.7)
    return close[0] if close else None


def endpoint(url: str, args) -> Endpoint:
    """The Endpoint for a SRC or DST argument. An any:// URL probes through the store given by
    --store; when the command takes --alt-protocol and none was given, the other protocols the
    host offers become args.alt_protocols."""
    check_location(url)
    alternates: list[str] | None = [] if not getattr(args, "alt_protocols", "x") else None
    ep = resolve_endpoint(
        url,
        ssh_options(args),
        store_url=getattr(args, "store", None),
        writable=url == getattr(args, "dst", None),
        alternates=alternates,
    )
    if alternates:
        args.alt_protocols = ",".join(alternates)
    return ep


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def print_json(args: argparse.Namespace, result: Any, *, default: Callable[[Any], Any] | None = None) -> None:
    """With --json, the command's one JSON object on stdout; human output goes to stderr either way.
    Only the first call writes: a command that failed after printing its object prints no second."""
    if getattr(args, "json", False) and not getattr(args, "json_printed", False):
        sys.stdout.write(json.dumps(result, default=default) + "\n")
        sys.stdout.flush()
        args.json_printed = True


# The `type` of an --json error, most specific class first: a stable set (docs/cli.md).
_ERROR_TYPES: tuple[tuple[type[BaseException], str], ...] = (
    (QueryError, "query"),
    (UsageError, "usage"),
    (HostKeyError, "host_key"),
    (AuthError, "auth"),
    (ConnectError, "connect"),
    (UnsafePathError, "unsafe_path"),
    (TransferError, "transfer"),
    (KeyboardInterrupt, "interrupted"),
    (ValueError, "usage"),  # an argument the tuning layer refused
)


def error_object(exc: BaseException, message: str, exit_code: int) -> dict[str, Any]:
    """The `error` of a --json object: `type` (_ERROR_TYPES), the one-line `message`, for the
    project's errors its `what`, `where` and `todo` parts, and the command's `exit_code`."""
    kind = next((name for cls, name in _ERROR_TYPES if isinstance(exc, cls)), "transfer")
    # The store package loads SQLAlchemy and pyarrow, which --help and most usage errors never
    # need: an error can only be a StoreError once that module has been imported.
    store_errors = sys.modules.get("airflow_transfer.store.errors")
    if kind == "transfer" and store_errors is not None and isinstance(exc, store_errors.StoreError):
        kind = "store"
    out: dict[str, Any] = {"type": kind, "message": message}
    if isinstance(exc, TransferError):
        out.update(what=readable_error(exc.what), where=exc.where, todo=exc.todo)
    out["exit_code"] = exit_code
    return out


def failure_json(message: str, error: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one JSON object of a command an error stopped: `base` (the command's own fields, when
    it has a summary shape), `failed` with one entry whose empty path stands for the whole
    command (so `if result["failed"]` holds as for files that failed), and `error`."""
    return {**(base or {}), "failed": [{"path": "", "error": message}], "error": error}


_BANNER = re.compile(
    r"Error reading SSH protocol banner(?:\[Errno (?P<errno>\d+)\] (?P<text>[^();]*?)|(?P<other>[^();]*?))(?=\s*[();]|$)"
)
_ERRNO_WORDS = {
    errno.ECONNRESET: "connection reset",
    errno.ECONNABORTED: "connection aborted",
    errno.EPIPE: "connection broken",
    errno.ETIMEDOUT: "connection timed out",
}


def readable_error(text: str) -> str:
    """`text` with the SSH library's run-together phrases made sentences: paramiko glues the
    socket error to "Error reading SSH protocol banner" ("...banner[Errno 104] Connection reset
    by peer"), which becomes "connection reset while reading the SSH banner (errno 104)"."""

    def banner(m: re.Match[str]) -> str:
        if m["errno"]:
            code = int(m["errno"])
            words = _ERRNO_WORDS.get(code) or m["text"].strip().lower() or "error"
            return f"{words} while reading the SSH banner (errno {code})"
        other = m["other"].strip()
        if not other:
            return "connection closed before the server sent its SSH banner"
        return f"no SSH banner: {other}"

    return _BANNER.sub(banner, text)
