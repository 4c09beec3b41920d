"""Ranged reads over SFTP with our pipelined client: many READs in flight on one connection.

Prefetched ranges are split into READs of the server's maximum size, all sent
at once; sequential reads keep a read-ahead window of READs in flight. Every
request sent is also answered and drained, even one abandoned by a seek, so a
late reply never meets a later request on the shared connection.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from ..errors import TransferError
from ..protocols import sftp_wire as w
from .io_errors import connection_lost, os_failure
from .rangefile import RangeFile, ReadStats

READAHEAD = 8 * 1024 * 1024  # sequential window: about one BDP of a 500 Mbit/s x 100 ms link
MAX_OUTSTANDING = 64  # SFTP READ requests in flight per file


class _Piece:
    __slots__ = ("off", "length", "data", "error", "done")

    def __init__(self, off: int, length: int) -> None:
        self.off, self.length = off, length
        self.data: bytes = b""
        self.error: OSError | None = None
        self.done = False


class SFTPRangeFile(RangeFile):
    """Ranged reads with our pipelined SFTP client: many READs in flight on one connection."""

    def __init__(self, conn, path: str, stats: ReadStats, size: int | None = None, readahead: int = READAHEAD) -> None:
        """`conn` (a pooled connection) stays the caller's: several files use it one after another.
        `size` from a listing saves the FSTAT round trip."""
        self._wire = conn.wire
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
            raise os_failure("cannot open source file", exc, path, "check the path and its permissions") from exc
        super().__init__(path, int(size or 0), stats)
        self.readahead = readahead
        self._win: collections.deque[_Piece] = collections.deque()
        self._win_end = 0

    def _send(self, off: int, length: int) -> _Piece:
        wire = self._wire
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
            raise connection_lost("reading", exc, self.name) from exc

    def _wait(self, piece: _Piece) -> bytes:
        while not piece.done:
            self._pump()
        if piece.error is not None:
            raise os_failure("read failed", piece.error, self.name) from piece.error
        return piece.data

    def _split(self, off: int, n: int) -> list[_Piece]:
        step = self._wire.max_read
        return [self._send(o, min(step, off + n - o)) for o in range(off, off + n, step)]

    def _start(self, ranges: list[tuple[int, int]]) -> list[Callable[[], bytes]]:
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
                self._wire.send(w.CLOSE, self._wire.p_handle(self._handle), lambda t, r: None)
        except (OSError, TransferError):
            self.broken = True
        finally:
            super().close()


__all__ = ["MAX_OUTSTANDING", "READAHEAD", "SFTPRangeFile"]
