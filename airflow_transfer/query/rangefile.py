"""Read-only, random-access files whose bytes come from somewhere else: the local disk here,
SFTP in sftp_rangefile.py, HTTP(S) in http_rangefile.py.

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
import io
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from .io_errors import os_failure

HEAD_CACHE = 1 << 20  # the start of a file kept after a sequential read (see RangeFile._sequential)
TAIL_CACHE = 1 << 20  # a read ending at the end of the file, up to this long, is kept: the footer, read first

Span = tuple[int, int, Callable[[], bytes]]  # (start, end, getter of its bytes)


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
        self._spans: list[Span] = []  # sorted by start
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

    def _span_at(self, offset: int) -> Span | None:
        """The span holding byte `offset` (the one that reaches furthest), or None."""
        best: Span | None = None
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
        parts: list[bytes] = []
        pos, end = offset, offset + n
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

    def _insert(self, span: Span) -> None:
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


def _memo(get: Callable[[], bytes]) -> Callable[[], bytes]:
    box: list[bytes] = []

    def once() -> bytes:
        if not box:
            box.append(get())
        return box[0]

    return once


# -- local files ------------------------------------------------------------------------------
class LocalRangeFile(RangeFile):
    """Ranged reads of a local file with pread: no position shared between threads."""

    def __init__(self, path: str, stats: ReadStats) -> None:
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise os_failure("cannot open source file", exc, path, "check the path and its permissions") from exc
        super().__init__(path, os.fstat(self._fd).st_size, stats)

    def _start(self, ranges: list[tuple[int, int]]) -> list[Callable[[], bytes]]:
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


__all__ = ["HEAD_CACHE", "TAIL_CACHE", "LocalRangeFile", "RangeFile", "ReadStats"]
