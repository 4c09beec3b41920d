"""What end-to-end verification works on: a file's byte ranges with their source digests.

A `VerifyItem` is one file at its temporary destination path; its `Piece`s are byte ranges
with the source digest of each, computed by `SourceHasher` from the bytes as they are read
for sending (no second read of the source).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..integrity.algorithms import new_hasher


@dataclass
class Piece:
    """A byte range of one file and its source digest."""

    offset: int
    length: int
    digest: str


@dataclass
class VerifyItem:
    index: int  # the file's index in the chunk
    tmp: str  # destination temporary path
    pieces: list[Piece] = field(default_factory=list)
    whole_source: Callable[[], str] | None = None  # whole-file source digest, when a method needs it
    source_path: str = ""  # for digests computed at a remote source (downloads)
    # Set on the way to the verdict, read by whoever acts on it:
    source_error: BaseException | None = None  # downloads: the source digest could not be computed
    renamed: bool = False  # block mode: renamed into place already, pipelined with others
    rename_error: BaseException | None = None  # ... and the error that rename got


@dataclass
class VerifyStats:
    verified: int = 0
    repaired: int = 0
    mismatched: int = 0


class SourceHasher:
    """Hashes the bytes of one range as they are read, in order."""

    def __init__(self, algorithm: str, offset: int) -> None:
        self.algorithm = algorithm
        self.offset = offset
        self.next = offset
        self.h = new_hasher(algorithm)

    def update(self, offset: int, data: bytes) -> None:
        if offset != self.next:
            raise RuntimeError(f"source bytes hashed out of order ({offset} != {self.next})")
        self.h.update(data)
        self.next += len(data)

    def piece(self) -> Piece:
        return Piece(self.offset, self.next - self.offset, self.h.hexdigest())
