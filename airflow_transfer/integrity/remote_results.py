"""What a destination digest request asks for and what comes back, whichever method computed it."""

from __future__ import annotations

import os
import string
from dataclasses import dataclass

from .algorithms import DEFAULT_ALGORITHM
from .blocks import FileDigests

PathArg = str | bytes | os.PathLike


@dataclass(frozen=True)
class RemoteDigest:
    path: str
    digests: FileDigests
    method: str  # "helper", "coreutils" or "command"
    fsynced: bool | None  # None: could not tell
    cache_dropped: bool | None
    seconds: float = 0.0

    @property
    def digest(self) -> str:
        return self.digests.digest


@dataclass(frozen=True)
class DigestRequest:
    path: PathArg
    algorithm: str = DEFAULT_ALGORITHM
    offset: int = 0
    length: int | None = None
    block_size: int = 0
    fsync: bool = True
    drop_cache: bool = True


def path_text(path: PathArg) -> str:
    # Names that are not valid UTF-8 travel as surrogate escapes; the helper's
    # os.open turns them back into the same bytes.
    value = os.fspath(path)
    return os.fsdecode(value) if isinstance(value, bytes) else value


def is_hex(text: object, size: int) -> bool:
    """`text` is a hex digest of `size` bytes (what a reply must carry before it is believed)."""
    return isinstance(text, str) and len(text) == 2 * size and all(c in string.hexdigits for c in text)


__all__ = ["DigestRequest", "PathArg", "RemoteDigest", "is_hex", "path_text"]
