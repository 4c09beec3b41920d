"""Read-only, random-access files over SFTP, HTTP(S) and the local disk.

pyarrow reads Parquet and Arrow IPC by byte ranges (footer, then column
chunks), so a query needs a file object that fetches exactly the ranges asked
for. Each object counts the payload bytes it receives: `ReadStats.bytes` is
the source endpoint's accounting the query summary reports.

Two access patterns are served well:
- random (Parquet, IPC): `prefetch(ranges)` sends all the requests of a set
  of column chunks at once (pipelined SFTP READs / parallel HTTP Range GETs),
  later `read_at()` calls are answered from them;
- sequential (CSV): a read-ahead window of requests is kept in flight so a
  long link is filled instead of paying one round trip per block.
"""

from __future__ import annotations

import bisect
import collections
import http.client
import io
import os
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import ConnectError, TransferError, UsageError, describe_oserror

READAHEAD = 8 * 1024 * 1024  # sequential window: about one BDP of a 500 Mbit/s x 100 ms link
MAX_OUTSTANDING = 64
HEAD_CACHE = 1 << 20
TAIL_CACHE = 1 << 20  # SFTP READ requests in flight per file


@dataclass
class ReadStats:
    """Payload bytes received from a source (all files of one query)."""

    bytes: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n
            self.requests += 1


class RangeFile(io.RawIOBase):
    """A read-only seekable file whose bytes come from `_start()` (subclasses)."""

    def __init__(self, name: str, size: int, stats: ReadStats) -> None:
        super().__init__()
        self.name = name
        self.size = size
        self.stats = stats
        self.sequential = False
        self._pos = 0
        self._lock = threading.RLock()
        self._spans: list[tuple[int, int, Callable[[], bytes]]] = []  # (start, end, getter), sorted
        self._starts: list[int] = []
        self._head = b""

    # -- io.RawIOBase ---------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._pos = offset
        elif whence == 1:
            self._pos += offset
        else:
            self._pos = self.size + offset
        if self._pos < 0:
            raise ValueError("negative seek position")
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self._pos
        n = max(0, min(n, self.size - self._pos))
        if n == 0:
            return b""
        data = self.read_at(self._pos, n)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    # -- ranged access ----------------------------------------------------------------
    def read_at(self, offset: int, n: int) -> bytes:
        with self._lock:
            n = max(0, min(n, self.size - offset))
            if n == 0:
                return b""
            cached = self._from_spans(offset, n)
            if cached is not None:
                return cached
            if not self.sequential and offset + n == self.size and n <= TAIL_CACHE:
                # The footer (Parquet, IPC) is read first; column chunks of a small file fall inside it.
                data = self._start([(offset, n)])[0]()
                self._add_span(offset, data)
                return data
            if self.sequential:
                head = self._head
                if offset < len(head):
                    first = head[offset : offset + n]
                    return first if len(first) == n else first + self._sequential(len(head), n - len(first))
                return self._sequential(offset, n)
            return self._start([(offset, n)])[0]()

    def _sequential(self, offset: int, n: int) -> bytes:
        data = self._read_sequential(offset, n)
        if offset == len(self._head) and offset < HEAD_CACHE:
            # The start of a file is read twice (format sniffing, CSV header, then the parser):
            # keep it, so the second pass neither fetches it again nor restarts a stream.
            self._head += data[: HEAD_CACHE - offset]
        return data

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Start fetching (offset, length) ranges; later reads inside them use the data."""
        with self._lock:
            ranges = [
                (o, self._clip(o, min(n, self.size - o)))
                for o, n in sorted(ranges)
                if n > 0 and o < self.size and not self._covered(o, n)
            ]
            ranges = [(o, n) for o, n in ranges if n > 0]
            getters = self._start(ranges)
            for (o, n), get in zip(ranges, getters):
                self._insert((o, o + n, _memo(get)))

    def _span_at(self, offset: int):
        """The span holding byte `offset` (the one that reaches furthest), or None."""
        best = None
        i = bisect.bisect_right(self._starts, offset) - 1
        while i >= 0:
            span = self._spans[i]
            if span[1] > offset and (best is None or span[1] > best[1]):
                best = span
            i -= 1
            if best is not None and i >= 0 and self._spans[i][1] <= offset:
                break
        return best

    def _from_spans(self, offset: int, n: int) -> bytes | None:
        """The bytes if fetched spans cover [offset, offset + n) (possibly several of them)."""
        parts, pos, end = [], offset, offset + n
        while pos < end:
            span = self._span_at(pos) if self._spans else None
            if span is None:
                return None
            start, stop, get = span
            parts.append(get()[pos - start : min(stop, end) - start])
            pos = min(stop, end)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _clip(self, offset: int, n: int) -> int:
        """Length of [offset, offset + n) not already at its end in a fetched span (the footer)."""
        for start, stop, _ in self._spans:
            if offset < start < offset + n <= stop:
                n = start - offset
        return n

    def _covered(self, offset: int, n: int) -> bool:
        span = self._span_at(offset) if self._spans else None
        return span is not None and offset + n <= span[1]

    def _insert(self, span) -> None:
        i = bisect.bisect_left(self._starts, span[0])
        self._starts.insert(i, span[0])
        self._spans.insert(i, span)

    def _add_span(self, offset: int, data: bytes) -> None:
        self._insert((offset, offset + len(data), lambda: data))

    def forget(self, ranges: list[tuple[int, int]]) -> None:
        """Release prefetched ranges that have been used (their memory goes with them)."""
        done = {o for o, _ in ranges}
        with self._lock:
            keep = []
            for span in self._spans:
                if span[0] in done:
                    span[2]()  # drain its replies first
                else:
                    keep.append(span)
            self._spans, self._starts = keep, [s for s, _, _ in keep]

    def drop_prefetched(self) -> None:
        with self._lock:
            for _, _, get in self._spans:
                get()  # drain: an SFTP reply still on the wire would otherwise meet a forgotten request
            self._spans, self._starts = [], []

    def close(self) -> None:
        self._head = b""
        self._spans, self._starts = [], []
        super().close()

    # -- subclasses -----------------------------------------------------------------------
    def _start(self, ranges: list[tuple[int, int]]) -> list[Callable[[], bytes]]:
        """Send requests for every range now; each getter blocks until its bytes are there."""
        raise NotImplementedError

    def _read_sequential(self, offset: int, n: int) -> bytes:
        return self._start([(offset, n)])[0]()


class _Borrowed(io.RawIOBase):
    """A RangeFile handed to pyarrow: pyarrow closes the streams it wraps, the owner closes the file."""

    def __init__(self, rf: RangeFile) -> None:
        super().__init__()
        self._rf = rf
        self.name = rf.name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._rf.seek(offset, whence)

    def tell(self) -> int:
        return self._rf.tell()

    def read(self, n: int = -1) -> bytes:
        return self._rf.read(n)

    def readinto(self, b) -> int:
        return self._rf.readinto(b)


def native(rf: RangeFile):
    """A pyarrow NativeFile over `rf` whose closing leaves `rf` open."""
    import pyarrow as pa

    return pa.PythonFile(_Borrowed(rf), mode="r")


def _memo(get: Callable[[], bytes]) -> Callable[[], bytes]:
    box: list[bytes] = []

    def once() -> bytes:
        if not box:
            box.append(get())
        return box[0]

    return once


# -- local files ------------------------------------------------------------------------------
class LocalRangeFile(RangeFile):
    def __init__(self, path: str, stats: ReadStats) -> None:
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise TransferError(
                f"cannot open source file: {describe_oserror(exc)}", path, "check the path and its permissions"
            ) from exc
        super().__init__(path, os.fstat(self._fd).st_size, stats)

    def _start(self, ranges):
        def getter(o: int, n: int) -> Callable[[], bytes]:
            def get() -> bytes:
                data = os.pread(self._fd, n, o)
                self.stats.add(len(data))
                return data

            return get

        return [getter(o, n) for o, n in ranges]

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


# -- SFTP -----------------------------------------------------------------------------------------
class _Piece:
    __slots__ = ("off", "length", "data", "error", "done")

    def __init__(self, off: int, length: int) -> None:
        self.off, self.length = off, length
        self.data: bytes = b""
        self.error: BaseException | None = None
        self.done = False


class SFTPRangeFile(RangeFile):
    """Ranged reads with our pipelined SFTP client: many READs in flight on one connection."""

    def __init__(self, conn, path: str, stats: ReadStats, size: int | None = None, readahead: int = READAHEAD) -> None:
        """`conn` (a pooled connection) stays the caller's: several files use it one after another.
        `size` from a listing saves the FSTAT round trip."""
        from ..protocols import sftp_wire as w

        self._wire = conn.wire
        self._w = w
        self.broken = False
        try:
            t, r = self._wire.call(w.OPEN, self._wire.p_open(path, w.FXF_READ))
            self._handle = self._wire.expect_handle(t, r, path)
            if size is None or size < 0:
                t, r = self._wire.call(w.FSTAT, self._wire.p_handle(self._handle))
                if t != w.ATTRS:
                    self._wire.expect_status(t, r, path)
                size = r.attrs().size
        except OSError as exc:
            self.broken = isinstance(exc, ConnectionError)
            raise TransferError(
                f"cannot open source file: {describe_oserror(exc)}", path, "check the path and its permissions"
            ) from exc
        super().__init__(path, int(size or 0), stats)
        self.readahead = readahead
        self._win: collections.deque[_Piece] = collections.deque()
        self._win_end = 0

    def _send(self, off: int, length: int) -> _Piece:
        w, wire = self._w, self._wire
        piece = _Piece(off, length)

        def done(ptype: int, r) -> None:
            try:
                if ptype == w.DATA:
                    piece.data = bytes(r.bytes_())
                    self.stats.add(len(piece.data))
                elif ptype == w.STATUS:
                    code = r.u32()
                    if code != w.FX_EOF:
                        piece.error = w.status_error(code, r.str_() if r.pos < len(r.buf) else "", self.name)
                else:
                    piece.error = w.SFTPProtocolError(f"expected DATA, got packet type {ptype}")
            finally:
                piece.done = True

        while wire.outstanding >= MAX_OUTSTANDING:
            self._pump()
        wire.send(w.READ, wire.p_read(self._handle, off, length), done)
        return piece

    def _pump(self) -> None:
        try:
            self._wire.pump(block=True)
        except (OSError, EOFError) as exc:
            self.broken = True
            raise TransferError(
                f"connection lost while reading: {exc}",
                self.name,
                "re-run the query; nothing was written under the final name",
            ) from exc

    def _wait(self, piece: _Piece) -> bytes:
        while not piece.done:
            self._pump()
        if piece.error is not None:
            raise TransferError(f"read failed: {describe_oserror(piece.error)}", self.name) from piece.error
        return piece.data

    def _split(self, off: int, n: int) -> list[_Piece]:
        step = self._wire.max_read
        return [self._send(o, min(step, off + n - o)) for o in range(off, off + n, step)]

    def _start(self, ranges):
        sent = [(o, n, self._split(o, n)) for o, n in ranges]

        def getter(o: int, n: int, pieces: list[_Piece]) -> Callable[[], bytes]:
            def get() -> bytes:
                with self._lock:
                    out = bytearray()
                    for p in pieces:
                        data = self._wait(p)
                        out += data
                        if len(data) < p.length:  # a short read: fetch the rest before going on
                            rest = p.off + len(data)
                            if data and rest < min(self.size, p.off + p.length):
                                out += self._exact(rest, p.off + p.length - rest)
                    return bytes(out[:n])

            return get

        return [getter(o, n, ps) for o, n, ps in sent]

    def _exact(self, off: int, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            data = self._wait(self._send(off + len(out), min(self._wire.max_read, n - len(out))))
            if not data:
                break
            out += data
        return bytes(out)

    def _read_sequential(self, offset: int, n: int) -> bytes:
        if not self._win or self._win[0].off > offset or offset >= self._win_end:
            self._reset_window(offset)
        out = bytearray()
        pos = offset
        while len(out) < n and pos < self.size:
            goal = min(self.size, pos + max(n - len(out), self.readahead))
            while self._win_end < goal:
                length = min(self._wire.max_read, goal - self._win_end)
                self._win.append(self._send(self._win_end, length))
                self._win_end += length
            p = self._win[0]
            data = self._wait(p)
            avail = data[pos - p.off :]
            if not avail:
                if not data and p.length:
                    break  # EOF earlier than the size said (file shrank)
                self._reset_window(pos)
                continue
            take = avail[: n - len(out)]
            out += take
            pos += len(take)
            if pos >= p.off + len(data):
                self._win.popleft()
                if len(data) < p.length:
                    self._reset_window(pos)
        return bytes(out)

    def _reset_window(self, offset: int) -> None:
        for p in self._win:
            self._wait(p)  # replies of abandoned requests are drained, not left on the wire
        self._win.clear()
        self._win_end = offset

    def close(self) -> None:
        if self.closed:
            return
        try:
            if not self.broken:
                self._reset_window(0)
                self.drop_prefetched()
                # Not waited for: the reply is dispatched by the next request on this connection.
                self._wire.send(self._w.CLOSE, self._wire.p_handle(self._handle), lambda t, r: None)
        except (OSError, TransferError):
            self.broken = True
        finally:
            super().close()


# -- HTTP(S) -----------------------------------------------------------------------------------------
def safe_url(url: str) -> str:
    """The URL without query string or user info (signed URLs carry secrets there)."""
    p = urlsplit(url)
    host = p.hostname or ""
    port = f":{p.port}" if p.port else ""
    return f"{p.scheme}://{host}{port}{p.path}"


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
        self._timeout = timeout
        self._context = ssl.create_default_context(cafile=cafile) if parts.scheme == "https" else None
        self._local = threading.local()
        self._conns: list[http.client.HTTPConnection] = []
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="http-range")
        self._stream = None  # (response, position) of the sequential GET
        self.ranges_supported = True
        display = safe_url(url)
        self._probe_bytes = 0
        size = self._probe(display)
        super().__init__(display, size, stats)
        if self._probe_bytes:
            stats.add(self._probe_bytes)

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            p = urlsplit(self.url)
            if p.scheme == "https":
                conn = http.client.HTTPSConnection(p.hostname, p.port, timeout=self._timeout, context=self._context)
            else:
                conn = http.client.HTTPConnection(p.hostname, p.port, timeout=self._timeout)
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
            stats_probe = len(body)
            self._probe_bytes = stats_probe
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
        raise AssertionError("unreachable")

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

    def _start(self, ranges):
        futures = [self._pool.submit(self._get_range, o, n) for o, n in ranges]
        return [f.result for f in futures]

    def _read_sequential(self, offset: int, n: int) -> bytes:
        # One open-ended GET streams the file: TCP keeps the link full, no request per block.
        if self._stream is None or self._stream[1] != offset:
            self._close_stream()
            headers = {"Range": f"bytes={offset}-"} if offset or self.ranges_supported else {}
            if offset and not self.ranges_supported:
                return self._get_range(offset, n)  # raises the clear error
            p = urlsplit(self.url)
            conn = (
                http.client.HTTPSConnection(p.hostname, p.port, timeout=self._timeout, context=self._context)
                if p.scheme == "https"
                else http.client.HTTPConnection(p.hostname, p.port, timeout=self._timeout)
            )
            try:
                conn.request("GET", self._target(), headers=headers)
                resp = conn.getresponse()
            except OSError as exc:
                conn.close()
                raise ConnectError(f"cannot reach the HTTP server: {describe_oserror(exc)}", self.name) from exc
            if resp.status not in (200, 206):
                conn.close()
                _raise_status(resp.status, resp.reason, self.name)
            self._stream = [resp, offset, conn]
        resp = self._stream[0]
        data = resp.read(n)
        self.stats.add(len(data))
        self._stream[1] += len(data)
        return data

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream[2].close()
            self._stream = None

    def close(self) -> None:
        if self.closed:
            return
        self._close_stream()
        self._pool.shutdown(wait=True)
        for conn in self._conns:
            conn.close()
        super().close()


def _raise_status(status: int, reason: str, display: str) -> None:
    if status == 404:
        raise TransferError("no such file on the HTTP server (404)", display, "check the URL")
    if status in (401, 403):
        raise TransferError(f"the HTTP server refused access ({status})", display, "check the URL's permissions")
    raise TransferError(f"HTTP error {status} {reason}", display, "check the URL and the server")
