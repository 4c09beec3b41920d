"""Names from listings are untrusted: keep every path inside its root."""

from __future__ import annotations

import posixpath

from .errors import UnsafePathError


def check_relative(name: str, where: str = "") -> str:
    """Return `name` if it is a safe relative POSIX path, else raise UnsafePathError.

    Safe means: not empty, not absolute, no '..' or '.' component, no empty
    component, no NUL, newline or other control character (they break logs,
    shells and some servers, and are a classic injection vector).
    """
    todo = "rename the file at the source or exclude it; nothing outside the destination root is written"
    if not name:
        raise UnsafePathError("empty file name in listing", where, todo)
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UnsafePathError(f"file name with a control character: {name!r}", where, todo)
    if name.startswith("/"):
        raise UnsafePathError(f"absolute file name in listing: {name!r}", where, todo)
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise UnsafePathError(f"file name escapes its root: {name!r}", where, todo)
    return name


def join_inside(root: str, name: str, where: str = "") -> str:
    """Join a checked relative name under a POSIX root."""
    check_relative(name, where)
    joined = posixpath.join(root, name)
    base = root.rstrip("/") or "/"
    if not (joined == base or joined.startswith(base.rstrip("/") + "/")):
        raise UnsafePathError(f"file name escapes its root: {name!r}", where)
    return joined


def temp_name(final_path: str) -> str:
    """The temporary name a file is written under before its atomic rename.

    Deterministic, so a re-run after a crash overwrites (and then removes by
    renaming) the same temporary file instead of leaving it behind.
    """
    head, tail = posixpath.split(final_path)
    return posixpath.join(head, f".{tail}.atpart")


TEMP_SUFFIX = ".atpart"
