"""p > 1: one big file split into byte ranges, moved over p connections at once.

A range that fails leaves the others' acknowledged bytes in place: the next
attempt sends only the ranges still missing (engine/resume.py), and the file
is finalized (mode, mtime, rename or verification) once, when all are in.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ..integrity.algorithms import digest_file
from ..protocols import sftp_wire as w
from ..protocols.sftp_wire import Attrs, SFTPProtocolError
from . import resume
from .block_verify import attach_range_job
from .local_mover import finalize_local
from .resume import RANGE_MIN
from .sftp_jobs import DownloadJob, FileTask, Job, Pipeline, UploadJob, count_progress
from .verify import Piece, SourceHasher

if TYPE_CHECKING:
    from .sftp_mover import SFTPMover


def pieces_of(t: FileTask, p: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(what is missing, that split into about p pieces so every connection has work)."""
    step = -(-t.size // p)
    todo = (
        t.todo_ranges if t.todo_ranges is not None else [(lo, min(lo + step, t.size)) for lo in range(0, t.size, step)]
    )
    pieces: list[tuple[int, int]] = []
    for lo, hi in todo:
        n = max(1, round((hi - lo) / step))
        sub = -(-(hi - lo) // n)
        pieces += [(a, min(a + sub, hi)) for a in range(lo, hi, sub)]
    return todo, pieces


def move_ranges(mover: SFTPMover, conn: Any, i: int) -> None:
    r, s = mover.r, mover.s
    t = r.tasks[i]
    t.attempts += 1
    p = min(r.params.p, max(1, t.size // RANGE_MIN))
    todo, pieces = pieces_of(t, p)
    fresh = t.todo_ranges is None
    blocks = r.verify.blocks
    if blocks is not None and fresh:
        blocks.forget(i)
    elif blocks is not None:
        blocks.missing(i)  # queues blocks known from before for checking
    if not fresh:
        t.resumed = True
        count_progress(t, s.stats, t.size - sum(hi - lo for lo, hi in todo))
    else:
        resume.restart(t, s.journal)
    t0 = time.monotonic()
    extra = []
    try:
        for _ in range(min(p, len(pieces)) - 1):
            extra.append(mover.pool.acquire())
    except BaseException:
        for c in extra:
            mover.pool.release(c)
        r.schedule.give_back(i)
        t.attempts -= 1
        raise
    conns = [conn, *extra]
    jobs: list[Job] = []
    local_fd = None
    error: BaseException | None = None
    lost = False
    try:
        jobs, local_fd = _make_jobs(mover, conn, i, t, pieces, fresh)
        errors = _run_jobs(conns, jobs, s.inflight)
        lost = bool(errors)
        error = errors[0] if errors else next((j.error for j in jobs if j.error), None)
        if error is None:
            if mover.upload:
                conn.wire.setstat(t.tmp, Attrs(mode=t.mode & 0o7777, mtime=int(t.mtime)))
                if not r.alg:
                    conn.wire.rename(t.tmp, t.dst)
            else:
                if local_fd is not None:
                    os.close(local_fd)
                local_fd = None
                finalize_local(t, rename=not r.alg)
    except (OSError, SFTPProtocolError) as exc:
        error = exc
    finally:
        if local_fd is not None:
            os.close(local_fd)
        for c in extra:
            mover.pool.release(c, broken=not c.alive)
    t.moved_total += sum(j.acked for j in jobs)
    if error is None:
        _done(mover, i, t, jobs, fresh, t0)
        return
    # Keep what arrived: the next attempt sends only the ranges still missing. The ranges
    # acknowledged, not a count from each range's start: a short read leaves a gap.
    done = [(rg[0], rg[1]) for j in jobs for rg in j.ranges]
    if done:
        t.journaled = True
    t.todo_ranges = resume.subtract(todo if not fresh else [(0, t.size)], done)
    if blocks is not None:
        t.todo_ranges = blocks.missing(i)  # only whole blocks with a digest count as sent
    if lost:
        error = ConnectionError(f"connection lost: {error}")
    r.failed(i, error, time.monotonic() - t0, t.dst)
    if not conn.alive:
        raise SFTPProtocolError("connection lost during a ranged transfer")


def _make_jobs(
    mover: SFTPMover, conn: Any, i: int, t: FileTask, pieces: list[tuple[int, int]], fresh: bool
) -> tuple[list[Job], int | None]:
    r, s = mover.r, mover.s
    jobs: list[Job]
    local_fd = None
    if mover.upload:
        if fresh:
            # Create (and truncate) the temporary file once; ranges open it without TRUNC.
            t_, r_ = conn.wire.call(
                w.OPEN, conn.wire.p_open(t.tmp, w.FXF_WRITE | w.FXF_CREAT | w.FXF_TRUNC, Attrs(mode=0o600))
            )
            handle = conn.wire.expect_handle(t_, r_, t.tmp)
            t_, r_ = conn.wire.call(w.CLOSE, conn.wire.p_handle(handle))
            conn.wire.expect_status(t_, r_, t.tmp)
        uploads = [UploadJob(t, lo, hi, False, s.stats, truncate=False) for lo, hi in pieces]
        for up in uploads:
            if r.verify.blocks is not None:
                up.defer_rename = True
                attach_range_job(r.verify.blocks, i, t, up, r.journal_range, r.verify.journal_block)
            elif r.alg:
                up.hasher = SourceHasher(r.alg, up.start)
        jobs = list(uploads)
    else:
        local_fd = os.open(t.tmp, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if fresh else 0), 0o600)
        try:
            os.ftruncate(local_fd, t.size)
        except OSError:
            os.close(local_fd)
            raise
        jobs = [DownloadJob(t, lo, hi, False, s.stats, local_fd) for lo, hi in pieces]
    for j in jobs:
        if j.on_range is None:
            j.on_range = r.journal_range
    return jobs, local_fd


def _run_jobs(conns: list[Any], jobs: list[Job], inflight: int) -> list[BaseException]:
    """One thread per connection, each taking the next range until none is left."""
    queue = deque(jobs)
    qlock = threading.Lock()
    errors: list[BaseException] = []

    def next_piece() -> Job | None:
        with qlock:
            return queue.popleft() if queue else None

    def run_one(c: Any) -> None:
        try:
            Pipeline(c.wire, 1, inflight).run(next_piece, lambda j: None)
        except BaseException as exc:  # noqa: BLE001 - collected, handled by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run_one, args=(c,), daemon=True) for c in conns]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def _done(mover: SFTPMover, i: int, t: FileTask, jobs: list[Job], fresh: bool, t0: float) -> None:
    r = mover.r
    if r.verify.blocks is not None:
        r.verify.blocks.transfer_done(i)
        return
    if not r.alg:
        r.finish(i, True, time.monotonic() - t0, None)
        return
    if mover.upload and fresh:
        vpieces = sorted((j.hasher.piece() for j in jobs), key=lambda pc: pc.offset)
    elif mover.upload:
        vpieces = [Piece(0, t.size, digest_file(r.alg, t.src))]  # resumed: earlier ranges too
    else:
        vpieces = [Piece(0, t.size, "")]
    r.verify.submit(i, vpieces)
