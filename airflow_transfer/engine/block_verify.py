"""Block-level verification of uploads: `--verify-mode block` (Liu, Jung, Kettimuthu, Sun,
Towards Optimizing Large-Scale Data Transfers with End-to-End Integrity Verification, section III).

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

The pieces live in:

  block_source.py    blocks and their source digests, as the job reads them
  block_jobs.py      upload and repair jobs wired to hash and hand on their blocks
  block_book.py      each file's blocks, those still to check, files ready for a verdict
  block_rounds.py    asking one destination for a batch's digests, reconnecting
  block_verdicts.py  a finished file's verdict from its blocks; pipelined renames
  block_threads.py   how many checksum threads keep up with the transfer
  block_verify.py    the verifier's threads, tying these together
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .block_book import Asked, BlockBook, BlockStats, FileBlocks
from .block_jobs import RepairJob, attach_range_job, make_upload_job
from .block_rounds import BlockDigests, open_destination
from .block_source import Block, BlockSource, block_spans
from .block_threads import MIB, ThreadBalance, choose_threads
from .block_verdicts import judge, rename_all
from .sftp_jobs import FileTask
from .verify import Verifier
from .verify_digests import DestinationDigests
from .verify_items import VerifyItem

DEFAULT_BLOCK_SIZE = 8 * MIB
MIN_BLOCK_SIZE = 64 * 1024
BATCH_BLOCKS = 128  # blocks per round of helper requests


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
        self.algorithm = algorithm
        self.block_size = block_size
        self.threads = threads
        self.dests = [self.dest] + [make_dest() for _ in range(threads - 1)]
        self.on_mismatch: Callable[[int, list[Block], str], None] = lambda i, blocks, err: None
        self.bstats = BlockStats()
        self.book = BlockBook(algorithm)  # guarded by self._cv
        self.timing = ThreadBalance(block_size)
        self._workers = [self._worker(d, k) for k, d in enumerate(self.dests)]
        self._busy = 0
        # Set once a file starts going over SFTP: only then do the workers open their helpers.
        # A chunk whose files all travel in bundles (checked by the bundle sink) never needs
        # one: no exec channel, no python3 started on the server for nothing.
        self._wanted = False

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> BlockVerifier:
        """Starts the workers; each opens its own helper once the first file starts going over
        SFTP (`_want`). The file's data flows meanwhile: a helper's exec and hello take about
        four round trips (0.2 s on wan50), and no block can be checked before the first one is
        sent anyway."""
        for th in self._workers:
            th.start()
        return self

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

    def balance(self) -> tuple[float, float] | None:
        """(t, c) per block measured so far: t from the blocks acknowledged per second of
        transfer, c from the helpers' own timing (fsync, read back, hash); None before
        there is enough to go by."""
        return self.timing.measured()

    # -- what the engine calls -------------------------------------------------------
    def begin_chunk(self) -> None:
        with self._cv:
            self.book.clear()

    def register(self, i: int, task: FileTask, journal_blocks: list | None = None) -> None:
        """A file of this chunk; `journal_blocks` [[offset, length, "algo:hex"], ...] from an earlier run."""
        self.register_all([(i, task, journal_blocks)])

    def register_all(self, files: list[tuple[int, FileTask, list | None]]) -> None:
        """register() for a chunk's files at once (one lock taken for all of them)."""
        with self._cv:
            for i, task, journal_blocks in files:
                self.book.register(i, task, journal_blocks)

    def has_blocks(self, i: int) -> bool:
        with self._cv:
            return bool(self.book.files[i].blocks)

    def adopt_tail(self, i: int, tmp_size: int, source_digest: Callable[[int, int], str]) -> int:
        """The blocks the temporary file holds past the known ones (the journal lags the
        server by up to a batch, and a killed copy loses what it had not journaled yet) become
        blocks to check, with digests computed from the source now, instead of blocks to send:
        file-level resume trusts the temporary file's length; this checks every block of it.
        Returns how many blocks were adopted."""
        with self._cv:
            f = self.book.files[i]
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
            start = self.book.plan_upload(i, tmp_size)
            self._want()
            return start

    def missing(self, i: int) -> list[tuple[int, int]]:
        """Byte ranges of the file with no good block (for a ranged transfer); queues journal blocks."""
        with self._cv:
            out = self.book.missing(i)
            self._want()
            return out

    def _want(self) -> None:
        """A file goes over SFTP (called under the lock): the workers open their helpers now."""
        self._wanted = True
        self._cv.notify_all()

    def forget(self, i: int) -> None:
        """The temporary file is created afresh: nothing in it is known any more."""
        with self._cv:
            f = self.book.files[i]
            f.clear()
            self.book.undone(f)

    def begin_repair(self, i: int) -> None:
        with self._cv:
            f = self.book.files[i]
            self.book.undone(f)
            f.hooked = False

    def block_sent(self, i: int, block: Block) -> None:
        """Every byte of `block` is acknowledged by the server: check it."""
        with self._cv:
            self.book.sent(i, block)
            self.timing.sent(block.length)
            self._cv.notify()

    def transfer_done(self, i: int) -> None:
        with self._cv:
            self.book.transfer_done(i)
            self._cv.notify()

    # -- the worker threads ------------------------------------------------------------------
    def _worker(self, dest: DestinationDigests, k: int) -> threading.Thread:
        return threading.Thread(target=self._work, args=(dest,), name=f"verify-blocks{k}", daemon=True)

    def _work(self, dest: DestinationDigests) -> None:
        asker = BlockDigests(dest, self.algorithm, self.max_rounds, self.time_left, self._sleep_or_stop, self.timing)
        opened = dest.pool is None or dest.wire is not None
        while True:
            with self._cv:
                while True:
                    if not opened and self._wanted:
                        batch, finals = [], []
                        break
                    batch = self.book.next_batch(BATCH_BLOCKS)
                    finals = self.book.ready()
                    if batch or finals:
                        break
                    if self._stop and not self.book.pending and not self._busy:
                        self._cv.notify_all()
                        return
                    if not self.book.pending:
                        self._cv.wait(0.5)
                hook = self.book.ask(batch)
                self._busy += bool(batch or finals)
            if not opened:
                opened = True
                try:
                    open_destination(dest)
                except Exception as exc:  # noqa: BLE001 - kept: the first batch reconnects as after a dropped channel
                    dest.start_error = exc
                if not batch and not finals:
                    continue
            try:
                self._check(asker, batch, hook, finals)
            finally:
                with self._cv:
                    self._busy -= 1
                    self._cv.notify_all()

    def _check(self, asker: BlockDigests, batch: list[Asked], hook: list[FileBlocks], finals: list[FileBlocks]) -> None:
        """Asks the destination about a batch of blocks, then gives the files that are complete now
        (and `finals`, complete already) their verdicts."""
        dest = asker.dest
        t0 = time.monotonic()
        try:
            if self.before is not None:
                for f in hook:
                    self.before(VerifyItem(f.index, f.task.tmp))
            results = asker.ask(batch) if batch else []
        except Exception as exc:  # noqa: BLE001 - a verdict for every file, never a dead thread
            results = [exc] * len(batch)
        with self._cv:
            # coreutils: no block verdicts to count, the file is checked as a whole at the end
            self.book.answer(batch, results, None if dest.where == "coreutils" else self.bstats)
            finals += self.book.ready()
        self.seconds += time.monotonic() - t0
        self._rebalance()
        try:
            self._finish_files(dest, finals)
        except Exception as exc:  # noqa: BLE001 - every file of the batch gets a verdict, whatever failed
            for f in finals:
                if f.finalizing:
                    item = VerifyItem(f.index, f.task.tmp)
                    self._settle(f, item, False, f"could not verify the destination copy: {exc}")

    def _rebalance(self) -> None:
        """One more checksum thread, with a helper of its own, while c > t x threads."""
        with self._cv:
            if self._stop:
                return
            threads = len(self._workers)
        if not self.timing.wants_more(threads, self.max_threads):
            return
        try:
            dest = self._make_dest()
            open_destination(dest)
        except Exception:  # noqa: BLE001 - no extra helper: carry on with the threads there are
            self.max_threads = len(self._workers)
            return
        with self._cv:
            if self._stop:
                dest.close()
                return
            th = self._worker(dest, len(self._workers))
            self.dests.append(dest)
            self._workers.append(th)
            self.threads = len(self._workers)
            th.start()

    # -- verdicts ------------------------------------------------------------------------------
    def _finish_files(self, dest: DestinationDigests, finals: list[FileBlocks]) -> None:
        """Verdicts for files whose blocks are all checked: rename the good ones (pipelined)."""
        good: list[FileBlocks] = []
        for f in finals:
            j = judge(f, dest, self.algorithm)
            if j.error is None:
                good.append(f)
            elif j.bad:
                self._mismatch(f, j.item, j.bad, j.error, dest)
            else:
                self._settle(f, j.item, False, j.error)
        if not good:
            return
        errors = rename_all(dest.wire, good)
        for f in good:
            item = VerifyItem(f.index, f.task.tmp, [], renamed=f.index not in errors, rename_error=errors.get(f.index))
            self.stats.verified += 1 if item.renamed else 0
            self._settle(f, item, True, None)

    def _mismatch(self, f: FileBlocks, item: VerifyItem, bad: list[Block], msg: str, dest: DestinationDigests) -> None:
        """Blocks differ: the engine sends them again (a file checked as a whole fails here)."""
        self.stats.mismatched += 1
        with self._cv:
            self.book.undone(f)
            f.finalizing = f.hooked = False
        if dest.where == "coreutils":
            self.on_verdict(item, False, msg)
        else:
            self.bstats.resent += len(bad)
            self.bstats.bytes_resent += sum(b.length for b in bad)
            self.on_mismatch(f.index, bad, msg)

    def _settle(self, f: FileBlocks, item: VerifyItem, ok: bool, error: str | None) -> None:
        with self._cv:
            if ok:
                f.clear()  # free its blocks; the entry stays in case the rename must be retried
            f.finalizing = False
            self.book.undone(f)
        self.on_verdict(item, ok, error)


__all__ = [
    "BATCH_BLOCKS",
    "DEFAULT_BLOCK_SIZE",
    "MIN_BLOCK_SIZE",
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
