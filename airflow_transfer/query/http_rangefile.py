"""Ranged reads over HTTP(S): Range GETs on keep-alive connections.

Prefetched ranges are fetched in parallel, one request per range on `workers`
connections; sequential reads stream one open-ended GET, so TCP keeps the link
full with no request per block. The display name drops the query string and
user info: signed URLs carry secrets there.
"""

from __future__ import annotations

import http.client
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import urlsplit

from ..errors import ConnectError, TransferError, UsageError, describe_oserror
from .rangefile import RangeFile, ReadStats


def safe_url(url: str) -> str:
    """The URL without query string or user info (signed URLs carry secrets there)."""
    p = urlsplit(url)
    host = p.hostname or ""
    port = f":{p.port}" if p.port else ""
    return f"{p.scheme}://{host}{port}{p.path}"


@dataclass
class _Stream:
    """The open-ended GET that sequential reads consume, and the offset it has reached."""

    conn: http.client.HTTPConnection
    response: http.client.HTTPResponse
    position: int


class HTTPRangeFile(RangeFile):
    """Range GETs on keep-alive connections; `workers` connections fetch prefetched ranges in parallel."""

    def __init__(
        self, url: str, stats: ReadStats, workers: int = 4, timeout: float = 60.0, cafile: str | None = None
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError("not an http(s) URL", safe_url(url), "use http://host/path or https://host/path")
        if parts.password is not None:
            raise UsageError("passwords in URLs are not accepted", safe_url(url), "serve the file without them")
        self.url = url
        self._host: str = parts.hostname
        self._port = parts.port
        self._timeout = timeout
        self._context = ssl.create_default_context(cafile=cafile) if parts.scheme == "https" else None
        self._local = threading.local()
        self._conns: list[http.client.HTTPConnection] = []
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="http-range")
        self._stream: _Stream | None = None
        self.ranges_supported = True
        display = safe_url(url)
        self._probe_bytes = 0
        size = self._probe(display)
        super().__init__(display, size, stats)
        if self._probe_bytes:
            stats.add(self._probe_bytes)

    def _new_conn(self) -> http.client.HTTPConnection:
        if self._context is not None:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _conn(self) -> http.client.HTTPConnection:
        """This thread's keep-alive connection (prefetches run on the pool's threads)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._new_conn()
            self._local.conn = conn
            self._conns.append(conn)
        return conn

    def _target(self) -> str:
        p = urlsplit(self.url)
        return (p.path or "/") + (f"?{p.query}" if p.query else "")

    def _request(self, headers: dict, display: str, method: str = "GET") -> http.client.HTTPResponse:
        for attempt in (0, 1):  # a keep-alive connection the server closed: reconnect once
            conn = self._conn()
            try:
                conn.request(method, self._target(), headers=headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
            except ssl.SSLError as exc:
                raise ConnectError(
                    f"TLS failed: {exc.reason or exc}", display, "check the server certificate (or pass a CA file)"
                ) from exc
            except OSError as exc:
                raise ConnectError(
                    f"cannot reach the HTTP server: {describe_oserror(exc)}",
                    display,
                    "check the host, port and that the server is running",
                ) from exc
        raise AssertionError("unreachable")

    def _probe(self, display: str) -> int:
        resp = self._request({"Range": "bytes=0-0"}, display)
        body = resp.read()
        if resp.status in (200, 206):
            self._probe_bytes = len(body)
        if resp.status == 206:
            total = (resp.getheader("Content-Range") or "").rpartition("/")[2]
            if total.isdigit():
                return int(total)
        if resp.status == 200:
            self.ranges_supported = False
            length = resp.getheader("Content-Length")
            if length is not None and length.isdigit():
                return int(length)
            return len(body)
        if resp.status == 416:  # empty file
            return 0
        _raise_status(resp.status, resp.reason, display)

    def _get_range(self, off: int, n: int) -> bytes:
        if not self.ranges_supported:
            raise TransferError(
                "the HTTP server ignores Range requests",
                self.name,
                "serve the file from a server that supports byte ranges, or copy it first",
            )
        resp = self._request({"Range": f"bytes={off}-{off + n - 1}"}, self.name)
        data = resp.read()
        if resp.status != 206:
            _raise_status(resp.status, resp.reason, self.name)
        self.stats.add(len(data))
        return data

    def _start(self, ranges: list[tuple[int, int]]) -> list[Callable[[], bytes]]:
        futures = [self._pool.submit(self._get_range, o, n) for o, n in ranges]
        return [f.result for f in futures]

    def _read_sequential(self, offset: int, n: int) -> bytes:
        # One open-ended GET streams the file: TCP keeps the link full, no request per block.
        if self._stream is None or self._stream.position != offset:
            self._close_stream()
            headers = {"Range": f"bytes={offset}-"} if offset or self.ranges_supported else {}
            if offset and not self.ranges_supported:
                return self._get_range(offset, n)  # raises the clear error
            conn = self._new_conn()
            try:
                conn.request("GET", self._target(), headers=headers)
                resp = conn.getresponse()
            except OSError as exc:
                conn.close()
                raise ConnectError(f"cannot reach the HTTP server: {describe_oserror(exc)}", self.name) from exc
            if resp.status not in (200, 206):
                conn.close()
                _raise_status(resp.status, resp.reason, self.name)
            self._stream = _Stream(conn, resp, offset)
        data = self._stream.response.read(n)
        self.stats.add(len(data))
        self._stream.position += len(data)
        return data

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.conn.close()
            self._stream = None

    def close(self) -> None:
        if self.closed:
            return
        self._close_stream()
        self._pool.shutdown(wait=True)
        for conn in self._conns:
            conn.close()
        super().close()


def _raise_status(status: int, reason: str, display: str) -> NoReturn:
    if status == 404:
        raise TransferError("no such file on the HTTP server (404)", display, "check the URL")
    if status in (401, 403):
        raise TransferError(f"the HTTP server refused access ({status})", display, "check the URL's permissions")
    raise TransferError(f"HTTP error {status} {reason}", display, "check the URL and the server")


__all__ = ["HTTPRangeFile", "safe_url"]
