"""The generic transfer path: any pair of backends (protocols/backends), cc worker threads.

Used when an end is neither a local path nor an SFTP host served by the
pipelined engine (ftp, http(s) sources, s3 and other fsspec stores), and by
the fall-back controller. Same contract as TransferSession.perform: files land
under a temporary name (where the protocol can rename; object stores publish
an object only when its upload completes, so they are written in place), the
source digest is computed while reading, the destination is checked by size
(a "successful" copy of the wrong length is a failure) and by digest (the
server's own, else read back), journal marks make resume and skip work, and a
partial temporary file is continued where the protocol can append.

pp and p are not used here: these protocols have no request pipelining of
their own, and cc already gives separate connections per file.
"""

from __future__ import annotations

import errno
import heapq
import os
import posixpath
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from .. import manifest_schema as ms
from ..errors import ConnectError, TransferError, describe_oserror
from ..integrity.algorithms import new_hasher
from ..paths import check_relative, temp_name
from ..protocols import backends
from ..protocols.endpoint import Endpoint
from .accounting import Stats
from .control import Control
from .params import TransferParams
from .result import ChunkResult, FileOutcome
from .retry import RetryPolicy, classify
from .sftp_jobs import SourceChanged  # the source changed while it was read: both paths send it again
from .transfer import MAX_REPAIRS

BLOCK = 1 << 20


class SizeMismatch(OSError):
    """The protocol reported success but the destination has another size (paper 003's silent failure)."""


class DigestMismatch(OSError):
    """Source and destination digests differ."""


@dataclass
class _Task:
    rel: str
    size: int
    mtime: float
    mode: int
    src: str
    dst: str
    tmp: str
    resumable: bool = False
    attempts: int = 0
    mismatches: int = 0
    moved: int = 0
    last_error: str | None = None
    resumed: bool = False


def _join(root: str, rel: str) -> str:
    return posixpath.join(root, rel) if rel else root


@dataclass
class _VerifyStats:
    verified: int = 0
    repaired: int = 0
    mismatched: int = 0
    where: set = field(default_factory=set)


def _connect(endpoint) -> backends.Backend:
    try:
        return backends.connect(endpoint)
    except (FileNotFoundError, PermissionError):
        raise
    except OSError as exc:
        # Refused, unresolvable, timed out: the user's host or port (still retried as transient).
        raise ConnectError(
            str(exc), endpoint.display, "check that the server is running and the host and port are right"
        ) from exc


class BackendSession:
    """Source and destination backends; the same surface as engine.transfer.TransferSession."""

    def __init__(
        self,
        src: Endpoint,
        dst: Endpoint,
        *,
        stats: Stats | None = None,
        skip_existing: bool = True,
        retry: RetryPolicy | None = None,
        journal=None,
        verify: str | None = None,
        control: Control | None = None,
    ) -> None:
        self.src, self.dst = src, dst
        self.stats = stats or Stats()
        self.skip_existing = skip_existing
        self.retry = retry or RetryPolicy()
        self.journal = journal
        self.verify = verify
        self.control = control or Control()
        self.before_verify: Callable[[str], None] | None = None
        self.src_caps = backends.capabilities(src.scheme)
        self.dst_caps = backends.capabilities(dst.scheme)
        if not self.dst_caps.write:
            raise TransferError(f"{dst.scheme} cannot be a destination", dst.display, "copy from it instead")
        self.direction = f"{src.scheme}->{dst.scheme}"
        self.pool = None  # no SFTP pool: listings go through the backend
        self.remote = None  # not the SFTP engine: no SFTP link adjustments
        self.vstats = _VerifyStats()
        self._idle: list[tuple[backends.Backend, backends.Backend]] = []
        self._lock = threading.Lock()

    # -- connections ---------------------------------------------------------
    def connect_pair(self) -> tuple[backends.Backend, backends.Backend]:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        s = _connect(self.src)
        try:
            d = _connect(self.dst)
        except BaseException:
            s.close()
            raise
        return s, d

    def release_pair(self, pair, broken: bool = False) -> None:
        if broken:
            for b in pair:
                _close_quiet(b)
            return
        with self._lock:
            self._idle.append(pair)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for pair in idle:
            for b in pair:
                _close_quiet(b)

    def __enter__(self) -> BackendSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- listing and directories ---------------------------------------------------
    def list_source(self):
        from ..manifest import _build, _is_temp

        pair = self.connect_pair()
        try:
            try:
                listing = pair[0].walk(self.src.path)
            except FileNotFoundError as exc:
                raise TransferError("source does not exist", self.src.display, "check the source path") from exc
            except PermissionError as exc:
                raise TransferError("source is not readable (permission denied)", self.src.display) from exc
            except (ConnectionError, TimeoutError, EOFError) as exc:
                raise TransferError(
                    f"listing the source failed: {exc or 'no reply (stalled)'}",
                    self.src.display,
                    "check that the server is up and answering; re-run to try again",
                ) from exc
        except BaseException:
            self.release_pair(pair, broken=True)
            raise
        self.release_pair(pair)
        files = [f for f in listing.files if not _is_temp(f[0])]
        return _build(files, listing.empty_dirs, self.src.display, listing.is_file, {})

    def ensure_dirs(self, dst_root: str, rel_dirs: list[str]) -> None:
        wanted = {dst_root}
        for rel in rel_dirs:
            check_relative(rel, self.dst.display)
            wanted.add(_join(dst_root, rel))
        pair = self.connect_pair()
        try:
            for d in sorted(wanted, key=lambda p: (p.count("/"), p)):
                try:
                    pair[1].mkdir(d, parents=True, exist_ok=True)
                except OSError as exc:
                    raise TransferError(
                        f"cannot create destination directory: {describe_oserror(exc)}",
                        f"{self.dst.host_label}:{d}",
                        "check the destination path and its permissions",
                    ) from exc
        except BaseException:
            self.release_pair(pair, broken=True)
            raise
        self.release_pair(pair)

    def verify_summary(self) -> dict:
        if self.verify is None:
            return {"algorithm": "none", "mode": "none", "where": "none", "verified": 0, "repaired": 0, "mismatched": 0}
        where = ", ".join(sorted(self.vstats.where)) or "none"
        return {
            "algorithm": self.verify,
            "mode": "file",
            "where": f"destination {where}",
            "verified": self.vstats.verified,
            "repaired": self.vstats.repaired,
            "mismatched": self.vstats.mismatched,
        }

    # -- the primitive ---------------------------------------------------------------
    def perform(
        self,
        files: pa.Table,
        params: TransferParams,
        *,
        src_root: str,
        dst_root: str,
        chunk_id: str = "chunk-0",
        modes: list[int] | None = None,
        resume: dict[str, list] | None = None,
    ) -> ChunkResult:
        t0 = time.monotonic()
        paths = files[ms.PATH].to_pylist()
        sizes = files[ms.SIZE].to_pylist()
        mtimes = files[ms.MTIME].to_pylist()
        tasks = []
        for i, rel in enumerate(paths):
            check_relative(rel, self.src.display)
            dst = _join(dst_root, rel)
            tmp = dst if self.dst_caps.atomic_put or not self.dst_caps.rename else temp_name(dst)
            tasks.append(
                _Task(
                    rel,
                    int(sizes[i]),
                    float(mtimes[i]),
                    modes[i] if modes else 0o644,
                    _join(src_root, rel),
                    dst,
                    tmp,
                    resumable=resume is not None and rel in resume,
                )
            )
        used = TransferParams(pp=1, p=1, cc=params.cc)
        result = ChunkResult(chunk_id, used, files=len(tasks), bytes=sum(t.size for t in tasks), started=t0)
        self.stats.params = {"pp": 1, "p": 1, "cc": params.cc}
        dirs = sorted({posixpath.dirname(t.rel) for t in tasks} - {""})
        if tasks:
            self.ensure_dirs(dst_root, dirs)
        runner = _Runner(self, tasks, params.cc)
        runner.run()
        result.outcomes = [runner.outcomes[i] for i in range(len(tasks))]
        result.bytes_moved = sum(o.bytes_moved for o in result.outcomes)
        result.resumed = sum(1 for t in tasks if t.resumed)
        result.retried = sum(1 for t in tasks if t.attempts > 1)
        result.bytes_resent = sum(max(0, t.moved - t.size) for t in tasks)
        result.seconds = time.monotonic() - t0
        return result


class _Runner:
    def __init__(self, s: BackendSession, tasks: list[_Task], cc: int) -> None:
        self.s, self.tasks, self.cc = s, tasks, cc
        self.policy = s.retry
        self.outcomes: dict[int, FileOutcome] = {}
        self.queue: deque[int] = deque()
        self.delayed: list[tuple[float, int]] = []
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.running = 0
        self.fatal: BaseException | None = None

    def run(self) -> None:
        skip = self._already_there() if self.s.skip_existing and self.tasks else set()
        for i in skip:
            t = self.tasks[i]
            self.outcomes[i] = FileOutcome(t.rel, t.size, ok=True, skipped=True)
            self.s.stats.file_finished(True, skipped=True)
            self.s.stats.add_bytes(t.size)
            if self.s.journal is not None:
                self.s.journal.mark_done(t.rel, t.size, t.mtime)
        self.queue.extend(i for i in range(len(self.tasks)) if i not in skip)
        if self.queue:
            threads = [
                threading.Thread(target=self._worker, name=f"copy-cc{k}", daemon=True)
                for k in range(min(self.cc, len(self.queue)))
            ]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        left = [i for i in range(len(self.tasks)) if i not in self.outcomes]
        for i in left:
            t = self.tasks[i]
            if self.fatal is not None:
                msg = _text(self.fatal, self.s.dst.host_label, t.dst)
            elif self.s.control.stopping() or self.s.control.aborted():
                msg = (
                    f"not finished on {self.s.dst.scheme if self.s.dst.scheme != 'file' else self.s.src.scheme}"
                    f" (protocol switch){': ' + t.last_error if t.last_error else ''}"
                )
            elif t.last_error and self.policy.time_left() <= 0:
                msg = f"deadline reached after {t.attempts} attempts; last error: {t.last_error}"
            else:
                msg = t.last_error or "not attempted"
            self._finish(i, False, msg, journal=True)

    def _already_there(self) -> set[int]:
        """Files whose destination has the same size and mtime: one listing per directory
        (a round trip each), not one stat per file."""
        done: set[int] = set()
        if not self.s.dst_caps.set_mtime:
            return done  # without our mtime on the destination, size alone proves nothing
        try:
            pair = self.s.connect_pair()
        except Exception:  # noqa: BLE001 - workers report the connection problem per file
            return done
        by_dir: dict[str, list[int]] = {}
        for i, t in enumerate(self.tasks):
            by_dir.setdefault(posixpath.dirname(t.dst), []).append(i)
        ok = True
        try:
            for d, idxs in by_dir.items():
                try:
                    entries = {e.path.rstrip("/").rsplit("/", 1)[-1]: e for e in pair[1].listdir(d)}
                except (FileNotFoundError, NotADirectoryError):
                    continue
                for i in idxs:
                    t = self.tasks[i]
                    e = entries.get(posixpath.basename(t.dst))
                    if e is not None and not e.is_dir and e.size == t.size and int(e.mtime) == int(t.mtime):
                        done.add(i)
        except Exception:  # noqa: BLE001 - a broken connection: copy everything, workers will tell
            ok = False
        finally:
            self.s.release_pair(pair, broken=not ok)
        return done

    # -- queue ---------------------------------------------------------------
    def _next(self) -> int | None:
        with self.lock:
            while True:
                if self.fatal is not None or self.s.control.stopping() or self.s.control.aborted():
                    return None
                now = time.monotonic()
                while self.delayed and self.delayed[0][0] <= now:
                    self.queue.append(heapq.heappop(self.delayed)[1])
                if self.queue:
                    self.running += 1
                    return self.queue.popleft()
                if not self.delayed and self.running == 0:
                    return None
                timeout = (self.delayed[0][0] - now) if self.delayed else 0.5
                self.wake.wait(max(0.01, min(timeout, 0.5)))

    def _finish(self, i: int, ok: bool, error: str | None, journal: bool = True, running: bool = False) -> None:
        t = self.tasks[i]
        with self.lock:
            self.outcomes[i] = FileOutcome(t.rel, t.size, t.moved, 0.0, ok, error)
            if running:
                self.running -= 1
            self.wake.notify_all()
        self.s.stats.file_finished(ok)
        j = self.s.journal
        if j is not None and journal:
            if ok:
                j.mark_done(t.rel, t.size, t.mtime, attempts=t.attempts)
            else:
                j.mark_failed(t.rel, error or "failed", attempts=t.attempts)

    def _retry_later(self, i: int, delay: float) -> None:
        with self.lock:
            heapq.heappush(self.delayed, (time.monotonic() + delay, i))
            self.running -= 1
            self.wake.notify_all()

    # -- workers -----------------------------------------------------------------
    def _worker(self) -> None:
        pair = None
        fails = 0
        while True:
            i = self._next()
            if i is None:
                break
            t = self.tasks[i]
            if pair is None:
                try:
                    pair = self.s.connect_pair()
                    fails = 0
                except BaseException as exc:  # noqa: BLE001 - classified
                    retry, _ = classify(exc)
                    t.last_error = _text(exc, self.s.dst.host_label, t.dst)
                    self.s.control.event(False, "connect", t.last_error)
                    if not retry:
                        with self.lock:
                            self.fatal = exc
                        self._finish(i, False, t.last_error, running=True)
                        continue
                    fails += 1
                    self._retry_later(i, 0.0)
                    wait = min(self.policy.delay(fails), max(0.0, self.policy.time_left()))
                    if wait <= 0 or self.s.control.aborted():
                        break
                    time.sleep(wait)
                    continue
            try:
                self._copy(pair, t)
            except BaseException as exc:  # noqa: BLE001 - classified
                broken = self._failed(i, exc)
                if broken:
                    self.s.release_pair(pair, broken=True)
                    pair = None
                continue
            self.s.control.event(True)
            with self.lock:
                self.running -= 1
            self._finish(i, True, None)
        if pair is not None:
            self.s.release_pair(pair)

    def _failed(self, i: int, exc: BaseException) -> bool:
        """Requeue or fail file i; True when the connection should be dropped."""
        t = self.tasks[i]
        t.last_error = _text(exc, self.s.dst.host_label, t.dst)
        retry, _ = classify(exc)
        kind = "error"
        broken = retry
        if isinstance(exc, SizeMismatch):
            kind, retry, broken = "size", True, False
        elif isinstance(exc, DigestMismatch):
            kind, broken = "checksum", False
            t.mismatches += 1
            self.s.vstats.mismatched += 1
            retry = t.mismatches <= MAX_REPAIRS
            if not retry:
                t.last_error += f"; still wrong after {MAX_REPAIRS} re-sends"
        elif isinstance(exc, SourceChanged):
            kind, retry, broken = "source", True, False
        self.s.control.event(False, kind, t.last_error)
        if kind in ("size", "checksum", "source"):
            t.resumable = False  # send the whole file again
        elif retry:
            t.resumable = True  # same source version: continue from what reached the destination
        if (
            retry
            and not self.s.control.aborted()
            and t.attempts < self.policy.max_attempts
            and self.policy.time_left() > 0
        ):
            self._retry_later(i, 0.0 if kind != "error" else self.policy.delay(t.attempts))
            return broken
        if retry and self.s.control.aborted():
            # Left for the next protocol: no outcome here (run() records why it stopped).
            with self.lock:
                self.running -= 1
                self.wake.notify_all()
            return broken
        if retry:
            t.last_error = f"gave up after {t.attempts} attempts; last error: {t.last_error}"
        self._finish(i, False, t.last_error, running=True)
        return broken

    def _copy(self, pair, t: _Task) -> None:
        src_b, dst_b = pair
        t.attempts += 1
        alg = self.s.verify
        start = 0
        if (
            t.resumable
            and t.tmp != t.dst
            and (self.s.dst_caps.append_write or self.s.dst_caps.ranged_write)
            and self.s.src_caps.ranged_read
        ):
            try:
                have = dst_b.stat(t.tmp).size
            except FileNotFoundError:
                have = 0
            if 0 < have <= t.size:
                start = have
        hasher = new_hasher(alg) if alg else None
        if start and hasher is not None:
            # The digest covers the whole file: the part already there is read from the source.
            with src_b.open_read(t.src, 0) as f:
                left = start
                while left:
                    block = f.read(min(BLOCK, left))
                    if not block:
                        raise SourceChanged(errno.EIO, "source shorter than listed", t.src)
                    hasher.update(block)
                    left -= len(block)
        if start:
            t.resumed = True
            self.s.stats.add_bytes(start)
        off = start
        if hasattr(src_b, "size_hint"):
            src_b.size_hint = t.size - start  # replicas choose a host by expected finish time
        rd = src_b.open_read(t.src, start) if start or t.size else None
        try:
            wr = dst_b.open_write(t.tmp, start)
            try:
                while rd is not None:
                    block = rd.read(BLOCK)
                    if not block:
                        break
                    if off + len(block) > t.size:
                        raise SourceChanged(errno.EIO, "source grew while it was read", t.src)
                    if hasher is not None:
                        hasher.update(block)
                    wr.write(block)
                    if self.s.journal is not None:
                        self.s.journal.mark_range(t.rel, off, len(block))
                    off += len(block)
                    t.moved += len(block)
                    self.s.stats.add_bytes(len(block))
            finally:
                wr.close()
        finally:
            if rd is not None:
                rd.close()
        if off != t.size:
            raise SourceChanged(errno.EIO, f"source has {off} bytes, listed with {t.size}", t.src)
        got = dst_b.stat(t.tmp).size
        if got != t.size:
            raise SizeMismatch(
                errno.EIO, f"size mismatch after a reported success: destination has {got} of {t.size} bytes", t.dst
            )
        if self.s.dst_caps.set_mtime:
            dst_b.set_mtime(t.tmp, t.mtime)
        if self.s.dst.scheme == "file":
            os.chmod(t.tmp, t.mode & 0o7777 or 0o644)
        if hasher is not None:
            if self.s.before_verify is not None:
                self.s.before_verify(t.tmp)
            got_digest, where = dst_b.digest(t.tmp, alg)
            self.s.vstats.where.add(where)
            if got_digest != hasher.hexdigest():
                try:
                    dst_b.delete(t.tmp)
                except OSError:
                    pass
                raise DigestMismatch(
                    errno.EIO,
                    f"checksum mismatch ({alg}): source {hasher.hexdigest()[:16]}, destination {got_digest[:16]}",
                    t.dst,
                )
            self.s.vstats.verified += 1
            if t.mismatches:
                self.s.vstats.repaired += 1
        if t.tmp != t.dst:
            dst_b.rename(t.tmp, t.dst)


def _text(exc: BaseException, host: str, path: str) -> str:
    if isinstance(exc, TransferError):
        return exc.message
    if isinstance(exc, (SizeMismatch, DigestMismatch, SourceChanged)):
        return f"{exc.strerror} ({host}:{exc.filename or path})"
    if isinstance(exc, OSError) and not isinstance(exc, ConnectionError) and exc.errno is not None:
        return f"{describe_oserror(exc)} on {host}:{path}"
    return f"{exc.__class__.__name__}: {exc} ({host}:{path})"


def _close_quiet(b) -> None:
    try:
        b.close()
    except Exception:  # noqa: BLE001 - already gone
        pass
