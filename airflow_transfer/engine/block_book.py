"""The block verifier's bookkeeping: each file's blocks, which are still to check, and when a
file is ready for its verdict.

Nothing here locks or blocks: `BlockVerifier` calls it with its own lock held, so each
operation sees and leaves the books whole.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field

from ..integrity.algorithms import digest_bytes
from .block_source import Block
from .sftp_jobs import FileTask

_UNSETTLED = ("sent", "asked")

# Per block asked: (destination digest, bytes it covered where the block ends the file, else
# None), or why no digest could be had.
BlockAnswer = tuple[str, int | None] | BaseException
Asked = tuple["FileBlocks", Block]


@dataclass
class FileBlocks:
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

    def gaps(self) -> list[tuple[int, int]]:
        """Byte ranges [start, end) of the file that no block covers."""
        out, cur = [], 0
        for off in self.offsets:
            if off > cur:
                out.append((cur, off))
            cur = off + self.blocks[off].length
        if cur < self.task.size:
            out.append((cur, self.task.size))
        return out


@dataclass
class BlockStats:
    verified: int = 0  # blocks whose digests matched
    mismatched: int = 0
    resent: int = 0  # blocks sent again to repair them
    bytes_resent: int = 0
    from_journal: int = 0  # blocks a resumed transfer verified instead of sending


class _Files(dict):
    """FileBlocks by file index, each made when first looked at: a chunk registers every file,
    and most small ones never get here (a bundle's helper checks them whole)."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: dict[int, FileTask] = {}

    def __missing__(self, i: int) -> FileBlocks:
        f = self[i] = FileBlocks(i, self.tasks[i])
        return f

    def clear(self) -> None:
        super().clear()
        self.tasks.clear()


class BlockBook:
    """The blocks of one chunk's files, the queue of blocks to ask the destination about, and
    the files whose transfer ended (they get their verdict once all their blocks are settled)."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.files = _Files()
        self.pending: deque[Asked] = deque()
        self.done: set[int] = set()  # files whose transfer ended, waiting for their verdict

    def clear(self) -> None:
        self.files.clear()
        self.pending.clear()
        self.done.clear()

    def register(self, i: int, task: FileTask, journal_blocks: list | None) -> None:
        """A file of this chunk; `journal_blocks` [[offset, length, "algo:hex"], ...] from an earlier run."""
        self.files.pop(i, None)
        self.files.tasks[i] = task
        if not journal_blocks:
            return
        f = self.files[i]
        prefix = f"{self.algorithm}:"
        for off, n, digest in journal_blocks:
            if digest.startswith(prefix) and n > 0 and off + n <= task.size:
                f.put(Block(off, n, digest[len(prefix) :], "journal"))

    def plan_upload(self, i: int, tmp_size: int) -> int:
        """Where a single-stream upload starts: after the blocks from offset 0 that are known to be
        at the destination; the blocks past that go, those before it not checked yet are queued."""
        f = self.files[i]
        self.undone(f)
        start = f.covered(tmp_size)
        for off in [o for o in f.offsets if o >= start]:
            f.drop(off)
        self.queue_journal(f)
        return start

    def missing(self, i: int) -> list[tuple[int, int]]:
        """Byte ranges of the file with no good block; its journal blocks are queued."""
        f = self.files[i]
        self.undone(f)
        for off in [o for o, b in f.blocks.items() if b.state == "bad"]:
            f.drop(off)
        self.queue_journal(f)
        return f.gaps()

    def sent(self, i: int, block: Block) -> None:
        f = self.files[i]
        f.put(block)
        self.pending.append((f, block))

    def transfer_done(self, i: int) -> None:
        f = self.files[i]
        if f.task.size == 0 and not f.blocks:
            empty = Block(0, 0, digest_bytes(self.algorithm, b""))
            f.put(empty)
            self.pending.append((f, empty))
        f.done = True
        self.done.add(i)

    def undone(self, f: FileBlocks) -> None:
        f.done = False
        self.done.discard(f.index)

    def queue_journal(self, f: FileBlocks) -> None:
        for b in f.blocks.values():
            if b.state == "journal":
                b.state = "sent"
                b.from_journal = True
                f.unsettled += 1
                self.pending.append((f, b))

    def ready(self) -> list[FileBlocks]:
        """Files whose transfer ended and whose blocks are all settled, now being finalized."""
        ready = [self.files[i] for i in self.done if not self.files[i].finalizing and not self.files[i].unsettled]
        for f in ready:
            f.finalizing = True
        return ready

    def next_batch(self, most: int) -> list[Asked]:
        """Up to `most` queued blocks still to ask about (a block replaced meanwhile is skipped)."""
        batch: list[Asked] = []
        while self.pending and len(batch) < most:
            f, b = self.pending.popleft()
            if f.blocks.get(b.offset) is b and b.state == "sent":
                batch.append((f, b))
        return batch

    @staticmethod
    def ask(batch: list[Asked]) -> list[FileBlocks]:
        """Marks the batch's blocks asked; returns the files asked about for the first time this round."""
        for _, b in batch:
            b.state = "asked"
        hook = []
        for f, _ in batch:
            if not f.hooked:
                f.hooked = True
                hook.append(f)
        return hook

    @staticmethod
    def answer(batch: list[Asked], results: list[BlockAnswer], count: BlockStats | None) -> None:
        """Settles each block with the destination's answer; `count` the verdicts in it, unless
        None (the file is checked as a whole at the end)."""
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
                    f"the destination copy is longer than the source ({b.offset + length} > {f.task.size} bytes)"
                )
            if count is None:
                continue
            if good:
                count.verified += 1
                count.from_journal += b.from_journal
            elif b.error is None:
                count.mismatched += 1
