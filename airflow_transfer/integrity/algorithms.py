"""Checksum algorithms behind one interface, and where each can be computed.

Every algorithm yields the digest its reference implementation yields
(hashlib, zlib, and the `crc32c`, `xxhash` and `blake3` packages), as
lowercase hex. The two 32-bit checksums are written as 8 hex digits of the
big-endian value, which is what `CRC32CHash.hexdigest()` prints and what
people compare against for adler32.

Remote computability matters because the destination digest is computed at
the destination after the data is on disk (docs/integrity.md, after Liu, Jung,
Kettimuthu, Sun, Towards Optimizing Large-Scale Data Transfers with End-to-End
Integrity Verification): by the stdlib-only helper when python3 is there,
else by a coreutils command. `AlgorithmInfo.stdlib` and
`AlgorithmInfo.coreutils` say which algorithms each of those can do.

`cksum` is deliberately absent: coreutils `cksum` prints the POSIX 1003.2
CRC-32 (polynomial 0x04C11DB7, MSB-first, the file length appended to the
data, result complemented, printed in decimal). That is neither CRC-32C
(Castagnoli polynomial, what `crc32c` means here) nor the zlib CRC-32, so a
`cksum` figure can never be compared with any digest in this registry.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

Buffer = bytes | bytearray | memoryview
Source = str | os.PathLike | BinaryIO

# Reads of 1 MiB keep per-call overhead negligible for every algorithm here
# (see docs/integrity.md for the measured table) while staying cache friendly.
DEFAULT_READ_SIZE = 1024 * 1024


class Hasher(Protocol):
    """The slice of the hashlib interface every algorithm here provides."""

    # Read-only, as hashlib's own objects have them.
    @property
    def name(self) -> str: ...

    @property
    def digest_size(self) -> int: ...

    def update(self, data: Buffer, /) -> None: ...

    def hexdigest(self) -> str: ...

    def copy(self) -> Hasher: ...


class _Checksum32:
    """A 32-bit running checksum function, `f(data, value) -> value` as zlib.adler32 and
    crc32c.crc32c are, as a hasher object (neither module offers one)."""

    digest_size = 4

    def __init__(self, name: str, function: Callable[[Buffer, int], int], value: int) -> None:
        self.name = name
        self._function = function
        self._value = value

    def update(self, data: Buffer, /) -> None:
        self._value = self._function(data, self._value)

    def hexdigest(self) -> str:
        return f"{self._value:08x}"

    def copy(self) -> _Checksum32:
        return _Checksum32(self.name, self._function, self._value)


def _adler32() -> Hasher:
    return _Checksum32("adler32", zlib.adler32, 1)


def _crc32c() -> Hasher:
    # optional package: the ImportError is how available() and new_hasher() learn it is missing
    import crc32c

    # The package's function, which is stable across its versions (its hasher class is not).
    return _Checksum32("crc32c", crc32c.crc32c, 0)


class _Named:
    """Give a third-party hasher our registry name (theirs differ: 'XXH3_128', 'blake3')."""

    def __init__(self, name: str, inner, digest_size: int) -> None:
        self.name = name
        self.digest_size = digest_size
        self._inner = inner

    def update(self, data: Buffer, /) -> None:
        self._inner.update(data)

    def hexdigest(self) -> str:
        return self._inner.hexdigest()

    def copy(self) -> _Named:
        return _Named(self.name, self._inner.copy(), self.digest_size)


def _xxh128() -> Hasher:
    # optional package: the ImportError is how available() and new_hasher() learn it is missing
    import xxhash

    return _Named("xxh128", xxhash.xxh3_128(), 16)


def _blake3() -> Hasher:
    # optional package: the ImportError is how available() and new_hasher() learn it is missing
    import blake3

    # One thread per hasher: parallelism is the engine's (one hashing thread per
    # connection), and blake3's own pool would fight it for the same cores.
    return _Named("blake3", blake3.blake3(max_threads=1), 32)


@dataclass(frozen=True)
class AlgorithmInfo:
    name: str
    digest_size: int  # bytes
    kind: str  # "cryptographic", "non-cryptographic hash" or "checksum"
    stdlib: bool  # a remote python3 with only its stdlib can compute it
    coreutils: str | None  # the coreutils command printing the same digest, if any
    package: str | None  # the PyPI package needed locally, None for stdlib
    factory: Callable[[], Hasher]


ALGORITHMS: dict[str, AlgorithmInfo] = {
    info.name: info
    for info in (
        AlgorithmInfo("md5", 16, "cryptographic", True, "md5sum", None, hashlib.md5),
        AlgorithmInfo("sha1", 20, "cryptographic", True, "sha1sum", None, hashlib.sha1),
        AlgorithmInfo("sha256", 32, "cryptographic", True, "sha256sum", None, hashlib.sha256),
        # b2sum prints BLAKE2b with its full 64-byte digest, hashlib's default.
        AlgorithmInfo("blake2b", 64, "cryptographic", True, "b2sum", None, hashlib.blake2b),
        AlgorithmInfo("adler32", 4, "checksum", True, None, None, _adler32),
        AlgorithmInfo("crc32c", 4, "checksum", False, None, "crc32c", _crc32c),
        AlgorithmInfo("xxh128", 16, "non-cryptographic hash", False, None, "xxhash", _xxh128),
        AlgorithmInfo("blake3", 32, "cryptographic", False, None, "blake3", _blake3),
    )
}

STDLIB_ALGORITHMS: tuple[str, ...] = tuple(n for n, i in ALGORITHMS.items() if i.stdlib)
COREUTILS_COMMANDS: dict[str, str] = {n: i.coreutils for n, i in ALGORITHMS.items() if i.coreutils}

# Chosen by measurement on the project machines (benchmarks/checksum_speed.py,
# table in docs/integrity.md): the fastest algorithm a bare destination can
# compute both with the stdlib helper and with its coreutils fall-back, so the
# fall-back chain never has to change the algorithm mid-transfer.
DEFAULT_ALGORITHM = "sha256"


def algorithm_info(name: str) -> AlgorithmInfo:
    """The registry entry for `name`; ValueError naming the valid ones otherwise."""
    info = ALGORITHMS.get(name)  # the usual case, looked up per file: a registered name as is
    if info is not None:
        return info
    key = name.strip().lower() if isinstance(name, str) else name
    info = ALGORITHMS.get(key)
    if info is None:
        raise ValueError(f"unknown checksum algorithm {name!r}: use one of {', '.join(ALGORITHMS)}")
    return info


def available(name: str) -> bool:
    """True when this process can compute `name` (its package is importable).

    An unknown name is a mistake rather than a missing package, so it raises
    ValueError like every other function here.
    """
    info = algorithm_info(name)
    try:
        info.factory()
    except ImportError:
        return False
    return True


def new_hasher(name: str) -> Hasher:
    info = algorithm_info(name)
    try:
        return info.factory()
    except ImportError as exc:
        raise ImportError(
            f"checksum algorithm {info.name!r} needs the {info.package!r} package: "
            f"install it (pip install {info.package}) or choose one of {', '.join(STDLIB_ALGORITHMS)}"
        ) from exc


def digest_bytes(name: str, data: Buffer) -> str:
    hasher = new_hasher(name)
    hasher.update(data)
    return hasher.hexdigest()


class ShortReadError(EOFError):
    """The file ended before the requested range did."""

    def __init__(self, where: str, wanted: int, got: int) -> None:
        self.wanted, self.got = wanted, got
        super().__init__(
            f"file ended early ({where}): wanted {wanted} bytes, read {got}; "
            "the file is shorter than expected, transfer it again"
        )


def _label(source: Source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return str(getattr(source, "name", "<file object>"))


def iter_range(fileobj: BinaryIO, length: int | None, read_size: int = DEFAULT_READ_SIZE) -> Iterator[memoryview]:
    """Views of successive reads from the current position, `length` bytes in all
    (to EOF when None). Views share one buffer: use each before asking for the next.
    Stops early at EOF; the caller compares the total with what it wanted.
    """
    if read_size <= 0:
        raise ValueError(f"read size must be a positive number of bytes (got {read_size})")
    buf = bytearray(read_size)
    view = memoryview(buf)
    readinto = getattr(fileobj, "readinto", None)
    remaining = length
    while remaining is None or remaining > 0:
        want = read_size if remaining is None else min(read_size, remaining)
        if readinto is not None:
            got = readinto(view[:want])
            if not got:
                return
            chunk = view[:got]
        else:
            data = fileobj.read(want)
            if not data:
                return
            chunk = memoryview(data)
            got = len(data)
        if remaining is not None:
            remaining -= got
        yield chunk


def open_range(source: Source, offset: int) -> tuple[BinaryIO, bool]:
    """(file object positioned at `offset`, whether we opened it and must close it).

    A file object is read from its current position when offset is 0, so an
    unseekable stream (an SFTP read-back, a pipe) works.
    """
    if offset < 0:
        raise ValueError(f"offset must be >= 0 (got {offset})")
    if isinstance(source, (str, os.PathLike)):
        fileobj = open(source, "rb", buffering=0)
        if offset:
            fileobj.seek(offset)
        return fileobj, True
    if offset:
        source.seek(offset)
    return source, False


def check_length(length: int | None) -> None:
    if length is not None and length < 0:
        raise ValueError(f"length must be >= 0 or None (got {length})")


def feed_range(
    source: Source, offset: int, length: int | None, read_size: int, consume: Callable[[memoryview], object]
) -> int:
    """Pass `length` bytes from `offset` (to EOF when None) of a path or binary file object to
    `consume`, one read at a time; returns the byte count. Raises ShortReadError when the file
    ends before offset + length."""
    fileobj, owned = open_range(source, offset)
    try:
        total = 0
        for chunk in iter_range(fileobj, length, read_size):
            consume(chunk)
            total += len(chunk)
    finally:
        if owned:
            fileobj.close()
    if length is not None and total < length:
        raise ShortReadError(_label(source), length, total)
    return total


def digest_file(
    name: str, path: Source, offset: int = 0, length: int | None = None, block_size: int = DEFAULT_READ_SIZE
) -> str:
    """Digest of `length` bytes from `offset` (to EOF when None) of a path or binary file object.

    block_size is only the read size; it never changes the digest. Raises
    ShortReadError when the file ends before offset + length.
    """
    check_length(length)
    hasher = new_hasher(name)
    feed_range(path, offset, length, block_size, hasher.update)
    return hasher.hexdigest()


def remote_support() -> dict[str, dict[str, object]]:
    """Per algorithm: can a bare remote compute it with python3's stdlib, with coreutils?"""
    return {n: {"stdlib": i.stdlib, "coreutils": i.coreutils, "package": i.package} for n, i in ALGORITHMS.items()}


__all__ = [
    "ALGORITHMS",
    "COREUTILS_COMMANDS",
    "DEFAULT_ALGORITHM",
    "DEFAULT_READ_SIZE",
    "STDLIB_ALGORITHMS",
    "AlgorithmInfo",
    "Hasher",
    "ShortReadError",
    "algorithm_info",
    "available",
    "check_length",
    "digest_bytes",
    "digest_file",
    "feed_range",
    "iter_range",
    "new_hasher",
    "open_range",
    "remote_support",
]
