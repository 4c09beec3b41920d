"""Block-level verification of uploads: `--verify-mode block` (paper 002, section III).

The file is cut into blocks of `block_size` bytes (aligned to the file's start;
a byte range moved on its own connection cuts them at its edges). For each
block:

* the source digest is computed from the bytes as the upload job reads them
  for sending (`BlockSource`, on the job's own thread: no second read);
* once the server has acknowledged every byte of the block, the block goes
  to the `BlockVerifier`, whose thread asks the destination's helper for the
  digest of that byte range of the temporary file, after fsync and dropping
  it from the page cache. Requests are batched and pipelined on the helper's
  one long-lived channel, so block i is checksummed at both ends while block
  i+1 is being sent;
* the source digest is journaled with the block (store migration 2), so a
  resumed transfer verifies what is already at the destination instead of
  sending it again.

When a file's transfer has ended and all its blocks are checked, the file is
renamed into place if every block matched and the blocks cover the file
exactly (the last block is read to the end of the file, so a longer copy
fails too). Otherwise only the mismatching blocks are sent again
(`RepairJob`) and checked again, up to MAX_REPAIRS times; then the file
fails with the expected and the actual digest.

Block size and checksum threads (section III.B): the pipeline runs at the
pace of its slower stage, so `choose_threads` asks for ceil(c / t) checksum
threads when checksumming a block (c) is slower than sending it (t), each
with its own helper; the block size trades the part that cannot overlap
(the last block's checksum, about c for one block) against per-block costs
(one helper request, one fsync, one journal row). See docs/integrity.md.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..integrity.algorithms import digest_bytes, digest_file, new_hasher
from ..integrity.remote import DigestRequest, RemoteChecksumError
from ..protocols import sftp_wire as w
from ..protocols.sftp_wire import SFTPWire
from .sftp_jobs import FileTask, SourceChanged, UploadJob, count_progress
from .verify import RECONNECT_ATTEMPTS, DestinationDigests, Piece, Verifier, VerifyItem, _is_channel_error

MIB = 1024 * 1024
DEFAULT_BLOCK_SIZE = 8 * MIB
MIN_BLOCK_SIZE = 64 * 1024
BATCH_BLOCKS = 128  # blocks per round of helper requests
HELPER_WINDOW = 64  # requests in flight on the helper channel


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


def choose_threads(
    algorithm: str, block_size: int, bandwidth_bps: float | None, max_threads: int | None = None
) -> tuple[int, float, float]:
    """(threads, t, c): checksum threads balancing the two stages, from t (seconds to send one
    block at the link's bandwidth) and c (seconds to hash one block, measured here on 4 MiB)."""
    from ..integrity.model import checksum_threads

    sample = os.urandom(4 * MIB)
    h = new_hasher(algorithm)
    t0 = time.perf_counter()
    h.update(sample)
    h.hexdigest()
    c = (time.perf_counter() - t0) * block_size / len(sample)
    t = block_size * 8 / bandwidth_bps if bandwidth_bps else 0.0
    limit = max_threads or max(1, min(4, os.cpu_count() or 1))
    return checksum_threads(t, c, limit), t, c


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
        self._h = None
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
        if not self.emitted[k] and self.digests[k] is not None and self.acked_bytes[k] >= self.lens[k]:
            self.emitted[k] = True
            self.emit(Block(self.starts[k], self.lens[k], self.digests[k]))


class RepairJob(UploadJob):
    """Re-sends only the given blocks of a file into its temporary file, then sets its mode and
    mtime again (the writes changed the mtime) and closes it; the rename waits for verification.

    The span from the first to the last block is one job; gaps between blocks are skipped by
    moving `start` with `next_off`, so the pipeline's in-flight arithmetic
    ((next_off - start) - acked) stays exact."""

    def __init__(self, task: FileTask, blocks: list[Block], stats) -> None:
        spans = sorted((b.offset, b.offset + b.length) for b in blocks)
        super().__init__(task, spans[0][0], spans[-1][1], True, stats, truncate=False)
        self.spans = spans
        self.defer_rename = True

    def feed(self, wire: SFTPWire, budget: int) -> int:
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
            data = os.pread(self.fd, n, self.next_off)
            if len(data) != n:
                self.fail(SourceChanged(f"source shrank while being read: {self.task.src}"))
                break
            off = self.next_off
            self.next_off += n
            self.outstanding += 1
            wire.send(w.WRITE, wire.p_write_head(self.handle, off, n), self._ack(off, n), data)
            sent += n
        return sent


_UNSETTLED = ("sent", "asked")


@dataclass
class _File:
    """One file's blocks. Kept cheap for files of many blocks: offsets sorted for overlap checks,
    a count of blocks still to check instead of a scan."""

    index: int
    task: FileTask
    blocks: dict[int, Block] = field(default_factory=dict)  # by offset; never overlapping
    offsets: list[int] = field(default_factory=list)  # sorted keys of `blocks`
    unsettled: int = 0  # blocks sent or asked, no verdict yet
    done: bool = False  # the transfer ended; check once every block is settled
    finalizing: bool = False
    hooked: bool = False  # the test hook ran for this round

    def drop(self, off: int) -> None:
        b = self.blocks.pop(off)
        self.offsets.pop(bisect_left(self.offsets, off))
        if b.state in _UNSETTLED:
            self.unsettled -= 1

    def covered(self, limit: int | None = None) -> int:
        """End of the unbroken run of blocks from offset 0 that are not bad (and end by `limit`)."""
        end = 0
        for off in self.offsets:
            b = self.blocks[off]
            if off != end or b.state == "bad" or (limit is not None and off + b.length > limit):
                break
            end = off + b.length
        return end

    def put(self, block: Block) -> None:
        """Add a block; whatever it overlaps (an earlier copy of it) goes."""
        lo, hi = block.offset, block.offset + block.length
        k = bisect_left(self.offsets, lo)
        if k and self.offsets[k - 1] + self.blocks[self.offsets[k - 1]].length > lo:
            k -= 1
        while k < len(self.offsets) and (self.offsets[k] < hi or self.offsets[k] == lo):
            self.drop(self.offsets[k])
        self.blocks[lo] = block
        insort(self.offsets, lo)
        if block.state in _UNSETTLED:
            self.unsettled += 1

    def clear(self) -> None:
        self.blocks.clear()
        self.offsets.clear()
        self.unsettled = 0


@dataclass
class BlockStats:
    verified: int = 0  # blocks whose digests matched
    mismatched: int = 0
    resent: int = 0  # blocks sent again to repair them
    bytes_resent: int = 0
    from_journal: int = 0  # blocks a resumed transfer verified instead of sending


class BlockVerifier(Verifier):
    """Verifies uploads block by block on `threads` threads, each with its own helper."""

    block_mode = True

    def __init__(
        self,
        make_dest: Callable[[], DestinationDigests],
        algorithm: str,
        block_size: int,
        threads: int = 1,
        time_left: Callable[[], float] = lambda: float("inf"),
        before: Callable[[VerifyItem], None] | None = None,
        max_threads: int = 1,
    ) -> None:
        super().__init__(make_dest(), lambda item, ok, err: None, time_left=time_left, before=before)
        self._make_dest = make_dest
        # Above `threads`, up to this many: added while running when the measured checksum time
        # per block exceeds the measured transfer time per block (section III.B, online).
        self.max_threads = max(threads, max_threads)
        self._sent_bytes = 0
        self._first_sent: float | None = None
        self._next_check = 0  # helper bytes at which to look at the balance again
        self.algorithm = algorithm
        self.block_size = block_size
        self.threads = threads
        self.dests = [self.dest] + [make_dest() for _ in range(threads - 1)]
        self.on_mismatch: Callable[[int, list[Block], str], None] = lambda i, blocks, err: None
        self.bstats = BlockStats()
        self.helper_seconds = 0.0
        self.helper_bytes = 0
        self._files: dict[int, _File] = {}
        self._pending: deque[tuple[_File, Block]] = deque()
        self._done: set[int] = set()  # files whose transfer ended, waiting for their verdict
        self._workers = [
            threading.Thread(target=self._work, args=(d,), name=f"verify-blocks{k}", daemon=True)
            for k, d in enumerate(self.dests)
        ]
        self._busy = 0

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> BlockVerifier:
        """Starts the workers; each opens its own helper first. The chunk's data flows meanwhile:
        a helper's exec and hello take about four round trips (0.2 s on wan50), and no block can
        be checked before the first one is sent anyway."""
        for th in self._workers:
            th.start()
        return self

    @staticmethod
    def _start(dest: DestinationDigests) -> None:
        """Opens `dest`'s connection and helper (raising what opening raises)."""
        dest.start()
        dest.start_error = None
        if dest._helper is not None:
            dest._helper.window = HELPER_WINDOW

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        for th in list(self._workers):
            th.join()
        for d in self.dests:
            d.close()

    @property
    def where(self) -> str:
        return self.dest.where

    # -- what the engine calls -------------------------------------------------------
    def begin_chunk(self) -> None:
        with self._cv:
            self._files.clear()
            self._pending.clear()
            self._done.clear()

    def register(self, i: int, task: FileTask, journal_blocks: list | None = None) -> None:
        """A file of this chunk; `journal_blocks` [[offset, length, "algo:hex"], ...] from an earlier run."""
        with self._cv:
            f = self._files[i] = _File(i, task)
            prefix = f"{self.algorithm}:"
            for off, n, digest in journal_blocks or ():
                if digest.startswith(prefix) and n > 0 and off + n <= task.size:
                    f.put(Block(off, n, digest[len(prefix) :], "journal"))

    def has_blocks(self, i: int) -> bool:
        with self._cv:
            return bool(self._files[i].blocks)

    def adopt_tail(self, i: int, tmp_size: int, source_digest: Callable[[int, int], str]) -> int:
        """The blocks the temporary file holds past the known ones (the journal lags the
        server by up to a batch, and a killed copy loses what it had not journaled yet) become
        blocks to check, with digests computed from the source now, instead of blocks to send:
        file-level resume trusts the temporary file's length; this checks every block of it.
        Returns how many blocks were adopted."""
        with self._cv:
            f = self._files[i]
            cover = f.covered()
        # The last span may end inside a block: it is checked as a block of its own length (as
        # a -p range's edge cuts one), and the upload continues from its end.
        spans = block_spans(cover, min(tmp_size, f.task.size), self.block_size)
        digests = [(o, n, source_digest(o, n)) for o, n in spans]  # source reads: outside the lock
        with self._cv:
            for o, n, d in digests:
                f.put(Block(o, n, d, "journal"))
        return len(digests)

    def plan_upload(self, i: int, tmp_size: int) -> int:
        """Where a single-stream upload starts: after the blocks from offset 0 that are known to be
        at the destination (this run or the journal); those not checked yet are queued now."""
        with self._cv:
            f = self._files[i]
            self._undone(f)
            start = f.covered(tmp_size)
            for off in [o for o in f.offsets if o >= start]:
                f.drop(off)
            self._queue_journal(f)
            return start

    def missing(self, i: int) -> list[tuple[int, int]]:
        """Byte ranges of the file with no good block (for a ranged transfer); queues journal blocks."""
        with self._cv:
            f = self._files[i]
            self._undone(f)
            for off in [o for o, b in f.blocks.items() if b.state == "bad"]:
                f.drop(off)
            self._queue_journal(f)
            out, cur = [], 0
            for off in f.offsets:
                if off > cur:
                    out.append((cur, off))
                cur = off + f.blocks[off].length
            if cur < f.task.size:
                out.append((cur, f.task.size))
            return out

    def forget(self, i: int) -> None:
        """The temporary file is created afresh: nothing in it is known any more."""
        with self._cv:
            f = self._files[i]
            f.clear()
            self._undone(f)

    def begin_repair(self, i: int) -> None:
        with self._cv:
            f = self._files[i]
            self._undone(f)
            f.hooked = False

    def block_sent(self, i: int, block: Block) -> None:
        """Every byte of `block` is acknowledged by the server: check it."""
        with self._cv:
            f = self._files[i]
            f.put(block)
            self._pending.append((f, block))
            self._sent_bytes += block.length
            if self._first_sent is None:
                self._first_sent = time.monotonic()
            self._cv.notify()

    def transfer_done(self, i: int) -> None:
        with self._cv:
            f = self._files[i]
            if f.task.size == 0 and not f.blocks:
                empty = Block(0, 0, digest_bytes(self.algorithm, b""))
                f.put(empty)
                self._pending.append((f, empty))
            f.done = True
            self._done.add(i)
            self._cv.notify()

    # -- internals (lock held) ------------------------------------------------------------
    def _undone(self, f: _File) -> None:
        f.done = False
        self._done.discard(f.index)

    def _queue_journal(self, f: _File) -> None:
        for b in f.blocks.values():
            if b.state == "journal":
                b.state = "sent"
                b.from_journal = True
                f.unsettled += 1
                self._pending.append((f, b))
        self._cv.notify()

    def _ready_files(self) -> list[_File]:
        ready = [self._files[i] for i in self._done if not self._files[i].finalizing and not self._files[i].unsettled]
        for f in ready:
            f.finalizing = True
        return ready

    # -- the worker threads ------------------------------------------------------------------
    def _work(self, dest: DestinationDigests) -> None:
        if dest.pool is not None and dest.wire is None:
            try:
                self._start(dest)
            except Exception as exc:  # noqa: BLE001 - kept: the first batch reconnects as after a dropped channel
                dest.start_error = exc
        while True:
            with self._cv:
                while True:
                    batch = []
                    while self._pending and len(batch) < BATCH_BLOCKS:
                        f, b = self._pending.popleft()
                        if f.blocks.get(b.offset) is b and b.state == "sent":
                            batch.append((f, b))
                    finals = self._ready_files()
                    if batch or finals:
                        break
                    if self._stop and not self._pending and not self._busy:
                        self._cv.notify_all()
                        return
                    if not self._pending:
                        self._cv.wait(0.5)
                for _, b in batch:
                    b.state = "asked"
                hook = []
                for f, _ in batch:
                    if not f.hooked:
                        f.hooked = True
                        hook.append(f)
                self._busy += 1
            try:
                t0 = time.monotonic()
                try:
                    if self.before is not None:
                        for f in hook:
                            self.before(VerifyItem(f.index, f.task.tmp))
                    results = self._digests(dest, batch) if batch else []
                except Exception as exc:  # noqa: BLE001 - a verdict for every file, never a dead thread
                    results = [exc] * len(batch)
                with self._cv:
                    for (f, b), res in zip(batch, results):
                        if f.blocks.get(b.offset) is not b:
                            continue  # replaced meanwhile by a re-sent block
                        f.unsettled -= 1
                        if isinstance(res, BaseException):
                            b.state, b.actual = "bad", ""
                            b.error = res
                            continue
                        digest, length = res
                        b.actual = digest
                        good = digest == b.digest and (length is None or length == b.length)
                        b.state = "ok" if good else "bad"
                        if length is not None and length > b.length:
                            b.error = OSError(
                                f"the destination copy is longer than the source "
                                f"({b.offset + length} > {f.task.size} bytes)"
                            )
                        if dest.where == "coreutils":
                            continue  # checked as a whole file at the end
                        if good:
                            self.bstats.verified += 1
                            self.bstats.from_journal += b.from_journal
                        elif b.error is None:
                            self.bstats.mismatched += 1
                    finals += self._ready_files()
                self.seconds += time.monotonic() - t0
                self._rebalance()
                try:
                    self._finish_files(dest, finals)
                except Exception as exc:  # noqa: BLE001
                    for f in finals:
                        if f.finalizing:
                            self._settle(
                                f,
                                VerifyItem(f.index, f.task.tmp),
                                False,
                                f"could not verify the destination copy: {exc}",
                            )
            finally:
                with self._cv:
                    self._busy -= 1
                    self._cv.notify_all()

    def balance(self) -> tuple[float, float] | None:
        """(t, c) per block measured so far: t from the blocks acknowledged per second of
        transfer, c from the helpers' own timing (fsync, read back, hash); None before
        there is enough to go by."""
        with self._cv:
            if self._first_sent is None or self.helper_bytes < 4 * self.block_size or not self._sent_bytes:
                return None
            t = (time.monotonic() - self._first_sent) * self.block_size / self._sent_bytes
            c = self.helper_seconds * self.block_size / self.helper_bytes
            return t, c

    def _rebalance(self) -> None:
        """One more checksum thread while c > t x threads (checked every 8 blocks checked)."""
        from ..integrity.model import checksum_threads

        with self._cv:
            if self._stop or len(self._workers) >= self.max_threads or self.helper_bytes < self._next_check:
                return
            self._next_check = self.helper_bytes + 8 * self.block_size
        measured = self.balance()
        if measured is None or checksum_threads(*measured, self.max_threads) <= len(self._workers):
            return
        try:
            dest = self._make_dest()
            self._start(dest)
        except Exception:  # noqa: BLE001 - no extra helper: carry on with the threads there are
            self.max_threads = len(self._workers)
            return
        with self._cv:
            if self._stop:
                dest.close()
                return
            th = threading.Thread(
                target=self._work, args=(dest,), name=f"verify-blocks{len(self._workers)}", daemon=True
            )
            self.dests.append(dest)
            self._workers.append(th)
            self.threads = len(self._workers)
            th.start()

    def _digests(self, dest: DestinationDigests, batch: list[tuple[_File, Block]]) -> list:
        """(digest, length read or None) or an exception, per block, from the destination's disk.

        A dead channel is reopened and the batch asked again, at most `max_rounds` times: a server
        that breaks the channel on every attempt ends in an error for these blocks, not a loop."""
        rounds = 0
        while True:
            if dest.start_error is not None:
                out = [dest.start_error] * len(batch)
                rounds += 1
                if rounds > self.max_rounds or not self._reconnect_one(dest):
                    return out
            try:
                if dest.where == "helper":
                    reqs = [
                        DigestRequest(
                            f.task.tmp,
                            self.algorithm,
                            b.offset,
                            None if b.offset + b.length == f.task.size else b.length,
                        )
                        for f, b in batch
                    ]
                    out = []
                    for (f, b), r in zip(batch, dest._helper.digest_many(reqs)):
                        if not isinstance(r, BaseException):
                            with self._cv:  # c as the helper measured it: fsync, read back, hash
                                self.helper_seconds += r.seconds
                                self.helper_bytes += r.digests.length
                        out.append(
                            r
                            if isinstance(r, BaseException)
                            else (r.digest, r.digests.length if b.offset + b.length == f.task.size else None)
                        )
                elif dest.where == "coreutils":
                    # Whole files only: the file is checked as one block when it is complete.
                    out = [(b.digest, None) for f, b in batch]
                else:
                    items = [VerifyItem(f.index, f.task.tmp, [Piece(b.offset, b.length, b.digest)]) for f, b in batch]
                    out = [r if isinstance(r, BaseException) else (r[0], None) for r in dest.digests(items)]
            except Exception as exc:  # noqa: BLE001 - the channel died
                out = [exc] * len(batch)
            if not any(isinstance(r, BaseException) and _is_channel_error(r) for r in out):
                return out
            rounds += 1
            if rounds > self.max_rounds or not self._reconnect_one(dest):
                return out

    def _reconnect_one(self, dest: DestinationDigests) -> bool:
        for attempt in range(RECONNECT_ATTEMPTS):
            wait = min(10.0, 0.5 * 2**attempt, self.time_left())
            if wait <= 0 or self._sleep_or_stop(wait):
                return False
            try:
                dest.close()
                self._start(dest)
                return True
            except Exception:  # noqa: BLE001 - still down
                continue
        return False

    def _finish_files(self, dest: DestinationDigests, finals: list[_File]) -> None:
        """Verdicts for files whose blocks are all checked: rename the good ones (pipelined)."""
        good: list[_File] = []
        for f in finals:
            blocks = sorted(f.blocks.values(), key=lambda b: b.offset)
            errors = [b for b in blocks if b.error is not None]
            bad = [b for b in blocks if b.state == "bad" and b.error is None]
            if dest.where == "coreutils" and not errors:
                bad = self._whole_file(dest, f)
            covered = sum(b.length for b in blocks)
            item = VerifyItem(f.index, f.task.tmp, [Piece(b.offset, b.length, b.digest) for b in blocks])
            if errors:
                self._settle(f, item, False, f"could not verify the destination copy: {errors[0].error}")
            elif bad:
                self.stats.mismatched += 1
                first = bad[0]
                msg = (
                    f"checksum mismatch in {len(bad)} of {len(blocks)} blocks, first at "
                    f"{first.offset}+{first.length}: source {self.algorithm}:{first.digest} "
                    f"destination {self.algorithm}:{first.actual or '?'}"
                )
                with self._cv:
                    self._undone(f)
                    f.finalizing = f.hooked = False
                if dest.where == "coreutils":
                    self.on_verdict(item, False, msg)
                else:
                    self.bstats.resent += len(bad)
                    self.bstats.bytes_resent += sum(b.length for b in bad)
                    self.on_mismatch(f.index, bad, msg)
            elif covered != f.task.size or (f.task.size and blocks[0].offset != 0):
                self._settle(f, item, False, f"blocks cover {covered} of {f.task.size} bytes")
            else:
                good.append(f)
        if not good:
            return
        wire = dest.wire
        errors: dict[int, BaseException] = {}
        for f in good:

            def on_reply(t, r, f=f):
                try:
                    SFTPWire.expect_status(t, r, f.task.dst)
                except OSError as exc:
                    errors[f.index] = exc

            try:
                wire.send_rename(f.task.tmp, f.task.dst, on_reply)
            except Exception as exc:  # noqa: BLE001 - reported per file by on_verdict
                errors[f.index] = exc
        try:
            while wire.outstanding:
                wire.pump(block=True)
        except Exception as exc:  # noqa: BLE001 - the connection died with renames in flight
            for f in good:
                errors.setdefault(f.index, exc)
        for f in good:
            item = VerifyItem(f.index, f.task.tmp, [])
            item.renamed = f.index not in errors
            item.rename_error = errors.get(f.index)
            self.stats.verified += 1 if item.renamed else 0
            self._settle(f, item, True, None)

    def _whole_file(self, dest: DestinationDigests, f: _File) -> list[Block]:
        """coreutils: one whole-file digest, against the source read again (the only way there)."""
        try:
            remote = dest._coreutils.digest(f.task.tmp, self.algorithm).digest
            local = digest_file(self.algorithm, f.task.src)
        except (OSError, RemoteChecksumError) as exc:
            b = Block(0, f.task.size, "", "bad")
            b.error = exc
            return [b]
        if remote == local:
            return []
        return [Block(0, f.task.size, local, "bad", remote)]

    def _settle(self, f: _File, item: VerifyItem, ok: bool, error: str | None) -> None:
        with self._cv:
            if ok:
                f.clear()  # free its blocks; the entry stays in case the rename must be retried
            f.finalizing = False
            self._undone(f)
        self.on_verdict(item, ok, error)


def make_upload_job(
    v: BlockVerifier,
    i: int,
    t: FileTask,
    wire: SFTPWire,
    stats,
    on_range: Callable[[str, int, int], None],
    journal_block: Callable[[str, Block], None],
) -> UploadJob:
    """The next job for file i in block mode: a repair of its bad blocks, or the part of the file
    not yet known to be at the destination."""

    def emit(block: Block) -> None:
        v.block_sent(i, block)
        journal_block(t.rel, block)

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

    def ranged(rel: str, off: int, n: int) -> None:
        on_range(rel, off, n)
        src.acked(off, n)

    job.on_range = ranged
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

    def emit(block: Block) -> None:
        v.block_sent(i, block)
        journal_block(t.rel, block)

    src = BlockSource(v.algorithm, block_spans(job.start, job.stop, v.block_size), emit, job.start)
    job.hasher = src

    def ranged(rel: str, off: int, n: int) -> None:
        on_range(rel, off, n)
        src.acked(off, n)

    job.on_range = ranged


__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "Block",
    "BlockSource",
    "BlockStats",
    "BlockVerifier",
    "RepairJob",
    "attach_range_job",
    "block_spans",
    "choose_threads",
    "make_upload_job",
]
