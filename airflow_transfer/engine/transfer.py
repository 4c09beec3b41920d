"""perform_transfer: move a set of files with given pp, p and cc (docs/transfers.md).

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

import errno
import heapq
import os
import posixpath
import threading
import time
from collections import deque
from collections.abc import Callable

import pyarrow as pa

from .. import manifest_schema as ms
from ..errors import TransferError, UsageError, describe_oserror
from ..integrity.algorithms import digest_file
from ..paths import check_relative, temp_name
from ..protocols import sftp_wire as w
from ..protocols.endpoint import Endpoint
from ..protocols.pool import WARM_CONNECTIONS, SFTPPool
from ..protocols.sftp_wire import Attrs, SFTPProtocolError
from ..store.ranges import coalesce
from .accounting import Stats
from .control import NOT_FINISHED, Control
from .params import TransferParams
from .result import ChunkResult, FileOutcome
from .retry import RetryPolicy, classify
from .sftp_jobs import (
    DownloadJob,
    FileTask,
    Job,
    Pipeline,
    SourceChanged,
    UploadJob,
    contiguous_prefix,
    count_progress,
    mtime_changed,
)
from .verify import DestinationDigests, Piece, SourceHasher, Verifier, VerifyItem

MAX_REPAIRS = 2  # re-sends of a file whose digests did not match before it fails


class ChecksumMismatch(Exception):
    """Source and destination digests differ: the file is sent again."""


RANGE_MIN = 4 * 1024 * 1024  # smallest byte range worth its own connection
DEFAULT_INFLIGHT = 8 * 1024 * 1024  # bytes outstanding per connection (bounded memory)
ABANDON_GRACE = 5.0  # seconds a chunk waits for files in flight once a fall-back abandoned its protocol


def _error_text(exc: BaseException, host: str, path: str) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, (SFTPProtocolError, ConnectionError)):
        return f"{describe_oserror(exc)} on {host}:{path}"
    if isinstance(exc, TransferError):
        return exc.message
    if isinstance(exc, ConnectionError) and str(exc):
        return f"{exc} ({host}:{path})"  # already a sentence; the class name adds nothing
    return f"{exc.__class__.__name__}: {exc} ({host}:{path})"


class _ReportedPool:
    """The session's pool as its verifier sees it: a connection the verifier cannot open is
    reported to the session's control like a worker's (a fall-back counts it), so a verifier
    reconnecting to a server that went away does not hold the copy until the deadline."""

    def __init__(self, session: TransferSession) -> None:
        self._session = session

    def acquire(self, *args, **kwargs):
        try:
            return self._session.pool.acquire(*args, **kwargs)
        except BaseException as exc:
            self._session.control.event(False, "connect", _error_text(exc, self._session.pool.target.display, ""))
            raise

    def __getattr__(self, name):
        return getattr(self._session.pool, name)


class TransferSession:
    """Source and destination endpoints with pooled connections, reused across chunks."""

    def __init__(
        self,
        src: Endpoint,
        dst: Endpoint,
        *,
        stats: Stats | None = None,
        inflight: int = DEFAULT_INFLIGHT,
        skip_existing: bool = True,
        retry: RetryPolicy | None = None,
        journal=None,
        verify: str | None = None,
        verify_mode: str = "file",
        block_size: int | None = None,
        verify_threads: int | None = None,
        pool: SFTPPool | None = None,
    ) -> None:
        """`pool`: connections to the remote end opened (or warming) before the session
        existed; the CLI starts them ahead of its heavy imports. The session owns it from here."""
        if src.scheme == "sftp" and dst.scheme == "sftp":
            raise UsageError(
                "sftp to sftp copies are not supported yet",
                f"{src.display} -> {dst.display}",
                "copy to a local staging directory first",
            )
        self.src, self.dst = src, dst
        self.stats = stats or Stats()
        self.inflight = inflight
        self.retry = retry or RetryPolicy()
        self.journal = journal  # a store JournalWriter, or None
        self.verify = verify  # checksum algorithm, None = no verification
        self.verifier: Verifier | None = None
        self.verify_mode, self.verify_why = verify_mode, ""
        self.block_size, self.verify_threads = block_size, verify_threads
        self.bandwidth_bps: float | None = None  # the link's, when known: balances block checksum threads
        self.resume_blocks: dict[str, list] = {}  # path -> journaled block digests (block mode)
        self.before_verify: Callable[[str], None] | None = None  # tests inject faults here
        self.skip_existing = skip_existing
        remote = src if src.scheme == "sftp" else dst if dst.scheme == "sftp" else None
        self.remote = remote
        if pool is not None and (remote is None or pool.target is not remote.target):
            pool.close()  # opened for another endpoint: of no use here
            pool = None
        self.pool: SFTPPool | None = pool or (SFTPPool(remote.target) if remote else None)
        self.direction = "upload" if dst.scheme == "sftp" else "download" if src.scheme == "sftp" else "local"
        if verify_mode == "auto":
            # Block mode for uploads: on wan50 `large` file mode's last files waited for their
            # whole-file fsync and read-back (docs/integrity.md, "Why `auto` picks block mode").
            self.verify_mode = "block" if self.direction == "upload" else "file"
            self.verify_why = (
                "auto: block-level for uploads"
                if self.direction == "upload"
                else f"auto: file-level, since block mode verifies uploads and this is a {self.direction} copy"
            )
        elif verify_mode == "block" and self.direction != "upload":
            self.verify_mode = "file"
            self.verify_why = f"block mode verifies uploads; this {self.direction} copy is verified per file"
        self._dirs_made: set[str] = set()
        self.on_runner: Callable[[_Runner], None] | None = None  # sees each chunk's runner before it runs
        self._parent: TransferSession | None = None  # set on a sibling()
        self._retired: list[Verifier] = []  # stopped verifiers of siblings, for verify_summary
        self.control: Control = Control()  # the fall-back's hooks (engine/control.py); default: none

    def sibling(self) -> TransferSession:
        """A session over the same endpoints, connection pool, stats and journal with a verifier
        of its own: a chunk running alongside others (Multi-Chunk) needs one, since a verifier
        calls back into one chunk's runner. Closing it keeps the pool and hands its verifier's
        counts to this session's verify_summary."""
        s = TransferSession(
            self.src,
            self.dst,
            stats=self.stats,
            inflight=self.inflight,
            skip_existing=self.skip_existing,
            retry=self.retry,
            journal=self.journal,
            verify=self.verify,
            verify_mode=self.verify_mode,
            block_size=self.block_size,
            verify_threads=self.verify_threads,
        )
        s.pool, s._dirs_made, s._parent = self.pool, self._dirs_made, self
        s.control = self.control
        s.bandwidth_bps, s.resume_blocks, s.before_verify = self.bandwidth_bps, self.resume_blocks, self.before_verify
        return s

    def time_left(self) -> float:
        """Seconds the copy may still spend here: none once a fall-back abandons this protocol (the
        verifier then stops reconnecting to a server that went away; the next protocol checks)."""
        return 0.0 if self.control.aborted() else self.retry.time_left()

    def warm(self, connections: int = WARM_CONNECTIONS) -> None:
        """Open the first connections in the background, while the copy lists, journals and plans."""
        if self.pool is not None:
            self.pool.warm(connections)

    def close(self) -> None:
        if self.verifier is not None:
            self.verifier.stop()
            if self._parent is not None:
                self._parent._retired.append(self.verifier)
            self.verifier = None
        if self.pool is not None and self._parent is None:
            self.pool.close()

    def _ensure_verifier(self) -> Verifier | None:
        if self.verify is None or self.verifier is not None:
            return self.verifier
        if self.verify_mode == "block":
            from .block_verify import DEFAULT_BLOCK_SIZE, BlockVerifier, choose_threads

            block = self.block_size or DEFAULT_BLOCK_SIZE
            threads, self.block_t, self.block_c = choose_threads(self.verify, block, self.bandwidth_bps)
            pool = _ReportedPool(self)
            self.verifier = BlockVerifier(
                lambda: DestinationDigests(self.verify, pool),
                self.verify,
                block,
                self.verify_threads or threads,
                time_left=self.time_left,
                before=lambda item: self.before_verify and self.before_verify(item.tmp),
                max_threads=self.verify_threads or max(1, min(4, os.cpu_count() or 1)),
            )
            self.verifier.start()
            return self.verifier
        pool = _ReportedPool(self) if self.pool is not None else None
        if self.direction == "download":
            dest, src = DestinationDigests(self.verify, None), DestinationDigests(self.verify, pool)
        else:
            dest, src = DestinationDigests(self.verify, pool if self.direction == "upload" else None), None
        self.verifier = Verifier(
            dest,
            lambda item, ok, err: None,
            src=src,
            time_left=self.time_left,
            max_rounds=self.retry.max_attempts,
            before=lambda item: self.before_verify and self.before_verify(item.tmp),
        )
        self.verifier.start()
        return self.verifier

    def verify_summary(self) -> dict:
        if self.verify is None:
            return {"algorithm": "none", "mode": "none", "where": "none", "verified": 0, "repaired": 0, "mismatched": 0}
        every = [x for x in (self.verifier, *self._retired) if x is not None]  # siblings' too (Multi-Chunk)
        v = every[0] if every else None
        where = v.dest.where if v else "none"
        if v is not None and v.src is not None:
            where = f"source {v.src.where}, destination {v.dest.where}"
        out = {
            "algorithm": self.verify,
            "mode": self.verify_mode,
            "where": where,
            "verified": sum(x.stats.verified for x in every),
            "repaired": sum(x.stats.repaired for x in every),
            "mismatched": sum(x.stats.mismatched for x in every),
        }
        if getattr(v, "block_mode", False):
            b = _sum_bstats([x.bstats for x in every])
            out["block_size"], out["threads"] = v.block_size, max(x.threads for x in every)
            # What the thread count was balanced from (t: 0 when the link's bandwidth is unknown).
            out["balance"] = {
                "t_block_s": round(getattr(self, "block_t", 0.0), 6),
                "c_block_s": round(getattr(self, "block_c", 0.0), 6),
            }
            measured = v.balance()  # t and c per block as measured during the run
            if measured is not None:
                out["balance"]["t_block_measured_s"] = round(measured[0], 6)
                out["balance"]["c_block_measured_s"] = round(measured[1], 6)
            out["blocks"] = {
                "verified": b.verified,
                "mismatched": b.mismatched,
                "resent": b.resent,
                "bytes_resent": b.bytes_resent,
                "from_journal": b.from_journal,
            }
        reasons = [self.verify_why] if self.verify_why else []
        reasons += [d.reason for d in ((v.dest, v.src) if v else ()) if d is not None and d.reason]
        if reasons:
            out["why"] = "; ".join(reasons)
        return out

    def server_summary(self) -> tuple[dict | None, list[str]]:
        """What the remote SFTP server turned out to support (the summary's `server`), and the
        decisions its missing capabilities forced (for `tuning.notes`)."""
        if self.pool is None:
            return None, []
        caps = self.pool.caps
        v = self.verifier or next(iter(self._retired), None)
        side = None if v is None else v.dest if self.direction == "upload" else v.src
        if side is not None and side.exec is not None:
            caps.exec_method, caps.exec_reason = side.exec, side.reason
        return caps.summary(), caps.notes()

    def __enter__(self) -> TransferSession:
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
            out.append(
                FileTask(rel, int(sizes[i]), float(mtimes[i]), src, dst, temp_name(dst), modes[i] if modes else 0o644)
            )
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
                    raise TransferError(
                        f"cannot create destination directory: {describe_oserror(exc)}",
                        f"localhost:{d}",
                        "check the destination path and its permissions",
                    ) from exc
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
                    raise TransferError(
                        f"cannot create destination directory: {describe_oserror(exc)}",
                        f"{host}:{d}",
                        "check the destination path and its permissions",
                    )
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
        """Move `files`. `resume` maps a path whose listing is unchanged since an earlier
        attempt to the byte ranges the journal holds for it."""
        t0 = time.monotonic()
        tasks = self.tasks(files, src_root, dst_root, modes)
        for t in tasks:
            if resume is not None and t.rel in resume:
                t.resumable = True
                done = resume[t.rel]
                t.done, t.journaled = coalesce(done), True
                if done and params.p > 1 and t.size >= 2 * RANGE_MIN:
                    t.todo_ranges = _subtract([(0, t.size)], [tuple(r) for r in done]) or None
        result = ChunkResult(chunk_id, params, files=len(tasks), bytes=sum(t.size for t in tasks), started=t0)
        self.stats.params = {"pp": params.pp, "p": params.p, "cc": params.cc}
        dirs = sorted({posixpath.dirname(t.rel) for t in tasks} - {""})
        why = "protocol switch" if self.control.stopping() else ""
        if not why:
            try:
                self.ensure_dirs(dst_root, dirs)
                skip = self._already_there(tasks) if self.skip_existing and tasks else set()
            except Exception as exc:
                if not self.control.absorb(exc):  # a fall-back carries these files elsewhere
                    raise
                why = _error_text(exc, self.remote.host_label if self.remote else "localhost", dst_root)
        if why:
            result.outcomes = [FileOutcome(t.rel, t.size, 0, 0.0, False, f"{NOT_FINISHED} ({why})") for t in tasks]
            result.seconds = time.monotonic() - t0
            return result
        outcomes: dict[int, FileOutcome] = {}
        for i in skip:
            t = tasks[i]
            outcomes[i] = FileOutcome(t.rel, t.size, ok=True, skipped=True)
            self.stats.file_finished(True, skipped=True)
            self.stats.add_bytes(t.size)
            # A crash between a rename and its journal mark leaves a complete file the journal
            # does not call done; the re-run that skips it must say so, as backend_copy does.
            if self.journal is not None:
                self.journal.mark_done(t.rel, t.size, t.mtime)
        queue = deque(i for i in range(len(tasks)) if i not in skip)
        runner = _Runner(self, tasks, params, outcomes, queue)
        if self.on_runner is not None:
            self.on_runner(runner)
        if queue and self._ensure_verifier() is not None:
            self.verifier.on_verdict = runner.on_verdict
            self.verifier.deliver = runner.on_verdicts
            if getattr(self.verifier, "block_mode", False):
                runner.attach_blocks(self.verifier, resume)
            elif self.verify_mode == "sequential":
                self.verifier.gate.clear()  # this chunk's checksums wait for all its transfers
        runner.run()
        result.outcomes = [outcomes[i] for i in range(len(tasks))]
        result.bytes_moved = sum(o.bytes_moved for o in result.outcomes)
        result.resumed = sum(1 for t in tasks if t.resumed)
        result.retried = sum(1 for t in tasks if t.attempts > 1)
        result.bytes_resent = sum(max(0, t.moved_total - t.size) for t in tasks)
        result.seconds = time.monotonic() - t0
        return result


class _Runner:
    """One chunk's worker threads, with retries, reconnects and resume."""

    def __init__(
        self,
        session: TransferSession,
        tasks: list[FileTask],
        params: TransferParams,
        outcomes: dict[int, FileOutcome],
        queue: deque,
    ) -> None:
        self.s, self.tasks, self.params = session, tasks, params
        self.outcomes, self.queue = outcomes, queue
        self.policy = session.retry
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.delayed: list[tuple[float, int]] = []  # (ready time, index), a heap
        self.running = 0  # files handed to workers and not yet finished or requeued
        self.index = {id(t): i for i, t in enumerate(tasks)}
        self.max_files_in_flight = 0
        self.worker_errors: list[BaseException] = []
        self.fatal: BaseException | None = None  # no worker can ever connect (auth, host key)
        self.host = session.remote.host_label if session.remote else "localhost"
        self.alg = session.verify
        self.blocks = None  # block_verify.BlockVerifier in --verify-mode block
        self.in_verify: set[int] = set()  # files waiting for a verdict (sequential mode opens the gate)
        # Worker threads: `wanted` may change while the chunk runs (set_workers); `live` counts them.
        self.wanted, self.live = params.cc, 0
        self.threads: list[threading.Thread] = []
        self.started = self.ended = self.stopped = False

    def attach_blocks(self, verifier, resume: dict | None) -> None:
        self.blocks = verifier
        verifier.on_mismatch = self.on_block_mismatch
        verifier.begin_chunk()
        for i, t in enumerate(self.tasks):
            journaled = self.s.resume_blocks.get(t.rel) if t.resumable else None
            verifier.register(i, t, journaled)
            if self._is_big(t):  # only blocks with a journaled digest count as already there
                t.todo_ranges = (verifier.missing(i) or []) if journaled else None

    def _journal_block(self, rel: str, block) -> None:
        if self.s.journal is not None:
            self.s.journal.mark_block(rel, block.offset, block.length, f"{self.alg}:{block.digest}")

    # -- queue -------------------------------------------------------------
    def _promote(self) -> None:
        now = time.monotonic()
        while self.delayed and self.delayed[0][0] <= now:
            self.queue.append(heapq.heappop(self.delayed)[1])

    def _pop(self, big: bool | None, carrying: int = 0) -> int | None:
        """Next ready file; with `big` set, only one of that kind. None: nothing ready now, or
        (`carrying` files already on this worker) fewer files left than the other workers could
        take one each. Without that rule one worker's pipeline (pp 2) took both files of wan50's
        `large` while the second connection sat idle: one window-bound connection, 274 against
        392 Mbit/s (benchmarks/results/wan50-openssh)."""
        with self.lock:
            self._promote()
            if not self.queue or (carrying and len(self.queue) < self.wanted) or self.s.control.stopping():
                return None
            i = self.queue[0]
            if big is not None and self._is_big(self.tasks[i]) != big:
                return None
            self.running += 1
            return self.queue.popleft()

    def _wait_for_work(self) -> bool:
        """Block until a file is ready (or this worker is one too many); False when the chunk
        has nothing left to do."""
        with self.lock:
            while True:
                if self.s.control.stopping():
                    return False  # a fall-back takes the rest elsewhere; files in flight still finish
                self._promote()
                if self.queue or self.live > self.wanted:
                    return True
                if not self.delayed and self.running == 0:
                    return False
                if not self.delayed and self.running == len(self.in_verify) and self.s.verifier is not None:
                    self.s.verifier.gate.set()  # sequential mode: every transfer ended, now the checksums
                if self.fatal is not None:
                    return False
                timeout = (self.delayed[0][0] - time.monotonic()) if self.delayed else 0.5
                self.wake.wait(max(0.01, min(timeout, 0.5)))

    def _is_big(self, t: FileTask) -> bool:
        return (
            self.params.p > 1
            and t.size >= 2 * RANGE_MIN
            and not t.repair
            and not (self.s.direction == "upload" and self.s.pool.caps.offset_writes is False)
        )

    def _offset_writes(self, wire, t: FileTask) -> bool:
        """Whether the destination server takes writes at an offset (asked once per server)."""
        caps = self.s.pool.caps
        if caps.offset_writes is None:
            try:
                caps.probe_offset_writes(wire, posixpath.dirname(t.tmp))
            except ConnectionError:
                raise
            except OSError:
                return True  # the probe could not even create a file: the copy itself reports why
        return bool(caps.offset_writes)

    # -- outcomes ------------------------------------------------------------
    def _finish(self, i: int, ok: bool, seconds: float, error: str | None) -> None:
        t = self.tasks[i]
        # Journal first: once `running` reaches 0 the chunk returns and the caller may close
        # the journal, and a verdict delivered on the verifier thread would then be lost.
        j = self.s.journal
        try:
            if j is not None:
                if ok:
                    j.mark_done(t.rel, t.size, t.mtime, attempts=t.attempts)
                else:
                    j.mark_failed(t.rel, error or "failed", attempts=t.attempts)
        finally:
            self.s.stats.file_finished(ok)
            with self.lock:
                self.outcomes[i] = FileOutcome(t.rel, t.size, t.moved_total, seconds, ok, error)
                self.running -= 1
                self.wake.notify_all()
            self.s.control.event(ok, "error", error or "")

    def _failed(self, i: int, exc: BaseException, seconds: float, where: str) -> None:
        """Retry the file later if the error is transient and time allows, else fail it."""
        t = self.tasks[i]
        t.last_error = _error_text(exc, self.host, where)
        retry, _reason = classify(exc)
        if isinstance(exc, SourceChanged):
            retry = self._relist(t)
        if isinstance(exc, ChecksumMismatch):
            t.last_error = f"{exc} ({self.host}:{t.dst})"
            retry = t.mismatches <= MAX_REPAIRS
            if not retry:
                t.last_error = f"{t.last_error}; still wrong after {MAX_REPAIRS} re-sends"
        # time_left: none once a fall-back abandons this protocol; the file then fails here and the
        # next protocol carries it.
        if retry and t.attempts < self.policy.max_attempts and self.s.time_left() > 0:
            ready = time.monotonic() + (0 if isinstance(exc, SourceChanged) else self.policy.delay(t.attempts))
            with self.lock:
                heapq.heappush(self.delayed, (ready, i))
                self.running -= 1
                self.wake.notify_all()
            return
        if retry and self.s.time_left() <= 0:
            t.last_error = f"deadline reached after {t.attempts} attempts; last error: {t.last_error}"
        elif retry:
            t.last_error = f"gave up after {t.attempts} attempts; last error: {t.last_error}"
        self._finish(i, False, seconds, t.last_error)

    def _relist(self, t: FileTask) -> bool:
        """The source changed: take its new size and mtime and send it again from scratch."""
        try:
            if self.s.src.scheme == "sftp":
                conn = self.s.pool.acquire()
                try:
                    a = conn.wire.stat(t.src)
                finally:
                    self.s.pool.release(conn)
                size, mtime = a.size or 0, float(a.mtime or 0)
            else:
                st = os.stat(t.src)
                size, mtime = st.st_size, st.st_mtime
        except Exception:  # noqa: BLE001 - gone or unreadable: report the change as is
            return False
        self.s.stats.add_total(0, size - t.size)
        t.size, t.mtime = size, mtime
        t.todo_ranges, t.resumable, t.repair, t.done = None, False, None, None
        return True

    # -- workers: their number may change while the chunk runs (Multi-Chunk) ----------
    def set_workers(self, n: int) -> None:
        """Grow to `n` worker threads now, or shrink: a worker too many leaves once the files it
        has in flight are done."""
        with self.lock:
            self.wanted = n
            if self.started and not self.ended:
                self._spawn()
            self.wake.notify_all()

    def stop(self) -> None:
        """Every worker leaves at its next file boundary; files not started stay not done."""
        with self.lock:
            self.stopped = True
        self.set_workers(0)

    def _spawn(self) -> None:
        while self.live < self.wanted:  # lock held
            th = threading.Thread(target=self._worker, name=f"transfer-cc{len(self.threads)}", daemon=True)
            self.threads.append(th)
            self.live += 1
            th.start()

    def _surplus(self) -> bool:
        with self.lock:
            return self.live > self.wanted

    def _retire(self, gone: list[bool]) -> bool:
        """At a file boundary: leave if the chunk has a worker too many."""
        with self.lock:
            if self.live > self.wanted:
                self.live -= 1
                gone[0] = True
                self.wake.notify_all()
        return gone[0]

    # -- run -------------------------------------------------------------------
    def run(self) -> None:
        if not self.queue:
            self.ended = True
            return
        with self.lock:
            self.wanted = min(self.wanted, len(self.queue))
            self.started = True
            self._spawn()
        while True:  # set_workers may add threads while these run
            with self.lock:
                alive = [th for th in self.threads if th.is_alive()]
                if not alive:
                    self.ended = True
                    break
            for th in alive:
                th.join()
        if self.stopped and self.s.verifier is not None:
            self.s.verifier.gate.set()  # sequential mode: no transfer is left to wait for
        # Files still being verified get their verdict first (the verifier gives up at the
        # deadline too), so every file ends with exactly one outcome.
        with self.lock:
            last, still_since = self.running, time.monotonic()
            while self.running > 0:
                self.wake.wait(0.5)
                if self.running != last:
                    last, still_since = self.running, time.monotonic()
                elif (
                    self.s.control.aborted()
                    and time.monotonic() - still_since > ABANDON_GRACE
                    and not any(th.is_alive() for th in self.threads)
                ):
                    # The protocol was abandoned, every worker is gone and nothing has moved for a
                    # while: what is still counted as running will not end here (a file whose
                    # connection died under it); the next protocol carries it.
                    self.running = 0
                    break
        # Whatever no worker could take (deadline, fatal connection error) fails with the reason.
        reason = self.fatal or (self.worker_errors[-1] if self.worker_errors else RuntimeError("no worker ran"))
        with self.lock:
            left = list(self.queue) + [i for _, i in self.delayed]
            self.queue.clear()
            self.delayed.clear()
            left += [i for i in range(len(self.tasks)) if i not in self.outcomes and i not in left]
            self.running += len(left)
        switching = self.s.control.stopping()
        for i in left:
            t = self.tasks[i]
            if self.stopped or switching:  # not done, not failed: the journal keeps what it had
                why = (
                    "the transfer was stopped" if self.stopped else f"protocol switch: {t.last_error or 'not started'}"
                )
                with self.lock:
                    self.outcomes[i] = FileOutcome(t.rel, t.size, t.moved_total, 0.0, False, f"{NOT_FINISHED}: {why}")
                    self.running -= 1
                continue
            if t.last_error and not self.fatal:
                msg = f"deadline reached after {t.attempts} attempts; last error: {t.last_error}"
            else:
                msg = _error_text(reason, self.host, t.dst)
            self._finish(i, False, 0.0, msg)

    def _worker(self) -> None:
        gone = [False]  # set by _retire, which counts this worker out itself
        try:
            self._work(gone)
        finally:
            with self.lock:
                if not gone[0]:
                    self.live -= 1
                self.wake.notify_all()

    def _work(self, gone: list[bool]) -> None:
        if self.s.direction == "local":
            self._local_worker(gone)
            return
        attempt = 0
        while self._wait_for_work() and not self._retire(gone):
            try:
                conn = self.s.pool.acquire()
            except BaseException as exc:  # noqa: BLE001 - classified below
                self.worker_errors.append(exc)
                retry, _ = classify(exc)
                self.s.control.event(
                    False, "connect", _error_text(exc, self.host, self.s.remote.display if self.s.remote else "")
                )
                if not retry:
                    with self.lock:
                        self.fatal = exc
                        self.wake.notify_all()
                    return
                attempt += 1
                wait = min(self.policy.delay(attempt), self.s.time_left())
                if wait <= 0 or self.s.control.stopping():
                    return
                time.sleep(wait)
                continue
            attempt = 0
            broken = False
            try:
                self._drain(conn)
            except (SFTPProtocolError, EOFError, OSError, ConnectionError) as exc:
                broken = True
                self.worker_errors.append(exc)
            except Exception as exc:  # noqa: BLE001 - paramiko's own exceptions
                broken = True
                self.worker_errors.append(exc)
            finally:
                self.s.pool.release(conn, broken=broken)

    def _drain(self, conn) -> None:
        pipe = Pipeline(conn.wire, self.params.pp, self.s.inflight)
        if self.s.direction == "upload" and self.params.p > 1 and self.tasks:
            self._offset_writes(conn.wire, self.tasks[0])  # a server that cannot gets p = 1
        try:
            while not self._surplus():
                i = self._pop(big=True)
                if i is not None:
                    self._ranged(conn, i)
                    continue
                with self.lock:
                    self._promote()
                    if not self.queue or self.s.control.stopping():
                        return
                pipe.run(lambda: self._next_job(conn.wire, len(pipe.active)), self._job_done)
                with self.lock:
                    self.max_files_in_flight = max(self.max_files_in_flight, pipe.max_open_seen)
        except BaseException as exc:
            # The connection died: every file it carried is retried on a new one,
            # from what already reached the destination.
            for job in list(pipe.active):
                self._abandon(job, exc)
            pipe.active.clear()
            raise

    def _probe_resume(self, wire, t: FileTask) -> int:
        """Bytes of this source version known to be in the temporary file from offset 0 (single
        stream): the contiguous prefix of the acknowledged ranges (this run's, or the journal's),
        no further than the file reaches. Never the file's size alone: a short read or an
        out-of-order write leaves holes below it."""
        prefix = contiguous_prefix(t.done) if t.resumable else 0
        if prefix <= 0:
            return 0
        if self.s.direction == "upload" and not self._offset_writes(wire, t):
            return 0  # it could only be sent again from its first byte
        try:
            if self.s.direction == "upload":
                size = wire.stat(t.tmp, follow=False).size or 0
            else:
                size = os.stat(t.tmp).st_size
        except OSError:
            return 0
        return min(prefix, size, t.size)

    def _keep(self, job: Job) -> None:
        """Remember what `job` put in the temporary file, for a later attempt's resume."""
        if job.ranges:
            t = job.task
            t.done = coalesce((t.done or []) + job.ranges)
            t.journaled = True

    def _restart(self, t: FileTask) -> None:
        """The temporary file is created afresh: nothing in it is known any more, in memory or in
        the journal (a crash now must not resume from ranges of the truncated file)."""
        t.done = None
        if t.journaled and self.s.journal is not None:
            self.s.journal.mark_restart(t.rel)
        t.journaled = False

    def _next_job(self, wire, carrying: int = 0) -> Job | None:
        if self._surplus():
            return None  # a worker too many: finish the files in flight, then leave
        i = self._pop(big=False, carrying=carrying)
        if i is None:
            return None
        t = self.tasks[i]
        t.attempts += 1
        if self.blocks is not None:
            from .block_verify import make_upload_job

            try:
                if (t.resumable or t.repair) and not self._offset_writes(wire, t):
                    t.resumable, t.repair = False, None  # blocks land only in order: all of it again
                if not t.resumable and not t.repair:
                    self.blocks.forget(i)
                return make_upload_job(self.blocks, i, t, wire, self.s.stats, self._on_range, self._journal_block)
            except BaseException as exc:
                self._failed(i, ConnectionError(f"connection lost: {exc}"), 0.0, t.dst)
                raise
        try:
            start = self._probe_resume(wire, t)
        except BaseException as exc:
            # The connection died before this file got a job: hand it back, then let the
            # worker replace the connection.
            self._failed(i, ConnectionError(f"connection lost: {exc}"), 0.0, t.dst)
            raise
        if start:
            t.resumed = True
            count_progress(t, self.s.stats, start)
        else:
            self._restart(t)
        if self.s.direction == "upload":
            job: Job = UploadJob(t, start, t.size, True, self.s.stats, truncate=start == 0)
            if self.alg:
                job.hasher = SourceHasher(self.alg, 0)
                job.defer_rename = True
        else:
            try:
                flags = os.O_WRONLY | os.O_CREAT | (0 if start else os.O_TRUNC)
                fd = os.open(t.tmp, flags, 0o600)
            except OSError as exc:
                job = DownloadJob(t, 0, t.size, True, self.s.stats, -1)
                job.fail(exc)
                job.begin = lambda wire, job=job: job.finish()  # nothing to send: fail at once
                return job
            job = DownloadJob(t, start, t.size, True, self.s.stats, fd)
            job.fd = fd
        job.on_range = self._on_range
        return job

    def _on_range(self, rel: str, off: int, n: int) -> None:
        if self.s.journal is not None:
            self.s.journal.mark_range(rel, off, n)

    def _job_done(self, job: Job) -> None:
        i = self.index[id(job.task)]
        t = job.task
        t.moved_total += job.acked
        self._keep(job)
        if self.s.direction == "download":
            if job.error is None:
                try:
                    self._finalize_local(t, rename=not self.alg)
                except OSError as exc:
                    job.fail(exc)
            if job.error is not None and not classify(job.error)[0]:
                _unlink_quiet(t.tmp)
        if job.error is None:
            if self.blocks is not None:
                self.blocks.transfer_done(i)
                return
            if self.alg:
                pieces = [job.hasher.piece()] if job.hasher is not None else [Piece(0, t.size, "")]
                self._submit_verify(i, pieces)
                return
            self._finish(i, True, job.seconds, None)
            return
        err = job.error
        where = t.dst if self.s.direction == "upload" else t.src
        self._failed(i, err, job.seconds, where)

    def _abandon(self, job: Job, exc: BaseException) -> None:
        i = self.index[id(job.task)]
        job.task.moved_total += job.acked
        self._keep(job)
        if self.s.direction == "download" and job.fd is not None:
            try:
                os.close(job.fd)
            except OSError:
                pass
            job.fd = None
        job.task.resumable = True  # same source version: the next attempt continues
        where = job.task.src if self.s.direction == "download" else job.task.dst  # the remote side
        self._failed(i, ConnectionError(f"connection lost: {exc}"), time.monotonic() - job.t0, where)

    def _finalize_local(self, t: FileTask, rename: bool = True) -> None:
        os.chmod(t.tmp, t.mode & 0o7777)
        os.utime(t.tmp, (t.mtime, t.mtime))
        if rename:
            os.replace(t.tmp, t.dst)

    # -- verification ------------------------------------------------------------
    def _submit_verify(self, i: int, pieces: list[Piece]) -> None:
        t = self.tasks[i]
        src = t.src if self.s.direction != "download" else None
        whole = (lambda: digest_file(self.alg, src)) if src else None
        with self.lock:
            self.in_verify.add(i)
            self.wake.notify_all()
        self.s.verifier.submit(VerifyItem(i, t.tmp, pieces, whole_source=whole, source_path=t.src))

    def on_verdicts(self, verdicts: list) -> None:
        """Runs on the verifier thread: a batch's renames go out pipelined, so a batch
        costs one round trip instead of one per file (on a 50 ms link, 300 files
        renamed one by one spent 15 s waiting)."""
        wire = self.s.verifier.dest.wire if self.s.direction == "upload" else None
        renamed: dict[int, BaseException | None] = {}
        if wire is not None:
            try:
                for item, ok, _ in verdicts:
                    if ok:
                        t = self.tasks[item.index]

                        def on_reply(rt, r, i=item.index, path=t.dst):
                            try:
                                wire.expect_status(rt, r, path)
                                renamed[i] = None
                            except (OSError, SFTPProtocolError) as exc:
                                renamed[i] = exc

                        wire.send_rename(t.tmp, t.dst, on_reply)
                while wire.outstanding:
                    wire.pump(block=True)
            except (OSError, SFTPProtocolError, EOFError) as exc:
                for item, ok, _ in verdicts:
                    if ok:
                        renamed.setdefault(item.index, exc)
        for item, ok, error in verdicts:
            self.on_verdict(
                item, ok, error, renamed.get(item.index) if wire is not None else None, done=wire is not None
            )

    def on_verdict(
        self,
        item: VerifyItem,
        ok: bool,
        error: str | None,
        rename_error: BaseException | None = None,
        done: bool = False,
    ) -> None:
        """Rename a verified file (unless `done` says it was renamed already, with
        `rename_error` its outcome), or send a mismatching one again."""
        i, t = item.index, self.tasks[item.index]
        with self.lock:
            self.in_verify.discard(i)
        if ok:
            try:
                if rename_error is not None or getattr(item, "rename_error", None) is not None:
                    raise rename_error or item.rename_error
                if done or getattr(item, "renamed", False):
                    pass  # renamed already, pipelined with the rest of its batch
                elif self.s.direction == "upload":
                    self.s.verifier.dest.wire.rename(t.tmp, t.dst)
                else:
                    os.replace(t.tmp, t.dst)
            except (OSError, SFTPProtocolError, EOFError) as exc:
                if classify(exc)[0]:
                    # The reply was lost with the connection: the rename may or may not have
                    # happened. Say so; the next run's size/mtime check settles it.
                    exc = ConnectionError(
                        f"connection lost while renaming into place (the file may be "
                        f"complete; the next run checks): {exc}"
                    )
                self._failed(i, exc, 0.0, t.dst)
                return
            if t.mismatches:
                self.s.verifier.stats.repaired += 1
            self._finish(i, True, 0.0, None)
            return
        mismatch = error is not None and error.startswith("checksum mismatch")
        if mismatch:
            t.mismatches += 1
        t.resumable, t.todo_ranges, t.done = False, None, None  # send the whole file again
        self._failed(i, ChecksumMismatch(error) if mismatch else OSError(errno.EIO, error), 0.0, t.dst)

    def on_block_mismatch(self, i: int, bad: list, error: str) -> None:
        """Runs on a block verifier thread: send only the mismatching blocks again."""
        t = self.tasks[i]
        t.mismatches += 1
        t.repair = bad
        self._failed(i, ChecksumMismatch(error), 0.0, t.dst)

    # -- p > 1: byte ranges of one file over p connections -----------------------
    def _ranged(self, conn, i: int) -> None:
        t = self.tasks[i]
        t.attempts += 1
        p = min(self.params.p, max(1, t.size // RANGE_MIN))
        step = -(-t.size // p)
        todo = (
            t.todo_ranges
            if t.todo_ranges is not None
            else [(lo, min(lo + step, t.size)) for lo in range(0, t.size, step)]
        )
        # Split what is missing into about p pieces so every connection has work.
        pieces: list[tuple[int, int]] = []
        for lo, hi in todo:
            n = max(1, round((hi - lo) / step))
            sub = -(-(hi - lo) // n)
            pieces += [(a, min(a + sub, hi)) for a in range(lo, hi, sub)]
        fresh = t.todo_ranges is None
        if self.blocks is not None and fresh:
            self.blocks.forget(i)
        elif self.blocks is not None:
            self.blocks.missing(i)  # queues blocks known from before for checking
        if not fresh:
            t.resumed = True
            count_progress(t, self.s.stats, t.size - sum(hi - lo for lo, hi in todo))
        else:
            self._restart(t)
        t0 = time.monotonic()
        extra = []
        try:
            for _ in range(min(p, len(pieces)) - 1):
                extra.append(self.s.pool.acquire())
        except BaseException:
            for c in extra:
                self.s.pool.release(c)
            with self.lock:
                self.queue.appendleft(i)
                self.running -= 1
            t.attempts -= 1
            raise
        conns = [conn, *extra]
        jobs: list[Job] = []
        local_fd = None
        error: BaseException | None = None
        lost = False
        try:
            if self.s.direction == "upload":
                if fresh:
                    # Create (and truncate) the temporary file once; ranges open it without TRUNC.
                    t_, r_ = conn.wire.call(
                        w.OPEN, conn.wire.p_open(t.tmp, w.FXF_WRITE | w.FXF_CREAT | w.FXF_TRUNC, Attrs(mode=0o600))
                    )
                    handle = conn.wire.expect_handle(t_, r_, t.tmp)
                    t_, r_ = conn.wire.call(w.CLOSE, conn.wire.p_handle(handle))
                    conn.wire.expect_status(t_, r_, t.tmp)
                jobs = [UploadJob(t, lo, hi, False, self.s.stats, truncate=False) for lo, hi in pieces]
                if self.blocks is not None:
                    from .block_verify import attach_range_job

                    for j in jobs:
                        j.defer_rename = True
                        attach_range_job(self.blocks, i, t, j, self._on_range, self._journal_block)
                elif self.alg:
                    for j in jobs:
                        j.hasher = SourceHasher(self.alg, j.start)
            else:
                local_fd = os.open(t.tmp, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if fresh else 0), 0o600)
                os.ftruncate(local_fd, t.size)
                jobs = [DownloadJob(t, lo, hi, False, self.s.stats, local_fd) for lo, hi in pieces]
            for j in jobs:
                if j.on_range is None:
                    j.on_range = self._on_range
            queue = deque(jobs)
            qlock = threading.Lock()
            errors: list[BaseException] = []

            def next_piece():
                with qlock:
                    return queue.popleft() if queue else None

            def run_one(c):
                try:
                    Pipeline(c.wire, 1, self.s.inflight).run(next_piece, lambda j: None)
                except BaseException as exc:  # noqa: BLE001 - collected, handled below
                    errors.append(exc)

            threads = [threading.Thread(target=run_one, args=(c,), daemon=True) for c in conns]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            lost = bool(errors)
            error = errors[0] if errors else next((j.error for j in jobs if j.error), None)
            if error is None:
                if self.s.direction == "upload":
                    conn.wire.setstat(t.tmp, Attrs(mode=t.mode & 0o7777, mtime=int(t.mtime)))
                    if not self.alg:
                        conn.wire.rename(t.tmp, t.dst)
                else:
                    os.close(local_fd)
                    local_fd = None
                    self._finalize_local(t, rename=not self.alg)
        except (OSError, SFTPProtocolError) as exc:
            error = exc
        finally:
            if local_fd is not None:
                os.close(local_fd)
            for c in extra:
                self.s.pool.release(c, broken=not c.alive)
        t.moved_total += sum(j.acked for j in jobs)
        if error is None:
            if self.blocks is not None:
                self.blocks.transfer_done(i)
                return
            if self.alg:
                if self.s.direction == "upload" and fresh:
                    vpieces = sorted((j.hasher.piece() for j in jobs), key=lambda p: p.offset)
                elif self.s.direction == "upload":
                    vpieces = [Piece(0, t.size, digest_file(self.alg, t.src))]  # resumed: earlier ranges too
                else:
                    vpieces = [Piece(0, t.size, "")]
                self._submit_verify(i, vpieces)
                return
            self._finish(i, True, time.monotonic() - t0, None)
            return
        # Keep what arrived: the next attempt sends only the ranges still missing. The ranges
        # acknowledged, not a count from each range's start: a short read leaves a gap.
        done = [tuple(r) for j in jobs for r in j.ranges]
        if done:
            t.journaled = True
        t.todo_ranges = _subtract(todo if not fresh else [(0, t.size)], done)
        if self.blocks is not None:
            t.todo_ranges = self.blocks.missing(i)  # only whole blocks with a digest count as sent
        if lost:
            error = ConnectionError(f"connection lost: {error}")
        self._failed(i, error, time.monotonic() - t0, t.dst)
        if not conn.alive:
            raise SFTPProtocolError("connection lost during a ranged transfer")

    # -- local -> local ------------------------------------------------------------
    def _local_worker(self, gone: list[bool]) -> None:
        while self._wait_for_work() and not self._retire(gone):
            i = self._pop(big=None)
            if i is None:
                continue
            t = self.tasks[i]
            t.attempts += 1
            t0 = time.monotonic()
            try:
                with open(t.src, "rb") as fin:
                    st = os.fstat(fin.fileno())
                    if st.st_size != t.size or mtime_changed(st.st_mtime, t.mtime):
                        raise SourceChanged(f"source changed since it was listed: {t.src}")
                    hasher = SourceHasher(self.alg, 0) if self.alg else None
                    with open(t.tmp, "wb") as fout:
                        while True:
                            data = fin.read(1 << 20)
                            if not data:
                                break
                            if hasher is not None:
                                hasher.update(hasher.next, data)
                            fout.write(data)
                self._finalize_local(t, rename=not self.alg)
                t.moved_total += t.size
                self.s.stats.add_bytes(t.size)
                if hasher is not None:
                    self._submit_verify(i, [hasher.piece()])
                    continue
                self._finish(i, True, time.monotonic() - t0, None)
            except OSError as exc:
                _unlink_quiet(t.tmp)
                self._failed(i, exc, time.monotonic() - t0, t.dst)


def _sum_bstats(all_stats: list) -> object:
    """Block counts of several verifiers added up (siblings' verifiers under Multi-Chunk)."""
    if len(all_stats) == 1:
        return all_stats[0]
    from dataclasses import fields, replace

    first = all_stats[0]
    return replace(first, **{f.name: sum(getattr(b, f.name) for b in all_stats) for f in fields(first)})


def _subtract(ranges: list[tuple[int, int]], done: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of `ranges` not covered by `done`."""
    out = []
    for lo, hi in ranges:
        cur = lo
        for dlo, dhi in sorted(done):
            if dhi <= cur or dlo >= hi:
                continue
            if dlo > cur:
                out.append((cur, dlo))
            cur = max(cur, dhi)
        if cur < hi:
            out.append((cur, hi))
    return out


def _once(job: Job) -> Callable[[], Job | None]:
    given = [job]
    return lambda: given.pop() if given else None


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
