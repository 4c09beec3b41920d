"""Moving files over SFTP connections, beneath the runner (engine/runner.py).

On its connection a worker keeps pp files in flight (Pipeline); a file of at
least p x RANGE_MIN bytes is split into p byte ranges moved over p
connections at once (engine/ranged.py). Both follow Yildirim, Arslan, Kim,
Kosar, Application-Level Optimization of Big Data Transfers Through
Pipelining, Parallelism and Concurrency (paper 000 in docs/papers.md).
"""

from __future__ import annotations

import os
import posixpath
import time
from typing import TYPE_CHECKING, Any

from . import resume
from .block_verify import make_upload_job
from .local_mover import finalize_local, unlink_quiet
from .ranged import move_ranges
from .resume import RANGE_MIN
from .retry import classify
from .runner import found_in_place
from .sftp_jobs import DownloadJob, FileTask, Job, Pipeline, UploadJob, contiguous_prefix, count_progress
from .verify import Piece, SourceHasher

if TYPE_CHECKING:
    from .runner import Runner
    from .transfer import TransferSession


class SFTPMover:
    """Uploads or downloads between a local tree and one SFTP server (the session's pool)."""

    def __init__(self, session: TransferSession, runner: Runner, why: str = "") -> None:
        """`why`: the reason small files take this path rather than a bundle, for the summary."""
        self.why = why
        self.r = runner
        self.s = session
        self.pool = session._pool()
        self.upload = runner.s.direction == "upload"
        self.where = runner.s.remote.display if runner.s.remote else ""

    # -- the runner's interface --------------------------------------------------
    def connect(self) -> Any:
        return self.pool.acquire()

    def release(self, conn: Any, broken: bool) -> None:
        self.pool.release(conn, broken=broken)

    def describe(self) -> str:
        return f"sftp ({self.why})" if self.why else ""

    def stat_source(self, task: FileTask) -> tuple[int, float]:
        if not self.upload:
            conn = self.pool.acquire()
            try:
                a = conn.wire.stat(task.src)
            finally:
                self.pool.release(conn)
            return a.size or 0, float(a.mtime or 0)
        st = os.stat(task.src)
        return st.st_size, st.st_mtime

    def drain(self, conn: Any, gone: list[bool]) -> None:
        r = self.r
        pipe = Pipeline(conn.wire, r.params.pp, self.s.inflight)
        if self.upload and r.params.p > 1 and r.tasks:
            self.offset_writes(conn.wire, r.tasks[0])  # a server that cannot gets p = 1
        try:
            while not r.schedule.surplus():
                i = r.schedule.pop(want=lambda k: self.is_big(r.tasks[k]))
                if i is not None:
                    move_ranges(self, conn, i)
                    continue
                if not r.schedule.has_ready(want=lambda k: self.takes_whole(r.tasks[k])):
                    return
                pipe.run(lambda: self._next_job(conn.wire, len(pipe.active)), self._job_done)
                r.max_files_in_flight = max(r.max_files_in_flight, pipe.max_open_seen)
        except BaseException as exc:
            # The connection died: every file it carried is retried on a new one,
            # from what already reached the destination.
            for job in list(pipe.active):
                self._abandon(job, exc)
            pipe.active.clear()
            raise

    # -- decisions per file ---------------------------------------------------------
    def is_big(self, t: FileTask) -> bool:
        """Split over p connections: big enough, not a block repair, and a server that takes
        writes at an offset."""
        return (
            self.r.params.p > 1
            and t.size >= 2 * RANGE_MIN
            and not t.repair
            and not (self.upload and self.pool.caps.offset_writes is False)
        )

    def takes_whole(self, t: FileTask) -> bool:
        """Whether a worker's pipeline carries this file whole over SFTP."""
        return not self.is_big(t)

    def offset_writes(self, wire: Any, t: FileTask) -> bool:
        """Whether the destination server takes writes at an offset (asked once per server)."""
        caps = self.pool.caps
        if caps.offset_writes is None:
            try:
                caps.probe_offset_writes(wire, posixpath.dirname(t.tmp))
            except ConnectionError:
                raise
            except OSError:
                return True  # the probe could not even create a file: the copy itself reports why
        return bool(caps.offset_writes)

    def _probe_resume(self, wire: Any, t: FileTask) -> int:
        """Bytes of this source version known to be in the temporary file from offset 0 (single
        stream), no further than the file reaches (engine/resume.py)."""
        prefix = contiguous_prefix(t.done) if t.resumable else 0
        if prefix <= 0:
            return 0
        if self.upload and not self.offset_writes(wire, t):
            return 0  # it could only be sent again from its first byte
        try:
            size = (wire.stat(t.tmp, follow=False).size or 0) if self.upload else os.stat(t.tmp).st_size
        except OSError:
            return 0
        return min(prefix, size, t.size)

    def landed(self, indices: list[int]) -> list[int]:
        """`indices` without the files a bundle group of this copy sent whole whose commit
        reply was lost (FileTask.unheard), found now at their final name with their size and
        mtime: the helper renames a file only after it is on disk and verified, so they are done,
        not sent again. One lookup for all of them; only where the copy skips existing files,
        the rule a chunk's start applies too."""
        r = self.r
        unheard = [i for i in indices if r.tasks[i].unheard]
        if not unheard:
            return indices
        for i in unheard:
            r.tasks[i].unheard = False
        if not self.s.skip_existing:
            return indices
        try:
            done = found_in_place(self.s, r.tasks, unheard)
        except Exception:  # noqa: BLE001 - cannot look: send them again, as without this check
            return indices
        for i in sorted(done):
            self.s.bundle.count(verified=r.alg is not None)
            r.finish(i, True, 0.0, None)
        return [i for i in indices if i not in done]

    # -- pipelined whole files -------------------------------------------------------
    def _next_job(self, wire: Any, carrying: int = 0) -> Job | None:
        r = self.r
        while True:
            if r.schedule.surplus():
                return None  # a worker too many: finish the files in flight, then leave
            i = r.schedule.pop(want=lambda k: self.takes_whole(r.tasks[k]), carrying=carrying)
            if i is None:
                return None
            if not r.tasks[i].unheard or self.landed([i]):  # the flag first: this runs per file
                break
        t = r.tasks[i]
        t.attempts += 1
        blocks = r.verify.blocks
        if blocks is not None:
            try:
                if (t.resumable or t.repair) and not self.offset_writes(wire, t):
                    t.resumable, t.repair = False, None  # blocks land only in order: all of it again
                if not t.resumable and not t.repair:
                    blocks.forget(i)
                return make_upload_job(blocks, i, t, wire, self.s.stats, r.journal_range, r.verify.journal_block)
            except BaseException as exc:
                r.failed(i, ConnectionError(f"connection lost: {exc}"), 0.0, t.dst)
                raise
        try:
            start = self._probe_resume(wire, t)
        except BaseException as exc:
            # The connection died before this file got a job: hand it back, then let the
            # worker replace the connection.
            r.failed(i, ConnectionError(f"connection lost: {exc}"), 0.0, t.dst)
            raise
        if start:
            t.resumed = True
            count_progress(t, self.s.stats, start)
        else:
            resume.restart(t, self.s.journal)
        job: Job
        if self.upload:
            job = UploadJob(t, start, t.size, True, self.s.stats, truncate=start == 0)
            if r.alg:
                job.hasher = SourceHasher(r.alg, 0)
                job.defer_rename = True
        else:
            try:
                fd = os.open(t.tmp, os.O_WRONLY | os.O_CREAT | (0 if start else os.O_TRUNC), 0o600)
            except OSError as exc:
                refused = _Refused(t, 0, t.size, True, self.s.stats, -1)
                refused.fail(exc)
                return refused
            job = DownloadJob(t, start, t.size, True, self.s.stats, fd)
            job.fd = fd
        job.on_range = r.journal_range
        return job

    def _job_done(self, job: Job) -> None:
        r = self.r
        i = r.index[id(job.task)]
        t = job.task
        t.moved_total += job.acked
        resume.keep(t, job.ranges)
        if not self.upload:
            if job.error is None:
                try:
                    finalize_local(t, rename=not r.alg)
                except OSError as exc:
                    job.fail(exc)
            if job.error is not None and not classify(job.error)[0]:
                unlink_quiet(t.tmp)
        if job.error is not None:
            r.failed(i, job.error, job.seconds, t.dst if self.upload else t.src)
            return
        if r.verify.blocks is not None:
            r.verify.blocks.transfer_done(i)
        elif r.alg:
            r.verify.submit(i, [job.hasher.piece()] if job.hasher is not None else [Piece(0, t.size, "")])
        else:
            r.finish(i, True, job.seconds, None)

    def _abandon(self, job: Job, exc: BaseException) -> None:
        r = self.r
        i = r.index[id(job.task)]
        job.task.moved_total += job.acked
        resume.keep(job.task, job.ranges)
        if not self.upload and job.fd is not None:
            try:
                os.close(job.fd)
            except OSError:
                pass
            job.fd = None
        job.task.resumable = True  # same source version: the next attempt continues
        where = job.task.dst if self.upload else job.task.src  # the remote side
        r.failed(i, ConnectionError(f"connection lost: {exc}"), time.monotonic() - job.t0, where)


class _Refused(DownloadJob):
    """A download whose temporary file could not even be opened: it fails at once."""

    def begin(self, wire: Any) -> None:
        self.finish()
