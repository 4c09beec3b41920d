"""Endpoints: a URL (sftp://, file://, plain path) resolved to something the engine can use."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..errors import UsageError
from .ssh import SSHTarget

SUPPORTED = ("file", "sftp")


@dataclass
class Endpoint:
    scheme: str  # "file" or "sftp"
    path: str  # the root: a directory (or a single file) on that host
    target: SSHTarget | None = None  # set for sftp

    @property
    def display(self) -> str:
        if self.scheme == "file":
            return self.path
        return f"sftp://{self.target.display}{self.path}"

    @property
    def host_label(self) -> str:
        return self.target.host if self.target else "localhost"


@dataclass
class ParsedURL:
    scheme: str
    host: str | None
    port: int | None
    user: str | None
    path: str


def parse_url(url: str) -> ParsedURL:
    """Split an endpoint URL; plain paths are local files. Passwords in URLs are refused:
    they would end up in shell history, logs and Airflow's UI."""
    if not url:
        raise UsageError("empty source or destination", "", "give a path or an sftp:// URL")
    if "://" not in url:
        return ParsedURL("file", None, None, None, os.path.abspath(url))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SUPPORTED:
        raise UsageError(f"unsupported URL scheme {scheme!r}", url,
                         f"use one of: {', '.join(s + '://' for s in SUPPORTED)} or a plain path")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UsageError("file:// URLs name a local path", url, "use file:///absolute/path")
        return ParsedURL("file", None, None, None, os.path.abspath(unquote(parts.path) or "/"))
    if parts.password is not None:
        raise UsageError("passwords in URLs are not accepted", parts.hostname or "",
                         "use a key (--identity) or an Airflow connection")
    if not parts.hostname:
        raise UsageError("sftp URL without a host", url, "use sftp://[user@]host[:port]/path")
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"bad port in URL: {exc}", url, "use sftp://host:PORT/path") from exc
    path = unquote(parts.path) or "."
    # sftp://host/~/data or sftp://host/data/ -> path as given; "." means the login directory.
    if path.startswith("/~/"):
        path = path[3:] or "."
    return ParsedURL("sftp", parts.hostname, port, unquote(parts.username) if parts.username else None, path)
