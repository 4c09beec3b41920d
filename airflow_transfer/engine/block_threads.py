"""How many checksum threads keep up with the transfer (Liu, Jung, Kettimuthu, Sun, Towards
Optimizing Large-Scale Data Transfers with End-to-End Integrity Verification, section III.B).

The block pipeline runs at the pace of its slower stage: when checksumming a block (c) is
slower than sending it (t), ceil(c / t) threads, each with its own helper, bring the checksum
stage back to the transfer's pace. `choose_threads` sets the count before the transfer from
the link's bandwidth and a local hash; `ThreadBalance` measures t and c while it runs, so the
verifier can add threads when the destination turns out slower than that guess.
"""

from __future__ import annotations

import os
import threading
import time

from ..integrity.algorithms import new_hasher
from ..integrity.model import checksum_threads

MIB = 1024 * 1024
RECHECK_BLOCKS = 8  # blocks checked between two looks at the balance


def choose_threads(
    algorithm: str, block_size: int, bandwidth_bps: float | None, max_threads: int | None = None
) -> tuple[int, float, float]:
    """(threads, t, c): checksum threads balancing the two stages, from t (seconds to send one
    block at the link's bandwidth) and c (seconds to hash one block, measured here on 1 MiB)."""
    # Zeros: these hashes take the same time whatever the bytes, and drawing 4 MiB from
    # os.urandom took 13 ms of the 18 this cost before every copy's first chunk.
    sample = bytes(MIB)
    h = new_hasher(algorithm)
    t0 = time.perf_counter()
    h.update(sample)
    h.hexdigest()
    c = (time.perf_counter() - t0) * block_size / len(sample)
    t = block_size * 8 / bandwidth_bps if bandwidth_bps else 0.0
    limit = max_threads or max(1, min(4, os.cpu_count() or 1))
    return checksum_threads(t, c, limit), t, c


class ThreadBalance:
    """t and c per block as measured during the run: t from the blocks acknowledged per second
    of transfer, c from the helpers' own timing (fsync, read back, hash)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.sent_bytes = 0
        self.first_sent: float | None = None
        self.helper_seconds = 0.0
        self.helper_bytes = 0
        self._next_check = 0  # helper bytes at which to look at the balance again
        self._lock = threading.Lock()

    def sent(self, n: int) -> None:
        """`n` more bytes acknowledged by the server."""
        with self._lock:
            self.sent_bytes += n
            if self.first_sent is None:
                self.first_sent = time.monotonic()

    def checked(self, seconds: float, n: int) -> None:
        """A helper took `seconds` for a digest of `n` bytes, by its own clock."""
        with self._lock:
            self.helper_seconds += seconds
            self.helper_bytes += n

    def measured(self) -> tuple[float, float] | None:
        """(t, c) per block; None before there is enough to go by."""
        with self._lock:
            if self.first_sent is None or self.helper_bytes < 4 * self.block_size or not self.sent_bytes:
                return None
            t = (time.monotonic() - self.first_sent) * self.block_size / self.sent_bytes
            c = self.helper_seconds * self.block_size / self.helper_bytes
            return t, c

    def wants_more(self, threads: int, max_threads: int) -> bool:
        """True when c > t x threads, looked at every RECHECK_BLOCKS blocks checked."""
        with self._lock:
            if threads >= max_threads or self.helper_bytes < self._next_check:
                return False
            self._next_check = self.helper_bytes + RECHECK_BLOCKS * self.block_size
        measured = self.measured()
        return measured is not None and checksum_threads(*measured, max_threads) > threads
