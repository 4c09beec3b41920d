"""perform_transfer: move a set of files with given pp, p and cc (DESIGN.md section 3).

cc worker threads each hold one SFTP connection and pull files from a shared
queue; on its connection a worker keeps pp files in flight (Pipeline). A file
of at least p x RANGE_MIN bytes is split into p byte ranges moved over p
separate connections at once, then finalized once. Connections come from a
pool that outlives the chunk, so the next chunk reuses them.

Every file is written under a temporary name next to its final one and renamed
only when complete; a file whose destination already has the same size and
mtime is skipped, which is how a re-run after a crash finishes the job.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import threading
import time
from collections import deque
from typing import Callable

import pyarrow as pa

from .. import manifest_schema as ms
from ..errors import TransferError, UsageError, describe_oserror
from ..paths import check_relative, temp_name
from ..protocols import sftp_wire as w
from ..protocols.endpoint import Endpoint
from ..protocols.pool import SFTPPool
from ..protocols.sftp_wire import Attrs, SFTPProtocolError
from .accounting import Stats
from .params import TransferParams
from .result import ChunkResult, FileOutcome
from .sftp_jobs import DownloadJob, FileTask, Job, Pipeline, UploadJob

RANGE_MIN = 4 * 1024 * 1024  # smallest byte range worth its own connection
DEFAULT_INFLIGHT = 8 * 1024 * 1024  # bytes outstanding per connection (bounded memory)
MAX_RECONNECTS = 2


def _error_text(exc: BaseException, host: str, path: str) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, (SFTPProtocolError, ConnectionError)):
        return f"{describe_oserror(exc)} on {host}:{path}"
    if isinstance(exc, TransferError):
        return exc.message
    return f"{exc.__class__.__name__}: {exc} ({host}:{path})"


class TransferSession:
    """Source and destination endpoints with pooled connections, reused across chunks."""

    def __init__(self, src: Endpoint, dst: Endpoint, *, stats: Stats | None = None,
                 inflight: int = DEFAULT_INFLIGHT, skip_existing: bool = True) -> None:
        if src.scheme == "sftp" and dst.scheme == "sftp":
            raise UsageError("sftp to sftp copies are not supported yet", f"{src.display} -> {dst.display}",
                             "copy to a local staging directory first")
        self.src, self.dst = src, dst
        self.stats = stats or Stats()
        self.inflight = inflight
        self.skip_existing = skip_existing
        remote = src if src.scheme == "sftp" else dst if dst.scheme == "sftp" else None
        self.remote = remote
        self.pool: SFTPPool | None = SFTPPool(remote.target) if remote else None
        self.direction = "upload" if dst.scheme == "sftp" else "download" if src.scheme == "sftp" else "local"
        self._dirs_made: set[str] = set()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def __enter__(self) -> "TransferSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- planning helpers ---------------------------------------------------
    def tasks(self, files: pa.Table, src_root: str, dst_root: str, modes: list[int] | None = None) -> list[FileTask]:
        paths = files[ms.PATH].to_pylist()
        sizes = files[ms.SIZE].to_pylist()
        mtimes = files[ms.MTIME].to_pylist()
        out = []
        for i, rel in enumerate(paths):
            check_relative(rel, self.src.display)
            dst = posixpath.join(dst_root, rel) if self.dst.scheme == "sftp" else os.path.join(dst_root, rel)
            src = posixpath.join(src_root, rel) if self.src.scheme == "sftp" else os.path.join(src_root, rel)
            out.append(FileTask(rel, int(sizes[i]), float(mtimes[i]), src, dst, temp_name(dst),
                                modes[i] if modes else 0o644))
        return out

    def ensure_dirs(self, dst_root: str, rel_dirs: list[str]) -> None:
        """Create dst_root and the given relative directories (pipelined on SFTP)."""
        wanted = {dst_root}
        for rel in rel_dirs:
            check_relative(rel, self.dst.display)
            parts = rel.split("/")
            for i in range(1, len(parts) + 1):
                wanted.add(posixpath.join(dst_root, *parts[:i]))
        todo = sorted(wanted - self._dirs_made, key=lambda p: (p.count("/"), p))
        if not todo:
            return
        if self.dst.scheme != "sftp":
            for d in todo:
                try:
                    os.makedirs(d, exist_ok=True)
                except OSError as exc:
                    raise TransferError(f"cannot create destination directory: {describe_oserror(exc)}",
                                        f"localhost:{d}", "check the destination path and its permissions") from exc
            self._dirs_made.update(todo)
            return
        conn = self.pool.acquire()
        try:
            wire = conn.wire
            failures: dict[str, OSError] = {}
            by_depth: dict[int, list[str]] = {}
            for d in todo:
                by_depth.setdefault(d.count("/"), []).append(d)
            for depth in sorted(by_depth):
                for d in by_depth[depth]:
                    def on_reply(t, r, d=d):
                        try:
                            wire.expect_status(t, r, d)
                        except OSError as exc:
                            failures[d] = exc
                    wire.send(w.MKDIR, wire.p_path(d) + Attrs(mode=0o755).pack(), on_reply)
                while wire.outstanding:
                    wire.pump(block=True)
            # mkdir fails on existing directories too: only a missing directory is an error.
            for d, exc in sorted(failures.items()):
                try:
                    attrs = wire.stat(d)
                except OSError:
                    attrs = None
                if attrs is None or not attrs.is_dir:
                    host = self.dst.host_label
                    raise TransferError(f"cannot create destination directory: {describe_oserror(exc)}",
                                        f"{host}:{d}", "check the destination path and its permissions")
            self._dirs_made.update(todo)
        finally:
            self.pool.release(conn)

    def _already_there(self, tasks: list[FileTask]) -> set[int]:
        """Indices of files whose destination has the same size and mtime (quick check)."""
        done: set[int] = set()
        if self.dst.scheme != "sftp":
            for i, t in enumerate(tasks):
                try:
                    st = os.stat(t.dst)
                except OSError:
                    continue
                if st.st_size == t.size and int(st.st_mtime) == int(t.mtime):
                    done.add(i)
            return done
        conn = self.pool.acquire()
        try:
            wire = conn.wire
            window = 256
            for lo in range(0, len(tasks), window):
                for i in range(lo, min(lo + window, len(tasks))):
                    def on_attrs(ptype, r, i=i):
                        if ptype == w.ATTRS:
                            a = r.attrs()
                            t = tasks[i]
                            if a.is_reg and a.size == t.size and a.mtime == int(t.mtime):
                                done.add(i)
                    wire.send(w.LSTAT, wire.p_path(tasks[i].dst), on_attrs)
                while wire.outstanding:
                    wire.pump(block=True)
        finally:
            self.pool.release(conn)
        return done

    # -- the primitive ---------------------------------------------------------
    def perform(self, files: pa.Table, params: TransferParams, *, src_root: str, dst_root: str,
                chunk_id: str = "chunk-0", modes: list[int] | None = None) -> ChunkResult:
        t0 = time.monotonic()
        tasks = self.tasks(files, src_root, dst_root, modes)
        result = ChunkResult(chunk_id, params, files=len(tasks), bytes=sum(t.size for t in tasks))
        self.stats.params = {"pp": params.pp, "p": params.p, "cc": params.cc}
        dirs = sorted({posixpath.dirname(t.rel) for t in tasks} - {""})
        self.ensure_dirs(dst_root, dirs)
        skip = self._already_there(tasks) if self.skip_existing and tasks else set()
        outcomes: dict[int, FileOutcome] = {}
        for i in skip:
            t = tasks[i]
            outcomes[i] = FileOutcome(t.rel, t.size, ok=True, skipped=True)
            self.stats.file_finished(True, skipped=True)
            self.stats.add_bytes(t.size)
        queue = deque(i for i in range(len(tasks)) if i not in skip)
        runner = _Runner(self, tasks, params, outcomes, queue)
        runner.run()
        result.outcomes = [outcomes[i] for i in range(len(tasks))]
        result.bytes_moved = sum(o.bytes_moved for o in result.outcomes)
        result.seconds = time.monotonic() - t0
        return result


class _Runner:
    """One chunk's worker threads."""

    def __init__(self, session: TransferSession, tasks: list[FileTask], params: TransferParams,
                 outcomes: dict[int, FileOutcome], queue: deque) -> None:
        self.s, self.tasks, self.params = session, tasks, params
        self.outcomes, self.queue = outcomes, queue
        self.lock = threading.Lock()
        self.index = {id(t): i for i, t in enumerate(tasks)}
        self.max_files_in_flight = 0
        self.worker_errors: list[BaseException] = []

    # queue helpers
    def _pop(self, big: bool | None) -> int | None:
        """Next file index; with `big` set, only a file of that kind (else None)."""
        with self.lock:
            if not self.queue:
                return None
            i = self.queue[0]
            if big is not None and self._is_big(self.tasks[i]) != big:
                return None
            return self.queue.popleft()

    def _is_big(self, t: FileTask) -> bool:
        return self.params.p > 1 and t.size >= 2 * RANGE_MIN

    def _record(self, i: int, ok: bool, moved: int, seconds: float, error: str | None) -> None:
        t = self.tasks[i]
        with self.lock:
            self.outcomes[i] = FileOutcome(t.rel, t.size, moved, seconds, ok, error)
        self.s.stats.file_finished(ok)

    def run(self) -> None:
        if not self.queue:
            return
        n = min(self.params.cc, len(self.queue))
        threads = [threading.Thread(target=self._worker, name=f"transfer-cc{k}", daemon=True) for k in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        # Files no worker could take (every connection failed) are failures too.
        reason = self.worker_errors[-1] if self.worker_errors else RuntimeError("no worker ran")
        while self.queue:
            i = self.queue.popleft()
            t = self.tasks[i]
            self._record(i, False, 0, 0.0, _error_text(reason, self.s.remote.host_label if self.s.remote else "localhost", t.dst))

    # workers
    def _worker(self) -> None:
        if self.s.direction == "local":
            self._local_worker()
            return
        reconnects = 0
        while True:
            with self.lock:
                if not self.queue:
                    return
            try:
                conn = self.s.pool.acquire()
            except BaseException as exc:  # noqa: BLE001 - reported per file below
                self.worker_errors.append(exc)
                return
            broken = False
            try:
                self._drain(conn)
                return
            except (SFTPProtocolError, EOFError, OSError) as exc:
                broken = True
                self.worker_errors.append(exc)
                reconnects += 1
                if reconnects > MAX_RECONNECTS:
                    return
            finally:
                self.s.pool.release(conn, broken=broken)

    def _drain(self, conn) -> None:
        pipe = Pipeline(conn.wire, self.params.pp, self.s.inflight)
        try:
            while True:
                i = self._pop(big=True)
                if i is not None:
                    self._ranged(conn, i)
                    continue
                with self.lock:
                    if not self.queue:
                        return
                pipe.run(lambda: self._next_job(), self._job_done)
                with self.lock:
                    self.max_files_in_flight = max(self.max_files_in_flight, pipe.max_open_seen)
        except BaseException as exc:
            for job in list(pipe.active):
                self._abandon(job, exc)
            pipe.active.clear()
            raise

    def _next_job(self) -> Job | None:
        i = self._pop(big=False)
        if i is None:
            return None
        t = self.tasks[i]
        if self.s.direction == "upload":
            return UploadJob(t, 0, t.size, True, self.s.stats)
        try:
            fd = os.open(t.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            job = DownloadJob(t, 0, t.size, True, self.s.stats, -1)
            job.fail(exc)
            job.begin = lambda wire: job.finish()  # nothing to send: fail at once
            return job
        job = DownloadJob(t, 0, t.size, True, self.s.stats, fd)
        job.fd = fd
        return job

    def _job_done(self, job: Job) -> None:
        i = self.index[id(job.task)]
        t = job.task
        if self.s.direction == "download":
            if job.error is None:
                try:
                    self._finalize_local(t)
                except OSError as exc:
                    job.fail(exc)
            if job.error is not None:
                _unlink_quiet(t.tmp)
        if job.error is not None:
            where = t.tmp if self.s.direction == "upload" else t.src
            self._record(i, False, job.acked, job.seconds, _error_text(job.error, self._host_of(job.error), where))
        else:
            self._record(i, True, job.acked, job.seconds, None)

    def _host_of(self, exc: BaseException) -> str:
        return self.s.remote.host_label if self.s.remote else "localhost"

    def _abandon(self, job: Job, exc: BaseException) -> None:
        i = self.index[id(job.task)]
        if self.s.direction == "download":
            if job.fd is not None:
                os.close(job.fd)
                job.fd = None
            _unlink_quiet(job.task.tmp)
        host = self.s.remote.host_label if self.s.remote else "localhost"
        self._record(i, False, job.acked, time.monotonic() - job.t0,
                     f"connection lost while moving {job.task.rel} ({host}): {exc}")

    def _finalize_local(self, t: FileTask) -> None:
        os.chmod(t.tmp, t.mode & 0o7777)
        os.utime(t.tmp, (t.mtime, t.mtime))
        os.replace(t.tmp, t.dst)

    # p > 1: byte ranges of one file over p connections
    def _ranged(self, conn, i: int) -> None:
        t = self.tasks[i]
        p = min(self.params.p, max(1, t.size // RANGE_MIN))
        step = -(-t.size // p)
        ranges = [(lo, min(lo + step, t.size)) for lo in range(0, t.size, step)]
        t0 = time.monotonic()
        extra = []
        try:
            for _ in ranges[1:]:
                extra.append(self.s.pool.acquire())
        except BaseException:
            for c in extra:
                self.s.pool.release(c)
            raise
        conns = [conn, *extra]
        jobs: list[Job] = []
        local_fd = None
        error: BaseException | None = None
        try:
            if self.s.direction == "upload":
                # Create (and truncate) the temporary file once; ranges open it without TRUNC.
                t_, r_ = conn.wire.call(w.OPEN, conn.wire.p_open(t.tmp, w.FXF_WRITE | w.FXF_CREAT | w.FXF_TRUNC,
                                                                  Attrs(mode=0o600)))
                handle = conn.wire.expect_handle(t_, r_, t.tmp)
                t_, r_ = conn.wire.call(w.CLOSE, conn.wire.p_handle(handle))
                conn.wire.expect_status(t_, r_, t.tmp)
                jobs = [UploadJob(t, lo, hi, False, self.s.stats, truncate=False) for lo, hi in ranges]
            else:
                local_fd = os.open(t.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.ftruncate(local_fd, t.size)
                jobs = [DownloadJob(t, lo, hi, False, self.s.stats, local_fd) for lo, hi in ranges]
            errors: list[BaseException] = []

            def run_one(c, job):
                try:
                    Pipeline(c.wire, 1, self.s.inflight).run(_once(job), lambda j: None)
                except BaseException as exc:  # noqa: BLE001 - collected, re-raised below
                    errors.append(exc)

            threads = [threading.Thread(target=run_one, args=(c, j), daemon=True) for c, j in zip(conns, jobs)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            error = errors[0] if errors else next((j.error for j in jobs if j.error), None)
            if error is None:
                if self.s.direction == "upload":
                    conn.wire.setstat(t.tmp, Attrs(mode=t.mode & 0o7777, mtime=int(t.mtime)))
                    conn.wire.rename(t.tmp, t.dst)
                else:
                    os.close(local_fd)
                    local_fd = None
                    self._finalize_local(t)
        except (OSError, SFTPProtocolError) as exc:
            error = exc
        finally:
            if local_fd is not None:
                os.close(local_fd)
            for c in extra:
                broken = any(not c.alive for c in extra)
                self.s.pool.release(c, broken=broken)
        moved = sum(j.acked for j in jobs)
        if error is not None:
            if self.s.direction == "upload":
                try:
                    conn.wire.remove(t.tmp)
                except (OSError, SFTPProtocolError):
                    pass
            else:
                _unlink_quiet(t.tmp)
            self._record(i, False, moved, time.monotonic() - t0, _error_text(error, self._host_of(error), t.dst))
            if isinstance(error, (SFTPProtocolError, EOFError)):
                raise error
            return
        with self.lock:
            self.max_files_in_flight = max(self.max_files_in_flight, 1)
        self._record(i, True, moved, time.monotonic() - t0, None)

    # local -> local
    def _local_worker(self) -> None:
        while True:
            i = self._pop(big=None)
            if i is None:
                return
            t = self.tasks[i]
            t0 = time.monotonic()
            try:
                with open(t.src, "rb") as fin:
                    st = os.fstat(fin.fileno())
                    if st.st_size != t.size or int(st.st_mtime) != int(t.mtime):
                        raise TransferError("source changed since it was listed", t.src, "run the copy again")
                    with open(t.tmp, "wb") as fout:
                        shutil.copyfileobj(fin, fout, 1 << 20)
                self._finalize_local(t)
                self.s.stats.add_bytes(t.size)
                self._record(i, True, t.size, time.monotonic() - t0, None)
            except (OSError, TransferError) as exc:
                _unlink_quiet(t.tmp)
                self._record(i, False, 0, time.monotonic() - t0, _error_text(exc, "localhost", t.dst))


def _once(job: Job) -> Callable[[], Job | None]:
    given = [job]
    return lambda: given.pop() if given else None


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
