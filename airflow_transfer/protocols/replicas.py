"""Replicas (paper 001, goal D): one dataset read from several hosts at once.

A ReplicaSet holds the replica endpoints of one source (the same tree under
each one's root) and what has been measured of each: bytes, time, an
estimated rate, failures in a row. Each generic-path worker reads through a
ReplicaSource backend, which sends every file to the replica expected to
finish it first — its queued bytes plus this file over its measured rate —
so faster replicas carry more bytes and replicas serve different files at the
same time. A replica that fails `drop_after` times in a row is dropped: the
file it was serving is retried on another replica and continues from the
bytes already at the destination (the digest still covers the whole file).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection

from ..errors import TransferError, describe_oserror
from .backends.base import Backend, Capabilities, FileInfo, ReadStream
from .endpoint import Endpoint

DEFAULT_RATE = 8e6  # bytes/s assumed for a replica not yet measured (it gets tried soon)


class ReplicaSet:
    def __init__(self, replicas: list[Endpoint], drop_after: int = 3) -> None:
        self.replicas = replicas
        self.root = replicas[0].path
        self.drop_after = drop_after
        self.lock = threading.Lock()
        n = len(replicas)
        self.bytes = [0] * n
        self.files = [0] * n
        self.seconds = [0.0] * n
        self.rate = [0.0] * n  # bytes/s, 0 = not measured yet
        self.queued = [0] * n  # bytes of files being read from it now
        self.fails = [0] * n
        self.dropped: dict[int, str] = {}

    def live(self) -> list[int]:
        return [i for i in range(len(self.replicas)) if i not in self.dropped]

    def choose(self, size: int, exclude: Collection[int] = frozenset()) -> int:
        with self.lock:
            live = [i for i in self.live() if i not in exclude] or self.live()
            if not live:
                raise ConnectionError(
                    "every replica was dropped: "
                    + "; ".join(f"{self.replicas[i].display}: {why}" for i, why in self.dropped.items())
                )
            known = [r for r in self.rate if r > 0]
            default = max(known) if known else DEFAULT_RATE

            def finish(i: int) -> float:
                return (self.queued[i] + size) / (self.rate[i] or default)

            best = min(live, key=finish)
            self.queued[best] += size
            return best

    def done(self, i: int, nbytes: int, seconds: float, size: int, ok: bool, error: str = "") -> None:
        with self.lock:
            self.queued[i] = max(0, self.queued[i] - size)
            self.bytes[i] += nbytes
            self.seconds[i] += seconds
            if ok:
                self.files[i] += 1
                self.fails[i] = 0
                if nbytes >= 64 * 1024 and seconds > 0:
                    now = nbytes / seconds
                    self.rate[i] = now if not self.rate[i] else 0.5 * self.rate[i] + 0.5 * now
            else:
                self.fails[i] += 1
                if self.fails[i] >= self.drop_after and len(self.live()) > 1:
                    self.dropped[i] = error or "failed"

    def translate(self, i: int, path: str) -> str:
        rel = path[len(self.root) :].lstrip("/") if path.startswith(self.root) else path
        root = self.replicas[i].path
        return f"{root.rstrip('/')}/{rel}" if rel else root

    def summary(self) -> list[dict]:
        with self.lock:
            return [
                {
                    "url": ep.display,
                    "files": self.files[i],
                    "bytes": self.bytes[i],
                    "throughput_mbit": round(self.bytes[i] * 8 / self.seconds[i] / 1e6, 2) if self.seconds[i] else 0.0,
                    "dropped": i in self.dropped,
                    "reason": self.dropped.get(i, ""),
                }
                for i, ep in enumerate(self.replicas)
            ]


class _Measured:
    def __init__(self, f: ReadStream, rs: ReplicaSet, i: int, size: int) -> None:
        self.f, self.rs, self.i, self.size = f, rs, i, size
        self.n, self.t0, self.closed, self.error = 0, time.monotonic(), False, ""

    def read(self, n: int = -1) -> bytes:
        try:
            data = self.f.read(n)
        except Exception as exc:
            self.error = f"{exc.__class__.__name__}: {exc}"
            self._finish(False)
            # paramiko's read timeout carries no text: say what it means
            detail = str(exc) or (
                "no reply within the stall timeout (--stall-timeout)"
                if isinstance(exc, TimeoutError)
                else exc.__class__.__name__
            )
            raise ConnectionError(f"replica {self.rs.replicas[self.i].display} failed: {detail}") from exc
        self.n += len(data)
        return data

    def _finish(self, ok: bool) -> None:
        if not self.closed:
            self.closed = True
            self.rs.done(self.i, self.n, time.monotonic() - self.t0, self.size, ok, self.error)

    def close(self) -> None:
        try:
            self.f.close()
        finally:
            self._finish(not self.error)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ReplicaSource(Backend):
    """A read-only backend over a ReplicaSet: one lazily opened connection per replica."""

    caps = Capabilities(write=False, rename=False)

    def __init__(self, rs: ReplicaSet, connect: Callable[[Endpoint], Backend]) -> None:
        # `connect` is backends.connect, passed in by it: a replica is any backend, and the
        # dispatcher that knows them all sits above this one (no import cycle).
        self.rs = rs
        self.connect = connect
        self.scheme = "replicas"
        self.conns: dict[int, Backend] = {}

    def _conn(self, i: int) -> Backend:
        if i not in self.conns:
            self.conns[i] = self.connect(self.rs.replicas[i])
        return self.conns[i]

    def _meta(self, fn: str, path: str):
        last: Exception | None = None
        for i in self.rs.live():
            try:
                return getattr(self._conn(i), fn)(self.rs.translate(i, path))
            except (FileNotFoundError, PermissionError, NotADirectoryError, TransferError):
                raise  # a hostile listing (UnsafePathError) stops the copy, it is not a dead replica
            except Exception as exc:  # noqa: BLE001 - try the next replica
                last = exc
                self.conns.pop(i, None)
                self.rs.done(i, 0, 0.0, 0, False, f"{exc.__class__.__name__}: {exc}")
        detail = str(last) or ("no reply (stalled)" if isinstance(last, TimeoutError) else type(last).__name__)
        raise ConnectionError(f"no replica answers: {detail}")

    def stat(self, path: str) -> FileInfo:
        return self._meta("stat", path)

    def listdir(self, path: str) -> list[FileInfo]:
        return self._meta("listdir", path)

    def walk(self, root: str):
        return self._meta("walk", root)

    size_hint = 0  # bytes the next open_read will read (set by the generic path)

    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        size, self.size_hint = self.size_hint, 0
        missing: dict[int, OSError] = {}
        while True:
            i = self.rs.choose(size, exclude=set(missing))
            if i in missing:  # every live replica was tried
                self.rs.done(i, 0, 0.0, size, True)
                where = ", ".join(f"{self.rs.replicas[k].display}: {describe_oserror(e)}" for k, e in missing.items())
                raise TransferError(
                    f"{path} cannot be read from any replica ({where})",
                    "",
                    "check that every replica holds the same tree, or drop the --replica that lacks it",
                )
            try:
                f = self._conn(i).open_read(self.rs.translate(i, path), offset)
            except (FileNotFoundError, PermissionError) as exc:
                # Replicas should hold the same tree: one that lacks this file counts as failing
                # (dropped after drop_after in a row) and another one serves the file.
                missing[i] = exc
                self.rs.done(i, 0, 0.0, size, False, f"{self.rs.translate(i, path)}: {describe_oserror(exc)}")
                continue
            except Exception as exc:
                self.conns.pop(i, None)
                self.rs.done(i, 0, 0.0, size, False, f"{exc.__class__.__name__}: {exc}")
                raise ConnectionError(f"replica {self.rs.replicas[i].display}: {exc}") from exc
            return _Measured(f, self.rs, i, size)

    def open_write(self, path, offset=0):
        raise PermissionError("replicas are a source")

    def rename(self, src, dst):
        raise PermissionError("replicas are a source")

    def delete(self, path):
        raise PermissionError("replicas are a source")

    def mkdir(self, path, parents=True, exist_ok=True):
        raise PermissionError("replicas are a source")

    def close(self) -> None:
        for c in self.conns.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing: a connection already broken is fine
                pass
        self.conns.clear()
