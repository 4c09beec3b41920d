"""Per-block digests and how a file's digest relates to them.

Policy (docs/integrity.md; block-level pipelining from Liu, Jung, Kettimuthu,
Sun, Towards Optimizing Large-Scale Data Transfers with End-to-End Integrity
Verification):

* The file digest is the algorithm applied to the whole content, exactly
  what `sha256sum FILE` prints. It is NOT derived from the block digests
  (none of the cryptographic algorithms here can be combined that way); it
  is computed in the same pass, fed the same bytes in order.
* Block i covers [offset + i*B, offset + min((i+1)*B, length)) of the range
  and is digested on its own. The last block may be short; an empty range
  has no blocks (and the file digest of no bytes).
* Blocks are aligned to the start of the range. A range that starts at a
  multiple of B therefore has exactly the file's block digests for the
  blocks it covers, so digests of parallel ranges (p > 1) cut at block
  boundaries concatenate into the file's block list: that is the combinable
  part. A whole file verifies when its block lists match and cover it; the
  whole-content digest is extra assurance when one side streamed the file.
* Block digests localise damage: a mismatch names the blocks to send again
  instead of the whole file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .algorithms import DEFAULT_READ_SIZE, Buffer, Hasher, Source, algorithm_info, check_length, feed_range, new_hasher


@dataclass(frozen=True)
class FileDigests:
    """Digests of one byte range: the whole range and each block of it."""

    algorithm: str
    offset: int
    length: int  # bytes digested
    digest: str  # over the whole range
    block_size: int  # 0 when no block digests were asked for
    blocks: tuple[str, ...] = field(default_factory=tuple)

    def block_span(self, index: int) -> tuple[int, int]:
        """(absolute offset, length) of block `index`."""
        if not 0 <= index < len(self.blocks):
            raise IndexError(f"block {index} out of range: the range has {len(self.blocks)} blocks")
        start = index * self.block_size
        return self.offset + start, min(self.block_size, self.length - start)

    def as_dict(self) -> dict:
        return {**asdict(self), "blocks": list(self.blocks)}


class BlockSplitter:
    """Feeds a byte stream to a whole-stream hasher and to one hasher per block.

    Used by the one-pass readers here; a transfer's block digests are computed
    as the blocks are sent, by engine/block_source.py's BlockSource.
    """

    def __init__(self, algorithm: str, block_size: int) -> None:
        if block_size < 0:
            raise ValueError(f"block size must be >= 0 bytes (got {block_size}); 0 means no blocks")
        self.algorithm = algorithm_info(algorithm).name
        self.block_size = block_size
        self.whole: Hasher = new_hasher(self.algorithm)
        self.blocks: list[str] = []
        self.length = 0
        self._block: Hasher | None = None
        self._filled = 0

    def update(self, data: Buffer) -> None:
        view = memoryview(data).cast("B")
        self.whole.update(view)
        self.length += len(view)
        if not self.block_size:
            return
        while view:
            if self._block is None:
                self._block = new_hasher(self.algorithm)
            take = min(len(view), self.block_size - self._filled)
            self._block.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.block_size:
                self.blocks.append(self._block.hexdigest())
                self._block, self._filled = None, 0

    def result(self, offset: int = 0) -> FileDigests:
        blocks = list(self.blocks)
        if self._block is not None:
            blocks.append(self._block.hexdigest())
        return FileDigests(self.algorithm, offset, self.length, self.whole.hexdigest(), self.block_size, tuple(blocks))


def file_digests(
    name: str,
    source: Source,
    block_size: int,
    offset: int = 0,
    length: int | None = None,
    read_size: int = DEFAULT_READ_SIZE,
) -> FileDigests:
    """Whole-range and per-block digests in one read of the range.

    Raises ShortReadError when the file ends before offset + length.
    """
    check_length(length)
    splitter = BlockSplitter(name, block_size)
    feed_range(source, offset, length, read_size, splitter.update)
    return splitter.result(offset)


def block_digests(
    name: str, path_or_fileobj: Source, block_size: int, offset: int = 0, length: int | None = None
) -> list[str]:
    """Digest of each block_size block of the range (the last may be short)."""
    if block_size <= 0:
        raise ValueError(f"block size must be a positive number of bytes (got {block_size})")
    return list(file_digests(name, path_or_fileobj, block_size, offset, length).blocks)


def mismatched_blocks(expected: FileDigests, actual: FileDigests) -> list[int]:
    """Indexes of blocks whose digests differ, including blocks only one side has.

    Both sides must describe the same cut (algorithm, offset, block size),
    otherwise their block lists are not comparable at all.
    """
    for what in ("algorithm", "offset", "block_size"):
        a, b = getattr(expected, what), getattr(actual, what)
        if a != b:
            raise ValueError(
                f"cannot compare block digests cut differently: {what} {a!r} vs {b!r}; "
                "request the destination digests with the source's algorithm, offset and block size"
            )
    longest = max(len(expected.blocks), len(actual.blocks))
    shortest = min(len(expected.blocks), len(actual.blocks))
    differ = [i for i in range(shortest) if expected.blocks[i] != actual.blocks[i]]
    return differ + list(range(shortest, longest))


def concat_ranges(parts: list[FileDigests]) -> tuple[str, ...]:
    """The file's block list from digests of contiguous, block-aligned ranges.

    Only possible when every range but the last is a whole number of blocks
    (see the module policy); anything else raises ValueError.
    """
    if not parts:
        return ()
    ordered = sorted(parts, key=lambda d: d.offset)
    size = ordered[0].block_size
    blocks: list[str] = []
    expect = ordered[0].offset
    for i, part in enumerate(ordered):
        if part.block_size != size or not size:
            raise ValueError("ranges must share one non-zero block size to be combined")
        if part.offset != expect:
            raise ValueError(f"ranges are not contiguous: expected offset {expect}, got {part.offset}")
        if part.offset % size:
            raise ValueError(f"range at offset {part.offset} does not start on a {size}-byte block boundary")
        if i < len(ordered) - 1 and part.length % size:
            raise ValueError(f"range at offset {part.offset} does not end on a block boundary")
        blocks.extend(part.blocks)
        expect = part.offset + part.length
    return tuple(blocks)


__all__ = [
    "BlockSplitter",
    "FileDigests",
    "block_digests",
    "concat_ranges",
    "file_digests",
    "mismatched_blocks",
]
