"""Hash blocks as they are sent, on a bounded pool of threads, with bounded memory.

The source side of block-level pipelining (paper 002_54ad864b1e564bbe.txt,
DESIGN.md section 4): while the engine sends block i+1, block i is being
hashed. The engine hands each piece it sends to `BlockPipeline.submit`;
the pipeline cuts the stream into checksum blocks of `block_size` bytes
(independent of the engine's request size) and keeps:

* one digest per block, each block hashed by whichever worker is free, so
  several blocks are hashed at once when hashing is the slower stage
  (section III.B's multi-threaded checksum; hashlib, zlib, xxhash, crc32c
  and blake3 release the GIL on large buffers, so threads do run in
  parallel), and
* the whole-file digest, fed every byte in offset order (it cannot be
  split: see blocks.py for how it relates to the block digests).

Each digest is a serial stream of updates ("strand"): at most one worker
touches a strand at a time, and a strand's updates run in submission
order, so no digest ever sees bytes out of order. Different strands run on
different workers.

Memory: submitted bytes are held until every digest that needs them has
consumed them. `submit` blocks (back-pressure) while holding another piece
would exceed `max_pending_bytes`; one piece larger than the bound is let
through alone so the pipeline cannot wedge.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .algorithms import DEFAULT_ALGORITHM, Buffer, Hasher, algorithm_info, new_hasher
from .blocks import FileDigests

BlockCallback = Callable[[int, int, int, str], None]  # (index, offset, length, hexdigest)


class _Piece:
    """A submitted buffer and how many strand updates still need it."""

    __slots__ = ("size", "left")

    def __init__(self, size: int) -> None:
        self.size = size
        self.left = 0


class _Strand:
    """One digest and its queue of updates, drained by one worker at a time."""

    __slots__ = ("hasher", "queue", "running", "sealed", "index", "offset", "length")

    def __init__(self, hasher: Hasher, index: int, offset: int) -> None:
        self.hasher = hasher
        self.queue: deque[tuple[memoryview, _Piece]] = deque()
        self.running = False
        self.sealed = False  # no more bytes will come
        self.index = index  # block number; -1 for the whole-file strand
        self.offset = offset
        self.length = 0


class BlockPipeline:
    """Per-block and whole-file digests of a byte stream, hashed on `threads` workers.

    Usage: `submit(offset, data)` for each piece in order, then `finish()`.
    Pieces must be contiguous (offset = previous offset + previous length);
    parallel ranges of one file (p > 1) each get their own pipeline, with
    `offset` set to the range start.

    bytes are kept as given; bytearray and writable memoryview pieces are
    copied first because the caller may reuse their buffer.
    on_block(index, offset, length, hexdigest) is called from a worker as
    each block completes (in any order across blocks).
    """

    def __init__(
        self,
        algorithm: str = DEFAULT_ALGORITHM,
        block_size: int = 64 * 2**20,
        threads: int = 1,
        max_pending_bytes: int | None = None,
        whole_file: bool = True,
        offset: int = 0,
        on_block: BlockCallback | None = None,
    ) -> None:
        if block_size < 0:
            raise ValueError(f"block size must be >= 0 bytes (got {block_size}); 0 means no block digests")
        if threads < 1:
            raise ValueError(f"threads must be >= 1 (got {threads})")
        if not whole_file and not block_size:
            raise ValueError("nothing to compute: ask for block digests (block_size > 0) or the whole-file digest")
        self.algorithm = algorithm_info(algorithm).name
        new_hasher(self.algorithm)  # fail now, not in a worker, if its package is missing
        self.block_size = block_size
        self.threads = threads
        # Enough for every worker to hold a block while the next one arrives.
        self.max_pending_bytes = (
            max_pending_bytes if max_pending_bytes is not None else (threads + 1) * (block_size or 8 * 2**20)
        )
        if self.max_pending_bytes <= 0:
            raise ValueError(f"max_pending_bytes must be > 0 (got {self.max_pending_bytes})")
        self.start = offset
        self._on_block = on_block
        self._next = offset
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="checksum")
        self._whole = _Strand(new_hasher(self.algorithm), -1, offset) if whole_file else None
        self._block: _Strand | None = None
        self._blocks: dict[int, str] = {}
        self._busy = 0  # strands with queued or running work
        self._error: BaseException | None = None
        self._finished = False
        self.pending_bytes = 0
        self.peak_pending_bytes = 0
        self.waits = 0  # times submit had to wait for room

    # producer side
    def submit(self, offset: int, data: Buffer, timeout: float | None = None) -> None:
        """Queue the bytes at `offset` for hashing; blocks while the memory bound is reached."""
        if offset != self._next:
            raise ValueError(
                f"blocks must arrive in order: expected offset {self._next}, got {offset}; "
                "use one pipeline per parallel range"
            )
        if self._finished:
            raise RuntimeError("this pipeline is finished; start a new one for another file or range")
        if not (isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly)):
            data = bytes(data)
        view = memoryview(data).cast("B")
        size = len(view)
        if not size:
            return
        piece = _Piece(size)
        with self._cond:
            self._raise_error()
            if self.pending_bytes and self.pending_bytes + size > self.max_pending_bytes:
                self.waits += 1
                ok = self._cond.wait_for(
                    lambda: self._error is not None or not self.pending_bytes
                    or self.pending_bytes + size <= self.max_pending_bytes,
                    timeout,
                )
                if not ok:
                    raise TimeoutError(
                        f"checksum workers fell behind: {self.pending_bytes} bytes still pending after {timeout}s"
                    )
                self._raise_error()
            self.pending_bytes += size
            self.peak_pending_bytes = max(self.peak_pending_bytes, self.pending_bytes)
            if self._whole is not None:
                self._enqueue(self._whole, view, piece)
            if self.block_size:
                self._split(offset, view, piece)
            self._next = offset + size

    def _split(self, offset: int, view: memoryview, piece: _Piece) -> None:
        while view:
            index = (offset - self.start) // self.block_size
            if self._block is None or self._block.index != index:
                self._block = _Strand(new_hasher(self.algorithm), index, self.start + index * self.block_size)
            room = self.block_size - self._block.length
            part = view[:room]
            self._block.length += len(part)
            if self._block.length == self.block_size:
                self._block.sealed = True
            self._enqueue(self._block, part, piece)
            offset += len(part)
            view = view[len(part):]

    def _enqueue(self, strand: _Strand, part: memoryview, piece: _Piece) -> None:
        # Called with the lock held.
        piece.left += 1
        strand.queue.append((part, piece))
        if not strand.running:
            strand.running = True
            self._busy += 1
            self._pool.submit(self._drain, strand)

    # worker side
    def _drain(self, strand: _Strand) -> None:
        digest = None
        try:
            while True:
                with self._cond:
                    if not strand.queue:
                        if strand.sealed and strand.index >= 0:
                            digest = strand.hasher.hexdigest()
                            self._blocks[strand.index] = digest
                        strand.running = False  # an unsealed strand is re-activated by the next part
                        break
                    part, piece = strand.queue.popleft()
                strand.hasher.update(part)  # outside the lock: this is where threads overlap
                del part
                with self._cond:
                    piece.left -= 1
                    if not piece.left:
                        self.pending_bytes -= piece.size
                        self._cond.notify_all()
            if digest is not None and self._on_block is not None:
                self._on_block(strand.index, strand.offset, strand.length, digest)
        except BaseException as exc:  # surfaced to the producer by submit/finish
            with self._cond:
                if self._error is None:
                    self._error = exc
        finally:
            # Counted down only now, so finish() also waits for the callback.
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"checksum worker failed: {self._error}") from self._error

    # results
    def finish(self, timeout: float | None = None) -> FileDigests:
        """Wait for every queued byte to be hashed; the digests of everything submitted."""
        with self._cond:
            if not self._finished:
                self._finished = True
                if self._block is not None and not self._block.sealed:
                    self._block.sealed = True
                    if not self._block.running:  # nothing queued will finalise it: do it now
                        self._block.running = True
                        self._busy += 1
                        self._pool.submit(self._drain, self._block)
            done = self._cond.wait_for(lambda: self._error is not None or not self._busy, timeout)
            self._raise_error()
            if not done:
                raise TimeoutError(f"checksum workers did not finish within {timeout}s")
        self._pool.shutdown(wait=True)
        blocks = tuple(self._blocks[i] for i in range(len(self._blocks)))
        digest = self._whole.hasher.hexdigest() if self._whole is not None else ""
        return FileDigests(self.algorithm, self.start, self._next - self.start, digest, self.block_size, blocks)

    def close(self) -> None:
        """Abandon the pipeline (after an error in the transfer); waits for running updates."""
        with self._cond:
            self._finished = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "BlockPipeline":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["BlockCallback", "BlockPipeline"]
