"""The generic session: any pair of backends (protocols/backends) beneath the one runner.

Used when an end is neither a local path nor an SFTP host served by the
pipelined engine (ftp, http(s) sources, s3 and other fsspec stores), and by
the fall-back controller for its alternates. Same contract as the engine:
files land under a temporary name (where the protocol can rename; object
stores publish an object only when its upload completes, so they are written
in place), the source digest is computed while reading, the destination is
checked by size (a "successful" copy of the wrong length is a failure) and by
digest (the server's own, else read back), journal marks make resume and skip
work, and a partial temporary file is continued where the protocol can append.

pp and p are not used here: these protocols have no request pipelining of
their own, and cc already gives separate connections per file.
"""

from __future__ import annotations

import errno
import os
import posixpath
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Unpack

from ..errors import ConnectError, TransferError, describe_oserror
from ..integrity.algorithms import new_hasher
from ..manifest import Manifest, _build, _is_temp
from ..paths import check_relative, join_path, temp_name
from ..protocols import backends
from ..protocols.endpoint import Endpoint
from .failures import ChecksumMismatch, SizeMismatch
from .params import TransferParams
from .retry import classify
from .runner import Runner
from .session import Session, SessionOptions
from .sftp_jobs import FileTask, SourceChanged, count_progress

BLOCK = 1 << 20

Pair = tuple[backends.Backend, backends.Backend]


@dataclass
class _VerifyStats:
    verified: int = 0
    repaired: int = 0
    mismatched: int = 0
    where: set = field(default_factory=set)


def _connect(endpoint: Endpoint) -> backends.Backend:
    try:
        return backends.connect(endpoint)
    except (FileNotFoundError, PermissionError):
        raise
    except OSError as exc:
        # Refused, unresolvable, timed out: the user's host or port (still retried as transient).
        raise ConnectError(
            str(exc), endpoint.display, "check that the server is running and the host and port are right"
        ) from exc


class BackendSession(Session):
    """Source and destination backends, with idle connection pairs kept for the next file."""

    def __init__(self, src: Endpoint, dst: Endpoint, **opts: Unpack[SessionOptions]) -> None:
        super().__init__(src, dst, **opts)
        self.src_caps = backends.capabilities(src.scheme)
        self.dst_caps = backends.capabilities(dst.scheme)
        if not self.dst_caps.write:
            raise TransferError(f"{dst.scheme} cannot be a destination", dst.display, "copy from it instead")
        self.direction = f"{src.scheme}->{dst.scheme}"
        self.pool = None  # no SFTP pool: listings go through the backend
        self.remote: Endpoint | None = None  # not the SFTP engine: no SFTP link adjustments
        self.vstats = _VerifyStats()
        self._idle: list[Pair] = []
        self._lock = threading.Lock()

    # -- connections ---------------------------------------------------------
    def connect_pair(self) -> Pair:
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

    def release_pair(self, pair: Pair, broken: bool = False) -> None:
        if broken:
            for b in pair:
                _close_quiet(b)
            return
        with self._lock:
            self._idle.append(pair)

    @contextmanager
    def pair(self) -> Iterator[Pair]:
        """A connection pair for one errand; dropped, not kept, when the errand fails."""
        pair = self.connect_pair()
        try:
            yield pair
        except BaseException:
            self.release_pair(pair, broken=True)
            raise
        self.release_pair(pair)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for pair in idle:
            for b in pair:
                _close_quiet(b)

    # -- listing and directories ---------------------------------------------------
    def list_source(self) -> Manifest:
        if self.src.scheme == "file":
            return super().list_source()
        with self.pair() as pair:
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
        files = [f for f in listing.files if not _is_temp(f[0])]
        return _build(files, listing.empty_dirs, self.src.display, listing.is_file, {})

    def ensure_dirs(self, dst_root: str, rel_dirs: list[str]) -> None:
        wanted = {dst_root}
        for rel in rel_dirs:
            check_relative(rel, self.dst.display)
            wanted.add(join_path(dst_root, rel))
        with self.pair() as pair:
            for d in sorted(wanted, key=lambda p: (p.count("/"), p)):
                try:
                    pair[1].mkdir(d, parents=True, exist_ok=True)
                except OSError as exc:
                    raise TransferError(
                        f"cannot create destination directory: {describe_oserror(exc)}",
                        f"{self.dst.host_label}:{d}",
                        "check the destination path and its permissions",
                    ) from exc

    def already_there(self, tasks: list[FileTask]) -> set[int]:
        """Files whose destination has the same size and mtime: one listing per directory
        (a round trip each), not one stat per file."""
        done: set[int] = set()
        if not self.dst_caps.set_mtime:
            return done  # without our mtime on the destination, size alone proves nothing
        try:
            pair = self.connect_pair()
        except Exception:  # noqa: BLE001 - workers report the connection problem per file
            return done
        by_dir: dict[str, list[int]] = {}
        for i, t in enumerate(tasks):
            by_dir.setdefault(posixpath.dirname(t.dst), []).append(i)
        ok = True
        try:
            for d, idxs in by_dir.items():
                try:
                    entries = {e.path.rstrip("/").rsplit("/", 1)[-1]: e for e in pair[1].listdir(d)}
                except (FileNotFoundError, NotADirectoryError):
                    continue
                for i in idxs:
                    t = tasks[i]
                    e = entries.get(posixpath.basename(t.dst))
                    if e is not None and not e.is_dir and e.size == t.size and int(e.mtime) == int(t.mtime):
                        done.add(i)
        except Exception:  # noqa: BLE001 - a broken connection: copy everything, workers will tell
            ok = False
        finally:
            self.release_pair(pair, broken=not ok)
        return done

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

    def summary_extra(self) -> dict:
        if self.src.scheme == "replicas":
            return {"replicas": (self.src.options or {})["set"].summary()}  # per host: bytes read, failures
        return {}

    # -- the primitive ---------------------------------------------------------------
    def temp_for(self, dst: str) -> str:
        # Object stores publish an object only once its upload completes: written in place.
        return dst if self.dst_caps.atomic_put or not self.dst_caps.rename else temp_name(dst)

    def chunk_params(self, params: TransferParams) -> TransferParams:
        return TransferParams(pp=1, p=1, cc=params.cc)  # no request pipelining here; cc connections

    def mover(self, runner: Runner) -> BackendMover:
        return BackendMover(self, runner)


class BackendMover:
    """One file at a time per connection pair: read the source, write the destination."""

    def __init__(self, session: BackendSession, runner: Runner) -> None:
        self.s, self.r = session, runner
        self.where = session.dst.display

    def connect(self) -> Pair:
        return self.s.connect_pair()

    def release(self, conn: Pair, broken: bool) -> None:
        self.s.release_pair(conn, broken=broken)

    def describe(self) -> str:
        return ""

    def stat_source(self, task: FileTask) -> tuple[int, float]:
        with self.s.pair() as pair:
            st = pair[0].stat(task.src)
        return int(st.size), float(st.mtime)

    def drain(self, conn: Pair, gone: list[bool]) -> None:
        r = self.r
        for i in r.schedule.each():
            t = r.tasks[i]
            try:
                self._copy(conn, t)
            except BaseException as exc:
                # Not a statement about the data: continue from what reached the destination.
                data = isinstance(exc, (SizeMismatch, ChecksumMismatch, SourceChanged))
                t.resumable = not data
                r.failed(i, exc, 0.0, t.dst)
                if not data and classify(exc)[0]:
                    raise ConnectionError(f"connection dropped after: {exc}") from exc
                continue
            r.finish(i, True, 0.0, None)

    def _resume_at(self, dst_b: backends.Backend, t: FileTask) -> int:
        """Where a resumable temporary file continues: its size, for a sequential stream (no
        holes below it), where the protocol can append or write at an offset."""
        caps = self.s.dst_caps
        if not (t.resumable and t.tmp != t.dst and (caps.append_write or caps.ranged_write)):
            return 0
        if not self.s.src_caps.ranged_read:
            return 0
        try:
            have = dst_b.stat(t.tmp).size
        except FileNotFoundError:
            return 0
        return have if 0 < have <= t.size else 0

    def _copy(self, pair: Pair, t: FileTask) -> None:
        src_b, dst_b = pair
        t.attempts += 1
        alg = self.s.verify
        start = self._resume_at(dst_b, t)
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
            count_progress(t, self.s.stats, start)
        off = self._stream(src_b, dst_b, t, start, hasher)
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
        if hasher is not None and alg is not None:
            self._check_digest(dst_b, t, alg, hasher.hexdigest())
        if t.tmp != t.dst:
            dst_b.rename(t.tmp, t.dst)

    def _stream(self, src_b: Any, dst_b: backends.Backend, t: FileTask, start: int, hasher: Any) -> int:
        """Source bytes from `start` to the temporary file; the offset reached."""
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
                    self.r.journal_range(t.rel, off, len(block))
                    off += len(block)
                    t.moved_total += len(block)
                    count_progress(t, self.s.stats, len(block))
            finally:
                wr.close()
        finally:
            if rd is not None:
                rd.close()
        return off

    def _check_digest(self, dst_b: backends.Backend, t: FileTask, alg: str, want: str) -> None:
        if self.s.before_verify is not None:
            self.s.before_verify(t.tmp)
        got, where = dst_b.digest(t.tmp, alg)
        self.s.vstats.where.add(where)
        if got != want:
            t.mismatches += 1
            self.s.vstats.mismatched += 1
            try:
                dst_b.delete(t.tmp)
            except OSError:
                pass
            raise ChecksumMismatch(f"checksum mismatch ({alg}): source {want[:16]}, destination {got[:16]}")
        self.s.vstats.verified += 1
        if t.mismatches:
            self.s.vstats.repaired += 1


def _close_quiet(b: backends.Backend) -> None:
    try:
        b.close()
    except Exception:  # noqa: BLE001 - already gone
        pass
