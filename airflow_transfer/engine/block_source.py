"""Blocks of a file and their source digests, taken from the bytes as the upload job reads them.

A file is cut into blocks of `block_size` bytes aligned to its start; a byte range moved on
its own connection cuts them at its edges (`block_spans`). `BlockSource` hashes each block on
the job's own thread (no second read) and hands it on once the server has acknowledged every
byte of it: only then is there something at the destination to check.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from ..integrity.algorithms import Hasher, new_hasher


@dataclass
class Block:
    offset: int
    length: int
    digest: str  # the source's
    state: str = "sent"  # sent (at the destination, unchecked), asked, ok, bad, journal (from an earlier run)
    actual: str = ""  # the destination's, once asked
    error: BaseException | None = None  # the destination digest could not be computed
    from_journal: bool = False


def block_spans(start: int, stop: int, block_size: int) -> list[tuple[int, int]]:
    """(offset, length) of the file's blocks clipped to [start, stop)."""
    out = []
    off = start
    while off < stop:
        end = min(stop, (off // block_size + 1) * block_size)
        out.append((off, end - off))
        off = end
    return out


class BlockSource:
    """Source digests of a job's blocks as they are read, handed on once the server acked them.

    update(offset, data) is the job's hasher interface (bytes in order from `next`);
    acked(offset, n) is fed from the job's acknowledgements. Given `digests`, nothing is
    hashed (a repair re-sends blocks whose source digests are already known)."""

    def __init__(
        self,
        algorithm: str,
        spans: list[tuple[int, int]],
        emit: Callable[[Block], None],
        start: int,
        digests: list[str] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.starts = [o for o, _ in spans]
        self.lens = [n for _, n in spans]
        self.digests: list[str | None] = list(digests) if digests else [None] * len(spans)
        self.acked_bytes = [0] * len(spans)
        self.emitted = [False] * len(spans)
        self.emit = emit
        self.next = start
        self._k = 0
        self._h: Hasher | None = None
        self._filled = 0

    def update(self, offset: int, data: bytes) -> None:
        if offset != self.next:
            raise RuntimeError(f"source bytes hashed out of order ({offset} != {self.next})")
        view = memoryview(data)
        while view:
            k = self._k
            if self._h is None:
                if k >= len(self.starts) or self.starts[k] != self.next:
                    raise RuntimeError(f"source bytes at {self.next} are outside this job's blocks")
                self._h, self._filled = new_hasher(self.algorithm), 0
            take = min(len(view), self.lens[k] - self._filled)
            self._h.update(view[:take])
            self._filled += take
            self.next += take
            view = view[take:]
            if self._filled == self.lens[k]:
                self.digests[k] = self._h.hexdigest()
                self._h = None
                self._k += 1
                self._maybe_emit(k)

    def acked(self, offset: int, n: int) -> None:
        end = offset + n
        k = max(0, bisect_right(self.starts, offset) - 1)
        while offset < end and k < len(self.starts):
            lo, hi = self.starts[k], self.starts[k] + self.lens[k]
            take = min(end, hi) - max(offset, lo)
            if take > 0:
                self.acked_bytes[k] += take
                self._maybe_emit(k)
            offset = max(offset, hi)
            k += 1

    def _maybe_emit(self, k: int) -> None:
        digest = self.digests[k]
        if not self.emitted[k] and digest is not None and self.acked_bytes[k] >= self.lens[k]:
            self.emitted[k] = True
            self.emit(Block(self.starts[k], self.lens[k], digest))
