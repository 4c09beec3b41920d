"""A buffered journal writer: the engine reports every range, the database sees a few batches a second.

The engine reports at byte-range granularity from many threads (p ranges of
a file, cc files at once). Writing each report in its own transaction would
make the store, not the network, the bottleneck on small files and would
fight every other worker for SQLite's single write lock. The writer keeps
events in memory and writes them in one transaction when ``max_events``
have piled up or the oldest has waited ``max_delay_ms`` — so the write rate
is bounded by ~1000/max_delay_ms transactions a second plus one per
``max_events`` events. The writes are the writer's own thread's: the engine's
threads hand events over and go on moving files, and write a batch themselves
only when BACKLOG_BATCHES of them have piled up (the database is slower than
the copy), which bounds both the memory held and how far the journal lags.

Losing the buffer (a crash) only makes the journal lag the destination:
those ranges are sent again on resume. The journal never claims bytes the
engine did not report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .closing import Closing
from .errors import StoreError, UnknownFileError
from .journal import BlockDone, Event, FileDone, FileFailed, RangeDone, RangesReset
from .lease import Heartbeat

if TYPE_CHECKING:
    from .store import Store

DEFAULT_MAX_DELAY_MS = 500
DEFAULT_MAX_EVENTS = 2_000
# Batches held back (while the listing is still being written, or the last batch is) before
# a reporter writes one itself, waiting for the database.
BACKLOG_BATCHES = 4


class ListingWrite:
    """A listing being written by a thread of its own (Store.record_listing_behind)."""

    def __init__(self, write: Callable[[], None]) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(write,), name="journal-listing", daemon=True)
        self._thread.start()

    def _run(self, write: Callable[[], None]) -> None:
        try:
            write()
        except BaseException as exc:  # noqa: BLE001 - raised again by wait(), in the copy's thread
            self._error = exc

    def wait(self) -> None:
        """Until every row is written; raises what the write raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error

    def join(self) -> None:
        """Until the write has ended, whatever became of it (a copy ending on another error)."""
        self._thread.join()

    def done(self) -> bool:
        return not self._thread.is_alive()


class JournalWriter(Closing):
    """Thread-safe, batching writer of one transfer's journal. Use it as a context manager."""

    def __init__(
        self,
        store: Store,
        transfer_id: int,
        *,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
        max_events: int = DEFAULT_MAX_EVENTS,
        background: bool = True,
        heartbeat_s: float | None = None,
        after: ListingWrite | None = None,
    ) -> None:
        if max_delay_ms < 0 or max_events < 1:
            raise ValueError("max_delay_ms must be >= 0 and max_events >= 1")
        self.store = store
        self.transfer_id = transfer_id
        self.max_delay_s = max_delay_ms / 1000
        self.max_events = max_events
        self.flushes = 0  # transactions written (observability, tests)
        self._events: list[Event] = []
        self._oldest: float | None = None
        self._lock = threading.Lock()  # guards the buffer
        self._flush_lock = threading.Lock()  # one flush at a time, so batches commit in order
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._error: BaseException | None = None
        self._after = after  # what the first write waits for (the listing's rows, say)
        self._thread: threading.Thread | None = None
        if background and max_delay_ms > 0:
            self._thread = threading.Thread(target=self._tick, name=f"journal-writer-{transfer_id}", daemon=True)
            self._thread.start()
        # heartbeat_s: keep the transfer's lease while the writer is open (lease.py)
        self._heartbeat = Heartbeat(store, transfer_id, heartbeat_s) if heartbeat_s else None

    # --- what the engine calls -------------------------------------------

    def mark_range(self, path: str, offset: int, length: int) -> None:
        """Bytes [offset, offset+length) of ``path`` are committed at the destination."""
        if offset < 0 or length < 0:
            raise ValueError(f"range offset={offset} length={length} of {path!r} is invalid: both must be >= 0")
        if length:
            self._add(RangeDone(path, offset, offset + length))

    def mark_restart(self, path: str) -> None:
        """The temporary file of ``path`` is being written again from its first byte: a resume
        must not trust any range or block recorded before."""
        self._add(RangesReset(path))

    def mark_block(self, path: str, offset: int, length: int, digest: str) -> None:
        """Block [offset, offset+length) of ``path`` is at the destination; ``digest`` ("algo:hex")
        is the source's digest of it. A resume verifies the block against it instead of re-sending."""
        if offset < 0 or length < 0:
            raise ValueError(f"block offset={offset} length={length} of {path!r} is invalid: both must be >= 0")
        self._add(BlockDone(path, offset, length, digest))

    def mark_done(
        self,
        path: str,
        size: int,
        mtime: float | None = None,
        checksum: str | None = None,
        attempts: int | None = None,
    ) -> None:
        """``path`` is complete under its final name (and verified, when verification is on)."""
        if size < 0:
            raise ValueError(f"size {size} of {path!r} is negative")
        self._add(FileDone(path, size, mtime, checksum, attempts))

    def mark_done_many(self, files: list[tuple[str, int, float | None, int | None]]) -> None:
        """mark_done(path, size, mtime, attempts=...) for each of `files`, buffered together."""
        for path, size, _mtime, _attempts in files:
            if size < 0:
                raise ValueError(f"size {size} of {path!r} is negative")
        self._add_many([FileDone(path, size, mtime, None, attempts) for path, size, mtime, attempts in files])

    def mark_failed(self, path: str, error: str, attempts: int | None = None) -> None:
        """The last attempt at ``path`` failed; ``attempts`` defaults to one more than recorded."""
        self._add(FileFailed(path, str(error), attempts))

    def flush(self) -> None:
        """Write everything buffered now, in one transaction."""
        self._raise_background_error()
        self._flush()

    def close(self) -> None:
        """Stop the background thread and write what is left."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake.set()
        if self._heartbeat is not None:
            self._heartbeat.close()
        if self._thread is not None:
            self._thread.join()
        self._raise_background_error()
        self._flush()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._events)

    # --- internals ---------------------------------------------------------

    def _add(self, event: Event) -> None:
        self._add_many([event])

    def _add_many(self, events: list[Event]) -> None:
        self._raise_background_error()
        if self._closed.is_set():
            raise StoreError(f"journal writer of transfer {self.transfer_id} is closed")
        now = time.monotonic()
        with self._lock:
            self._events.extend(events)
            if self._oldest is None:
                self._oldest = now
            pending = len(self._events)
            due = self._due(now)
        if not due:
            return
        if self._thread is not None and pending < BACKLOG_BATCHES * self.max_events:
            # The writer's thread writes them: a bundle worker that wrote a group's 1,000 rows
            # itself (tens of ms on SQLite) asked for the next group that much later, and its
            # channel ran dry meanwhile (docs/transfers.md, "Small files in bundles").
            self._wake.set()
            return
        self._flush()

    def _flush(self) -> None:
        with self._flush_lock:
            if self._after is not None:
                with self._lock:
                    if not self._events:
                        return
                self._after.wait()  # its error is this flush's: the events stay buffered
                self._after = None
            with self._lock:
                events, self._events = self._events, []
                self._oldest = None
            if not events:
                return
            try:
                unknown = self.store.apply_journal_events(self.transfer_id, events)
            except BaseException:
                # keep them, in order, ahead of anything added meanwhile: the next flush retries
                with self._lock:
                    self._events[:0] = events
                    self._oldest = time.monotonic()
                raise
            self.flushes += 1
        if unknown:
            more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
            raise UnknownFileError(
                f"transfer {self.transfer_id} has no journal entry for {unknown[0]!r}{more}",
                todo="record_listing must list a file before the engine reports on it",
            )

    def _due(self, now: float) -> bool:
        """Whether the buffer is to be written: a full batch, or its oldest event aged (under _lock)."""
        return len(self._events) >= self.max_events or (
            self._oldest is not None and now - self._oldest >= self.max_delay_s
        )

    def _tick(self) -> None:
        while True:
            self._wake.wait(self.max_delay_s / 2)
            if self._closed.is_set():
                return
            self._wake.clear()
            with self._lock:  # a full batch (what _add_many woke this thread for), or an aged one
                due = self._due(time.monotonic())
            if not due:
                continue
            try:
                self._flush()
            except BaseException as exc:  # noqa: BLE001 - reported to the engine on its next call
                self._error = exc

    def _raise_background_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error
