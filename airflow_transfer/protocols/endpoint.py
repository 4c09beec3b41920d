"""Endpoints: a URL (sftp://, file://, plain path) resolved to something the engine can use."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..errors import UsageError
from .ssh import SSHTarget

SUPPORTED = ("file", "sftp", "ftp", "http", "https", "any")  # + the fsspec protocols below

# Schemes that go through fsspec when the URL names them (anything fsspec knows also works).
FSSPEC_SCHEMES = ("s3", "s3a", "gs", "gcs", "memory", "abfs", "az", "hdfs", "webhdfs")


@dataclass
class Endpoint:
    scheme: str  # "file", "sftp", "ftp", "http", "https", or an fsspec protocol
    path: str  # the root: a directory (or a single file) on that host
    target: SSHTarget | None = None  # set for sftp
    host: str | None = None  # ftp/http(s)
    port: int | None = None
    user: str | None = None
    options: dict | None = None  # fsspec storage options

    @property
    def display(self) -> str:
        if self.scheme == "file":
            return self.path
        if self.scheme == "sftp" and self.target is not None:
            return f"sftp://{self.target.display}{self.path}"
        if self.scheme == "replicas" and self.options is not None:
            return "replicas:" + "+".join(r.display for r in self.options["set"].replicas)
        if self.host:
            user = f"{self.user}@" if self.user else ""
            port = f":{self.port}" if self.port else ""
            return f"{self.scheme}://{user}{self.host}{port}{self.path}"
        return f"{self.scheme}://{self.path.lstrip('/')}"

    @property
    def host_label(self) -> str:
        if self.target:
            return self.target.host
        return self.host or ("localhost" if self.scheme == "file" else self.scheme)


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
    parsed = _split(url)
    if any("\x00" in (part or "") for part in (parsed.path, parsed.host, parsed.user)):
        # No file system or server takes a NUL in a name (also as %00): os calls would fail far from here.
        raise UsageError("NUL character in source or destination", repr(parsed.path), "remove it from the path")
    return parsed


def _split(url: str) -> ParsedURL:
    if not url:
        raise UsageError("empty source or destination", "", "give a path or an sftp:// URL")
    if "://" not in url:
        return ParsedURL("file", None, None, None, os.path.abspath(url))
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # unbalanced or invalid [IPv6] brackets
        raise UsageError(f"malformed URL: {exc}", url, "write IPv6 hosts as sftp://[::1]:22/path") from exc
    scheme = parts.scheme.lower()
    if scheme in FSSPEC_SCHEMES:
        # s3://bucket/key -> path "/bucket/key"; memory://a/b -> "/a/b"
        return ParsedURL(scheme, None, None, None, "/" + (parts.netloc + unquote(parts.path)).strip("/"))
    if scheme not in SUPPORTED:
        raise UsageError(
            f"unsupported URL scheme {scheme!r}",
            url,
            f"use one of: {', '.join(s + '://' for s in SUPPORTED)} or a plain path",
        )
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise UsageError("file:// URLs name a local path", url, "use file:///absolute/path")
        return ParsedURL("file", None, None, None, os.path.abspath(unquote(parts.path) or "/"))
    if parts.password is not None:
        raise UsageError(
            "passwords in URLs are not accepted",
            parts.netloc.rsplit("@", 1)[-1],
            "use a key (--identity) or an Airflow connection",
        )
    try:
        hostname = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"bad host or port in URL: {exc}", url, f"use {scheme}://host:PORT/path") from exc
    if not hostname:
        raise UsageError(f"{scheme} URL without a host", url, f"use {scheme}://[user@]host[:port]/path")
    if port == 0:  # would silently mean the default port further on
        raise UsageError("port 0 in URL", url, "give the server's port (1-65535) or leave it out")
    path = unquote(parts.path) or "."
    # sftp://host/~/data or sftp://host/data/ -> path as given; "." means the login directory.
    if path.startswith("/~/"):
        path = path[3:] or "."
    if scheme != "sftp":
        return ParsedURL(
            scheme, hostname, port, unquote(parts.username) if parts.username else None, unquote(parts.path) or "/"
        )
    return ParsedURL("sftp", hostname, port, unquote(parts.username) if parts.username else None, path)
