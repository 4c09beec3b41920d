"""File transfers over one SFTP connection, as state machines driven by replies.

A `Pipeline` keeps up to `pp` jobs open on one `SFTPWire` and keeps up to
`inflight` bytes of reads or writes outstanding across them, so control
round trips (open, close, rename) of one file overlap the data of others
(Yildirim, Arslan, Kim, Kosar, Application-Level Optimization of Big Data
Transfers Through Pipelining, Parallelism and Concurrency, IEEE TCC 2016,
section 2, Fig. 2-3).

A job moves the byte range [start, stop) of one file. A whole-file job also
finalizes: mode and mtime are set on the temporary file, it is closed, and
only after the close succeeded is it renamed to its final name. Range jobs of
a file split over p connections (parallelism) skip finalizing; the engine
finalizes once every range is in.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocols import sftp_wire as w
from ..protocols.sftp_wire import Attrs, SFTPWire
from .accounting import Stats


@dataclass(slots=True)
class FileTask:
    """One file of a chunk, as the engine sees it."""

    rel: str
    size: int
    mtime: float
    src: str  # full source path (local or remote)
    dst: str  # full final destination path
    tmp: str  # temporary destination path
    mode: int = 0o644
    attempts: int = 0
    todo_ranges: list | None = None  # p ranges still missing (from the journal), None = all
    moved_total: int = 0  # bytes sent over every attempt (re-sends included)
    resumable: bool = False  # its temporary file may hold this very source version
    resumed: bool = False
    last_error: str | None = None
    mismatches: int = 0  # verification failures so far
    repair: list | None = None  # block mode: the blocks to send again (block_verify.Block)
    # Byte ranges the temporary file is known to hold for this source version: the journal's
    # from an earlier run, then every acknowledged write or read of this run. A resume starts
    # from their contiguous prefix, never from the file's size: a server answering reads short
    # (or writes out of order) leaves holes below that size.
    done: list | None = None
    journaled: bool = False  # the journal may hold ranges of the temporary file
    counted: int = 0  # bytes of this file counted in the progress (never more than its size)
    # Sent whole in a bundle group whose commit went out but whose reply never came back: it
    # may well be in place, verified; the next attempt looks there first (bundle.py).
    unheard: bool = False


_COUNT_LOCK = threading.Lock()  # ranges of one file are acknowledged on p threads at once


def count_progress(task: FileTask, stats: Stats | None, n: int) -> None:
    """Count `n` bytes of `task` in the progress, never past its size: re-sent bytes (a retry,
    a resume that overlaps what an earlier attempt already counted) are not progress."""
    count_progress_many([(task, n)], stats)


def count_progress_many(items: list[tuple[FileTask, int]], stats: Stats | None) -> None:
    """count_progress for each (task, bytes), under one lock and with one update of `stats`."""
    if stats is None:
        return
    total = 0
    with _COUNT_LOCK:
        for task, n in items:
            new = min(n, task.size - task.counted)
            if new > 0:
                task.counted += new
                total += new
    if total:
        stats.add_bytes(total)


def contiguous_prefix(ranges: list | None) -> int:
    """End of the run of bytes starting at offset 0 (ranges coalesced and sorted)."""
    if not ranges or ranges[0][0] != 0:
        return 0
    return int(ranges[0][1])


def mtime_changed(now: float, listed: float) -> bool:
    """Compare at the listing's precision: sub-second where it had it, whole seconds over SFTP."""
    if listed != int(listed):
        return abs(now - listed) > 1e-6
    return int(now) != int(listed)


class SourceChanged(OSError):
    """The source file changed while it was being read: the copy is discarded."""


class Job:
    """Moves [start, stop) of one file. Subclasses say which direction."""

    def __init__(self, task: FileTask, start: int, stop: int, finalize: bool, stats: Stats | None) -> None:
        self.task, self.start, self.stop, self.finalize = task, start, stop, finalize
        self.stats = stats
        self.next_off = start
        self.acked = 0
        self.outstanding = 0  # requests in flight for this job
        self.handle: bytes | None = None
        self.error: BaseException | None = None
        self.done = False
        self.closing = False
        self.t0 = time.monotonic()
        self.seconds = 0.0
        self.fd: int | None = None
        self.on_range: Callable[[str, int, int], None] | None = None  # the journal
        self.hasher: Any = None  # verify.SourceHasher over [start, stop) as it is read
        self.defer_rename = False  # verification renames once the digests match
        self.ranges: list[list[int]] = []  # acknowledged [start, end) pairs, in arrival order, merged when touching

    @property
    def length(self) -> int:
        return self.stop - self.start

    def _handle(self) -> bytes:
        assert self.handle is not None  # data moves only once the open reply gave a handle
        return self.handle

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc

    def finish(self) -> None:
        self.done = True
        self.seconds = time.monotonic() - self.t0
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def committed(self, off: int, n: int) -> None:
        """Bytes [off, off+n) are at the destination: count them and journal the range."""
        self.acked += n
        last = self.ranges[-1] if self.ranges else None
        if last is not None and last[1] == off:
            last[1] = off + n
        else:
            self.ranges.append([off, off + n])
        count_progress(self.task, self.stats, n)
        if self.on_range is not None:
            self.on_range(self.task.rel, off, n)

    # Implemented by subclasses:
    def begin(self, wire: SFTPWire) -> None:
        raise NotImplementedError

    def feed(self, wire: SFTPWire, budget: int) -> int:
        raise NotImplementedError

    def wants_data(self) -> bool:
        return self.handle is not None and self.error is None and self.next_off < self.stop


class UploadJob(Job):
    """Local file -> remote temporary file."""

    def __init__(self, task, start, stop, finalize, stats, truncate: bool = True) -> None:
        super().__init__(task, start, stop, finalize, stats)
        self.truncate = truncate

    def begin(self, wire: SFTPWire) -> None:
        try:
            self.fd = os.open(self.task.src, os.O_RDONLY)
            st = os.fstat(self.fd)
        except OSError as exc:
            self.fail(exc)
            self.finish()
            return
        if st.st_size != self.task.size or mtime_changed(st.st_mtime, self.task.mtime):
            self.fail(SourceChanged(f"source changed since it was listed: {self.task.src}"))
            self.finish()
            return
        if self.hasher is not None and self.hasher.next < self.start:
            # Resumed: the bytes already sent are hashed from the source now.
            try:
                off = self.hasher.next
                while off < self.start:
                    data = os.pread(self.fd, min(1 << 20, self.start - off), off)
                    if not data:
                        raise SourceChanged(f"source shrank while being read: {self.task.src}")
                    self.hasher.update(off, data)
                    off += len(data)
            except OSError as exc:
                self.fail(exc)
                self.finish()
                return
        flags = w.FXF_WRITE | w.FXF_CREAT | (w.FXF_TRUNC if self.truncate else 0)
        self.outstanding += 1
        # Created private: the final mode is applied before the rename.
        wire.send(w.OPEN, wire.p_open(self.task.tmp, flags, Attrs(mode=0o600)), self._on_open)

    def _on_open(self, t: int, r) -> None:
        self.outstanding -= 1
        try:
            self.handle = SFTPWire.expect_handle(t, r, self.task.tmp)
        except OSError as exc:
            self.fail(exc)

    def feed(self, wire: SFTPWire, budget: int) -> int:
        sent = 0
        block = wire.max_write
        fd, handle = self.fd, self.handle
        assert fd is not None and handle is not None  # feed runs only on an open job (wants_data)
        while self.next_off < self.stop and sent < budget:
            n = min(block, self.stop - self.next_off)
            data = os.pread(fd, n, self.next_off)
            if len(data) != n:
                self.fail(SourceChanged(f"source shrank while being read: {self.task.src}"))
                break
            off = self.next_off
            if self.hasher is not None:
                self.hasher.update(off, data)
            self.next_off += n
            self.outstanding += 1
            wire.send(w.WRITE, wire.p_write_head(handle, off, n), self._ack(off, n), data)
            sent += n
        return sent

    def _ack(self, off: int, n: int) -> Callable:
        def on_status(t: int, r) -> None:
            self.outstanding -= 1
            try:
                SFTPWire.expect_status(t, r, self.task.tmp)
            except OSError as exc:
                self.fail(exc)
                return
            self.committed(off, n)

        return on_status


class DownloadJob(Job):
    """Remote file -> local temporary file (opened by the engine, passed as fd)."""

    def __init__(self, task, start, stop, finalize, stats, local_fd: int) -> None:
        super().__init__(task, start, stop, finalize, stats)
        self.local_fd = local_fd
        # A whole file also asks for one byte past its listed end and expects EOF: a server
        # whose sizes lie (or a file that grew) must not pass as a complete, verified copy.
        # Sent behind the data reads, it costs no round trip.
        self.probe_end = finalize and stop == task.size

    def wants_data(self) -> bool:
        return self.handle is not None and self.error is None and (self.next_off < self.stop or self.probe_end)

    def begin(self, wire: SFTPWire) -> None:
        self._wire = wire
        self.outstanding += 1
        wire.send(w.OPEN, wire.p_open(self.task.src, w.FXF_READ), self._on_open)

    def _on_open(self, t: int, r) -> None:
        self.outstanding -= 1
        try:
            handle = SFTPWire.expect_handle(t, r, self.task.src)
        except OSError as exc:
            self.fail(exc)
            return
        # The source must still be the version that was listed, or the copy would mix two.
        self.outstanding += 1
        self._wire.send(w.FSTAT, self._wire.p_handle(handle), lambda t2, r2: self._on_fstat(handle, t2, r2))

    def _on_fstat(self, handle: bytes, t: int, r) -> None:
        self.outstanding -= 1
        if t == w.ATTRS:
            a = r.attrs()
            if a.size != self.task.size or (a.mtime is not None and a.mtime != int(self.task.mtime)):
                self.fail(SourceChanged(f"source changed since it was listed: {self.task.src}"))
        self.handle = handle

    def feed(self, wire: SFTPWire, budget: int) -> int:
        sent = 0
        block = wire.max_read
        while self.next_off < self.stop and sent < budget:
            n = min(block, self.stop - self.next_off)
            self._read(wire, self.next_off, n)
            self.next_off += n
            sent += n
        if self.probe_end and self.next_off >= self.stop:
            self.probe_end = False
            self.outstanding += 1
            wire.send(w.READ, wire.p_read(self._handle(), self.stop, 1), self._on_probe)
        return sent

    def _on_probe(self, t: int, r) -> None:
        self.outstanding -= 1
        if t == w.STATUS:
            code = r.u32()
            if code != w.FX_EOF:
                self.fail(w.status_error(code, r.str_() if r.pos < len(r.buf) else "", self.task.src))
            return
        self.fail(SourceChanged(f"source has more bytes than its listed size ({self.task.size}): {self.task.src}"))

    def _read(self, wire: SFTPWire, off: int, n: int) -> None:
        self.outstanding += 1
        wire.send(w.READ, wire.p_read(self._handle(), off, n), self._on_data(wire, off, n))

    def _on_data(self, wire: SFTPWire, off: int, n: int) -> Callable:
        def on_data(t: int, r) -> None:
            self.outstanding -= 1
            if t == w.STATUS:
                code = r.u32()
                if code == w.FX_EOF:
                    self.fail(SourceChanged(f"source shrank while being read: {self.task.src}"))
                else:
                    self.fail(w.status_error(code, r.str_() if r.pos < len(r.buf) else "", self.task.src))
                return
            if t != w.DATA:
                self.fail(w.SFTPProtocolError(f"expected DATA, got packet type {t}"))
                return
            data = r.bytes_()
            got = len(data)
            if got == 0 or got > n:
                self.fail(w.SFTPProtocolError(f"server returned {got} bytes for a {n}-byte read"))
                return
            try:
                os.pwrite(self.local_fd, data, off)
            except OSError as exc:
                self.fail(exc)
                return
            self.committed(off, got)
            if got < n and self.error is None:
                # Servers may return short reads; ask for the rest.
                if wire.caps is not None:
                    wire.caps.short_reads += 1
                self._read(wire, off + got, n - got)

        return on_data


class Pipeline:
    """Drives jobs on one connection: up to `pp` open at once, `inflight` bytes outstanding."""

    def __init__(self, wire: SFTPWire, pp: int, inflight: int) -> None:
        self.wire, self.pp, self.inflight = wire, pp, inflight
        self.max_open_seen = 0  # for tests: how many files were in flight at once
        self.active: list[Job] = []  # read by the engine if the connection dies

    def run(self, next_job: Callable[[], Job | None], on_done: Callable[[Job], None]) -> None:
        active = self.active
        exhausted = False
        wire = self.wire
        while True:
            while not exhausted and len(active) < self.pp:
                job = next_job()
                if job is None:
                    exhausted = True
                    break
                # In `active` before begin(): a connection that dies inside begin() must
                # still hand this file back (the engine abandons what `active` holds).
                active.append(job)
                job.begin(wire)
            self.max_open_seen = max(self.max_open_seen, len(active))
            if not active:
                return
            # Data: fill the byte budget, earliest file first so files complete in order.
            in_flight = sum((j.next_off - j.start) - j.acked for j in active if j.error is None)
            budget = self.inflight - in_flight
            for job in active:
                if budget <= 0:
                    break
                if job.wants_data():
                    budget -= job.feed(wire, budget)
            for job in active:
                self._advance(job)
            finished = [j for j in active if j.done]
            if finished:
                active[:] = [j for j in active if not j.done]
                for job in finished:
                    on_done(job)
            if active and wire.outstanding:
                wire.pump(block=True)

    def _advance(self, job: Job) -> None:
        """Close and finalize a job whose data is all sent, or clean up a failed one.

        An upload's FSETSTAT and CLOSE go right behind its last WRITE: the server
        handles one channel's requests in order, so the close's reply comes after
        every write's, and the rename still waits for that reply (one round trip
        less per file, which is what pp=1 pays on a long link)."""
        if job.done or job.closing:
            return
        if job.outstanding and not (
            isinstance(job, UploadJob) and job.error is None and job.handle is not None and job.next_off >= job.stop
        ):
            return
        wire = self.wire
        if job.error is not None:
            job.closing = True
            if isinstance(job, UploadJob):
                job.error = self._explain(job)
            if job.handle is not None:
                job.outstanding += 1
                wire.send(w.CLOSE, wire.p_handle(job.handle), lambda t, r: self._closed_after_error(job))
            else:
                self._closed_after_error(job, counted=False)
            return
        if job.handle is None or (job.acked < job.length and not isinstance(job, UploadJob)):
            return
        if job.next_off < job.stop:
            return
        job.closing = True
        if isinstance(job, UploadJob) and job.finalize:
            attrs = Attrs(mode=job.task.mode & 0o7777, mtime=int(job.task.mtime))
            job.outstanding += 2
            wire.send(w.FSETSTAT, wire.p_fsetstat(job.handle, attrs), lambda t, r: self._setstat_done(job, t, r))
            wire.send(w.CLOSE, wire.p_handle(job.handle), lambda t, r: self._closed(job, t, r))
        else:
            job.outstanding += 1
            wire.send(w.CLOSE, wire.p_handle(job.handle), lambda t, r: self._closed(job, t, r))

    def _explain(self, job: UploadJob) -> BaseException:
        """OpenSSH reports a full disk as a bare 'Failure'. Ask the filesystem now, before the
        failed temporary file is removed and its space comes back."""
        err = job.error
        assert err is not None  # asked only about a job that failed
        if not (isinstance(err, OSError) and err.errno == errno.EIO):
            return err
        free = self.wire.free_bytes(os.path.dirname(job.task.tmp) or "/")
        if free is not None and free < max(job.stop - job.start - job.acked, 1 << 20):
            return OSError(errno.ENOSPC, "no space left on device", job.task.dst)
        return err

    @staticmethod
    def _status(job: Job, t: int, r: Any, path: str) -> None:
        """A reply that is only a status: one request fewer in flight, the job failed unless OK."""
        job.outstanding -= 1
        try:
            SFTPWire.expect_status(t, r, path)
        except OSError as exc:
            job.fail(exc)

    def _setstat_done(self, job: Job, t: int, r: Any) -> None:
        self._status(job, t, r, job.task.tmp)

    def _closed(self, job: Job, t: int, r: Any) -> None:
        self._status(job, t, r, job.task.tmp)
        if job.error is None and job.acked < job.length:
            # Only a server answering out of order gets here: never rename unconfirmed data.
            job.fail(w.SFTPProtocolError("server acknowledged the close before every write"))
        job.handle = None
        if job.error is not None:
            if isinstance(job, UploadJob):
                # The close went right behind the writes, so a full disk is diagnosed here,
                # still before the failed temporary file is removed.
                job.error = self._explain(job)
            self._closed_after_error(job, counted=False)
            return
        if isinstance(job, UploadJob) and job.finalize and not job.defer_rename:
            job.outstanding += 1
            self.wire.send_rename(job.task.tmp, job.task.dst, lambda t2, r2: self._renamed(job, t2, r2))
            return
        job.finish()

    def _renamed(self, job: Job, t: int, r: Any) -> None:
        self._status(job, t, r, job.task.dst)
        job.finish()

    def _closed_after_error(self, job: Job, counted: bool = True) -> None:
        if counted:
            job.outstanding -= 1
        job.handle = None
        if isinstance(job, UploadJob) and job.finalize:
            # Leave nothing behind; the file is retried or reported failed.
            job.outstanding += 1
            self.wire.send(w.REMOVE, self.wire.p_path(job.task.tmp), lambda t, r: self._removed(job))
            return
        job.finish()

    def _removed(self, job: Job) -> None:
        job.outstanding -= 1
        job.finish()
