"""http:// and https:// as a source: HEAD for stat, Range GETs for reads,
the server's HTML index (links ending in "/") for directory listings."""

from __future__ import annotations

import errno
import http.client
import io
import ssl
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser
from typing import BinaryIO
from urllib.parse import quote, unquote, urljoin

from .base import Backend, Capabilities, FileInfo

TIMEOUT = 30.0


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "a":
            for k, v in attrs:
                if k == "href" and v:
                    self.hrefs.append(v)


def _status_error(status: int, reason: str, path: str) -> OSError:
    if status == 404 or status == 410:
        return FileNotFoundError(errno.ENOENT, f"HTTP {status} {reason}", path)
    if status in (401, 403):
        return PermissionError(errno.EACCES, f"HTTP {status} {reason}", path)
    if status >= 500 or status == 429:
        return ConnectionError(f"HTTP {status} {reason} ({path})")
    return OSError(errno.EIO, f"HTTP {status} {reason}", path)


class _Body(io.RawIOBase):
    def __init__(self, resp: http.client.HTTPResponse, owner: HTTPBackend) -> None:
        self.resp, self.owner = resp, owner

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self.resp.readinto(b)
        except (OSError, http.client.HTTPException) as exc:
            self.owner._drop()
            raise ConnectionError(f"HTTP connection lost: {exc}") from exc

    def close(self) -> None:
        if not self.closed:
            super().close()
            if not self.resp.isclosed():
                # Not read to the end: the keep-alive connection cannot be reused.
                self.resp.close()
                self.owner._drop()


class HTTPBackend(Backend):
    scheme = "http"
    caps = Capabilities(write=False, ranged_write=False, rename=False, parallel=True)

    def __init__(
        self, scheme: str, host: str, port: int | None = None, timeout: float = TIMEOUT, verify_tls: bool = True
    ) -> None:
        self.scheme = scheme
        self.host, self.port, self.timeout = host, port, timeout
        self.verify_tls = verify_tls
        self._conn: http.client.HTTPConnection | None = None
        self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.scheme == "https":
                ctx = ssl.create_default_context()
                if not self.verify_tls:
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                self._conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=ctx)
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.connect()
            except OSError as exc:
                self._conn = None
                raise ConnectionError(f"cannot connect to {self.host}:{self.port or ''}: {exc}") from exc
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _request(self, method: str, path: str, headers: dict | None = None) -> http.client.HTTPResponse:
        for attempt in (0, 1):  # a keep-alive connection the server closed meanwhile: reconnect once
            conn = self._connect()
            try:
                conn.request(method, quote(path, safe="/~%:@!$&'()*+,;="), headers=headers or {})
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._drop()
                if attempt:
                    raise ConnectionError(f"HTTP connection lost: {exc}") from exc
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise ConnectionError(f"HTTP request failed: {exc}") from exc
        raise AssertionError("unreachable")

    def stat(self, path: str) -> FileInfo:
        resp = self._request("HEAD", path)
        resp.read()
        if resp.status in (301, 302, 307, 308) and not path.endswith("/"):
            return FileInfo(path, 0, 0.0, True)
        if resp.status >= 400:
            raise _status_error(resp.status, resp.reason, path)
        is_dir = (
            path.endswith("/")
            or "text/html" in (resp.getheader("Content-Type") or "")
            and resp.getheader("Last-Modified") is None
        )
        mtime = 0.0
        lm = resp.getheader("Last-Modified")
        if lm:
            try:
                mtime = parsedate_to_datetime(lm).timestamp()
            except (TypeError, ValueError):
                pass
        size = int(resp.getheader("Content-Length") or 0)
        return FileInfo(path, 0 if is_dir else size, mtime, is_dir)

    def listdir(self, path: str) -> list[FileInfo]:
        base = path if path.endswith("/") else path + "/"
        resp = self._request("GET", base)
        body = resp.read()
        if resp.status >= 400:
            raise _status_error(resp.status, resp.reason, path)
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        out = []
        seen = set()
        for href in parser.hrefs:
            if href.startswith(("?", "#", "../")) or "://" in href or href.startswith("/"):
                continue
            name = unquote(href.split("?", 1)[0].split("#", 1)[0])
            if not name or name in seen or name in ("./", "../"):
                continue
            seen.add(name)
            child = urljoin(base, name)
            if name.endswith("/"):
                out.append(FileInfo(child.rstrip("/"), 0, 0.0, True))
            else:
                out.append(self.stat(child))
        return sorted(out, key=lambda f: f.path)

    def walk(self, root: str):
        listing = super().walk(root)
        return listing

    def open_read(self, path: str, offset: int = 0) -> BinaryIO:
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        resp = self._request("GET", path, headers)
        if resp.status >= 400:
            resp.read()
            if resp.status == 416:
                return io.BytesIO(b"")
            raise _status_error(resp.status, resp.reason, path)
        if offset and resp.status != 206:
            resp.close()
            self._drop()
            raise OSError(errno.ENOTSUP, "the HTTP server ignores Range requests", path)
        return io.BufferedReader(_Body(resp, self), 1 << 20)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        if length is None:
            return super().read(path, offset, None)
        if length <= 0:
            return b""
        resp = self._request("GET", path, {"Range": f"bytes={offset}-{offset + length - 1}"})
        body = resp.read()
        if resp.status == 416:
            return b""
        if resp.status >= 400:
            raise _status_error(resp.status, resp.reason, path)
        if resp.status == 200:  # the server sent everything: cut out the range
            return body[offset : offset + length]
        return body

    def _read_only(self, path: str):
        return PermissionError(errno.EROFS, f"{self.scheme} is a read-only source", path)

    def open_write(self, path: str, offset: int = 0) -> BinaryIO:
        raise self._read_only(path)

    def rename(self, src: str, dst: str) -> None:
        raise self._read_only(src)

    def delete(self, path: str) -> None:
        raise self._read_only(path)

    def mkdir(self, path: str, parents: bool = True, exist_ok: bool = True) -> None:
        raise self._read_only(path)

    def close(self) -> None:
        self._drop()
