"""Upload jobs in block mode: each job's bytes are hashed block by block as they are read, and
a block goes to the verifier once the server has acknowledged all of it.

`make_upload_job` gives a file's next job (the part not yet known to be at the destination,
or a `RepairJob` re-sending only its bad blocks); `attach_range_job` does the same for a byte
range of a file moved over its own connection.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..integrity.algorithms import digest_file
from ..protocols import sftp_wire as w
from ..protocols.sftp_wire import SFTPWire
from .accounting import Stats
from .block_source import Block, BlockSource, block_spans
from .sftp_jobs import FileTask, SourceChanged, UploadJob, count_progress

if TYPE_CHECKING:  # block_verify re-exports this module's functions: importing it here would be a cycle
    from .block_verify import BlockVerifier


class RepairJob(UploadJob):
    """Re-sends only the given blocks of a file into its temporary file, then sets its mode and
    mtime again (the writes changed the mtime) and closes it; the rename waits for verification.

    The span from the first to the last block is one job; gaps between blocks are skipped by
    moving `start` with `next_off`, so the pipeline's in-flight arithmetic
    ((next_off - start) - acked) stays exact."""

    def __init__(self, task: FileTask, blocks: list[Block], stats: Stats | None) -> None:
        spans = sorted((b.offset, b.offset + b.length) for b in blocks)
        super().__init__(task, spans[0][0], spans[-1][1], True, stats, truncate=False)
        self.spans = spans
        self.defer_rename = True

    def feed(self, wire: SFTPWire, budget: int) -> int:
        fd, handle = self.fd, self.handle
        if fd is None or handle is None:
            raise RuntimeError(f"repair of {self.task.src} fed before its files were open")
        sent = 0
        while self.next_off < self.stop and sent < budget:
            span = next((s for s in self.spans if s[1] > self.next_off), None)
            if span is None:
                break
            if span[0] > self.next_off:
                gap = span[0] - self.next_off
                self.start += gap
                self.next_off = span[0]
            n = min(wire.max_write, span[1] - self.next_off)
            data = os.pread(fd, n, self.next_off)
            if len(data) != n:
                self.fail(SourceChanged(f"source shrank while being read: {self.task.src}"))
                break
            off = self.next_off
            self.next_off += n
            self.outstanding += 1
            wire.send(w.WRITE, wire.p_write_head(handle, off, n), self._ack(off, n), data)
            sent += n
        return sent


def _emitter(
    v: BlockVerifier, i: int, t: FileTask, journal_block: Callable[[str, Block], None]
) -> Callable[[Block], None]:
    """A job's blocks, once acknowledged: checked by the verifier, and journaled with their digests."""

    def emit(block: Block) -> None:
        v.block_sent(i, block)
        journal_block(t.rel, block)

    return emit


def _report_ranges(job: UploadJob, src: BlockSource, on_range: Callable[[str, int, int], None]) -> None:
    """Acknowledged ranges go to the journal (`on_range`) and complete the job's blocks."""

    def ranged(rel: str, off: int, n: int) -> None:
        on_range(rel, off, n)
        src.acked(off, n)

    job.on_range = ranged


def make_upload_job(
    v: BlockVerifier,
    i: int,
    t: FileTask,
    wire: SFTPWire,
    stats: Stats | None,
    on_range: Callable[[str, int, int], None],
    journal_block: Callable[[str, Block], None],
) -> UploadJob:
    """The next job for file i in block mode: a repair of its bad blocks, or the part of the file
    not yet known to be at the destination."""
    emit = _emitter(v, i, t, journal_block)
    if t.repair:
        blocks, t.repair = t.repair, None
        v.begin_repair(i)
        job: UploadJob = RepairJob(t, blocks, stats)
        src = BlockSource(
            v.algorithm, [(b.offset, b.length) for b in blocks], emit, job.start, [b.digest for b in blocks]
        )
    else:
        tmp_size = 0
        if t.resumable or v.has_blocks(i):
            try:
                tmp_size = wire.stat(t.tmp, follow=False).size or 0
            except OSError:
                tmp_size = 0
        if t.resumable and tmp_size:
            try:
                v.adopt_tail(i, tmp_size, lambda off, n: digest_file(v.algorithm, t.src, off, n))
            except Exception:  # noqa: BLE001 - unreadable now: those blocks are simply sent again
                pass
        start = v.plan_upload(i, tmp_size)
        if start:
            t.resumed = True
            count_progress(t, stats, start)
        job = UploadJob(t, start, t.size, True, stats, truncate=start == 0)
        job.defer_rename = True
        src = BlockSource(v.algorithm, block_spans(start, t.size, v.block_size), emit, start)
        job.hasher = src
    _report_ranges(job, src, on_range)
    return job


def attach_range_job(
    v: BlockVerifier,
    i: int,
    t: FileTask,
    job: UploadJob,
    on_range: Callable[[str, int, int], None],
    journal_block: Callable[[str, Block], None],
) -> None:
    """Block digests for one byte range of a file moved over its own connection (p > 1)."""
    src = BlockSource(
        v.algorithm, block_spans(job.start, job.stop, v.block_size), _emitter(v, i, t, journal_block), job.start
    )
    job.hasher = src
    _report_ranges(job, src, on_range)
