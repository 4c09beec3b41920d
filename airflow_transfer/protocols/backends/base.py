"""One interface over every storage protocol (fsspec-like), so the generic
transfer path, the fall-back controller and the sensors need no per-protocol code.

A Backend is ONE connection to one host (or one object-store client): the
generic path opens one per worker thread, which is how cc works there. Errors
are Python's own exceptions (FileNotFoundError, PermissionError,
FileExistsError, ConnectionError, OSError) whatever the protocol said.
"""

from __future__ import annotations

import errno
import hashlib
import posixpath
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import TracebackType
from typing import BinaryIO, Protocol

from ...integrity.algorithms import new_hasher
from ...paths import check_walk_depth


@dataclass(frozen=True)
class Capabilities:
    """What a protocol can do; the engine uses a knob only where it is true."""

    write: bool = True  # can be a destination
    ranged_read: bool = True  # read from any offset (resume, p > 1 on the source)
    ranged_write: bool = False  # write at any offset of an existing file (p > 1 on the destination)
    append_write: bool = False  # continue a file from its current end (resume without ranged writes)
    rename: bool = True  # atomic temp-name + rename
    atomic_put: bool = False  # a written object appears only when complete (object stores): no temp name
    set_mtime: bool = False
    server_checksum: tuple[str, ...] = ()  # algorithms the server computes itself
    exec: bool = False  # can run commands on the host (remote helpers)
    parallel: bool = True  # several connections to the host at once (cc, p)

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class FileInfo:
    path: str  # as the backend names it (absolute within the backend)
    size: int
    mtime: float
    is_dir: bool = False
    mode: int | None = None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))


@dataclass
class Listing:
    """A walked tree: files relative to the root, empty directories, skipped entries."""

    root: str
    is_file: bool
    files: list[tuple[str, int, float, int]] = field(default_factory=list)  # rel, size, mtime, mode
    empty_dirs: list[str] = field(default_factory=list)


class ReadStream(Protocol):
    """What open_read hands back and the copy paths use: read(n) until b"", close(), ``with``.
    A file object is one; a wrapper that counts or redirects reads (replicas) is another."""

    def read(self, n: int = -1, /) -> bytes: ...

    def close(self) -> None: ...

    def __enter__(self) -> ReadStream: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> object: ...


class Backend(ABC):
    """One connection. Paths are the backend's own absolute paths (POSIX style)."""

    scheme: str = ""
    caps: Capabilities = Capabilities()

    # -- metadata ------------------------------------------------------------
    @abstractmethod
    def stat(self, path: str) -> FileInfo: ...

    @abstractmethod
    def listdir(self, path: str) -> list[FileInfo]: ...

    def dir_identity(self, path: str) -> str | None:
        """What tells two directories apart (the server's realpath), None when unknown."""
        return None

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def walk(self, root: str) -> Listing:
        """Every regular file under root (or root itself when it is a file)."""
        top = self.stat(root)
        if not top.is_dir:
            return Listing(root, True, [(top.name, top.size, top.mtime, (top.mode or 0o644) & 0o7777)])
        out = Listing(root, False)
        seen = {self.dir_identity(root)}
        stack = [""]
        while stack:
            rel = stack.pop()
            path = posixpath.join(root, rel) if rel else root
            check_walk_depth(path, rel, root)
            if rel:
                identity = self.dir_identity(path)
                if identity is not None and identity in seen:
                    continue  # a link the server reports as a directory: listed once
                seen.add(identity)
            entries = self.listdir(path)
            if rel and not entries:
                out.empty_dirs.append(rel)
            for e in entries:
                child = f"{rel}/{e.name}" if rel else e.name
                if e.is_dir:
                    stack.append(child)
                else:
                    out.files.append((child, e.size, e.mtime, (e.mode or 0o644) & 0o7777))
        out.files.sort()
        return out

    # -- data ------------------------------------------------------------------
    @abstractmethod
    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        """A stream of the file from `offset` (read(n) / close())."""

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        """Bytes [offset, offset+length) (to the end when length is None)."""
        with self.open_read(path, offset) as f:
            if length is None:
                return f.read()
            buf = bytearray()
            while len(buf) < length:
                piece = f.read(length - len(buf))
                if not piece:
                    break
                buf += piece
            return bytes(buf)

    @abstractmethod
    def open_write(self, path: str, offset: int = 0) -> BinaryIO:
        """A writable stream. offset 0 creates/truncates; offset > 0 needs ranged_write or
        append_write (then it must equal the current size)."""

    def write(self, path: str, data: bytes, offset: int = 0) -> None:
        with self.open_write(path, offset) as f:
            f.write(data)

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move src to dst, replacing dst."""

    @abstractmethod
    def delete(self, path: str) -> None: ...

    @abstractmethod
    def mkdir(self, path: str, parents: bool = True, exist_ok: bool = True) -> None: ...

    def rmdir(self, path: str) -> None:
        raise OSError(errno.ENOTSUP, f"{self.scheme}: rmdir not supported", path)

    def set_mtime(self, path: str, mtime: float) -> None:  # noqa: B027 - optional: a no-op by default
        """Best effort; backends without it do nothing (caps.set_mtime says which)."""

    def checksum(self, path: str, algorithm: str) -> str | None:
        """Server-side digest (hex) when the server can compute it, else None."""
        return None

    def digest(self, path: str, algorithm: str) -> tuple[str, str]:
        """(hex digest, where): the server's own when it has one, else by reading back."""
        got = self.checksum(path, algorithm) if algorithm in self.caps.server_checksum else None
        if got:
            return got, "server"
        h = new_hasher(algorithm)
        with self.open_read(path, 0) as f:
            while True:
                block = f.read(1 << 20)
                if not block:
                    break
                h.update(block)
        return h.hexdigest(), "read-back"

    def close(self) -> None:  # noqa: B027 - optional: stateless backends hold nothing
        """Release the connection."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def not_found(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such file or directory", path)


def hexdigest(algorithm: str, data: bytes) -> str:
    return hashlib.new(algorithm, data).hexdigest()
