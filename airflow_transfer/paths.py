"""Names from listings are untrusted: keep every path inside its root."""

from __future__ import annotations

import posixpath
import re

from .errors import UnsafePathError

# C0 controls and DEL. A regex, not a per-character loop: every file's name passes here up to
# three times (listing, manifest, session), which for 100,000 files cost seconds.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Anything check_relative refuses, in one search: a control character, a leading '/', or an
# empty, '.' or '..' component (the empty name included). Names it does not match are safe.
# Also run over a whole manifest column by Arrow's own regex engine (RE2, same meaning here).
UNSAFE_NAME = r"[\x00-\x1f\x7f]|^/|(?:^|/)\.{0,2}(?:/|$)"
_UNSAFE = re.compile(UNSAFE_NAME)


def check_relative(name: str, where: str = "") -> str:
    """Return `name` if it is a safe relative POSIX path, else raise UnsafePathError.

    Safe means: not empty, not absolute, no '..' or '.' component, no empty
    component, no NUL, newline or other control character (they break logs,
    shells and some servers, and are a classic injection vector).
    """
    if _UNSAFE.search(name) is None:
        return name
    todo = "rename the file at the source or exclude it; nothing outside the destination root is written"
    if not name:
        raise UnsafePathError("empty file name in listing", where, todo)
    if _CONTROL.search(name):
        raise UnsafePathError(f"file name with a control character: {name!r}", where, todo)
    if name.startswith("/"):
        raise UnsafePathError(f"absolute file name in listing: {name!r}", where, todo)
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise UnsafePathError(f"file name escapes its root: {name!r}", where, todo)
    return name


# Linux's PATH_MAX: no server can open a longer path, so a walk that gets deeper is
# following a loop (a server reporting symlinks as directories, or a fake endless tree).
MAX_REMOTE_PATH = 4096
MAX_DEPTH = 256  # directory levels; real datasets stay far below


def check_entry_name(name: str, where: str = "") -> str:
    """A name from one directory listing: one component, never '/' (a server sending one is
    pointing somewhere else)."""
    if "/" in name:
        raise UnsafePathError(
            f"file name with '/' in a directory listing: {name!r}",
            where,
            "rename the file at the source or exclude it; nothing outside the destination root is written",
        )
    return name


def check_walk_depth(path: str, rel: str, where: str = "") -> None:
    """Stop a directory walk that is deeper than any real tree (a loop)."""
    if len(path.encode("utf-8", "surrogateescape")) > MAX_REMOTE_PATH or rel.count("/") >= MAX_DEPTH:
        raise UnsafePathError(
            f"directory tree deeper than {MAX_DEPTH} levels or {MAX_REMOTE_PATH} bytes at {rel[:60]!r}...: "
            "probably a symlink loop the server reports as directories",
            where,
            "exclude that directory or fix the server; nothing was transferred",
        )


def join_inside(root: str, name: str, where: str = "") -> str:
    """Join a checked relative name under a POSIX root."""
    check_relative(name, where)
    joined = posixpath.join(root, name)
    base = root.rstrip("/") or "/"
    if not (joined == base or joined.startswith(base.rstrip("/") + "/")):
        raise UnsafePathError(f"file name escapes its root: {name!r}", where)
    return joined


def join_path(root: str, rel: str) -> str:
    """`rel` under `root` (POSIX on both ends: local paths here and remote ones alike); an
    empty `rel` is the root itself (a single-file copy)."""
    if not rel:
        return root
    # posixpath.join's result for a relative `rel` (checked names never start with '/'),
    # without its per-call work: this runs three times per file.
    return root + rel if not root or root.endswith("/") else f"{root}/{rel}"


def temp_name(final_path: str) -> str:
    """The temporary name a file is written under before its atomic rename.

    Deterministic, so a re-run after a crash overwrites (and then removes by
    renaming) the same temporary file instead of leaving it behind.
    """
    head, sep, tail = final_path.rpartition("/")
    return f"{head}{sep}.{tail}.atpart"


TEMP_SUFFIX = ".atpart"
