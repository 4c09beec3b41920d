"""The pipelined engine's session: local <-> SFTP with pooled connections (docs/transfers.md).

A chunk's files go through the one runner (engine/runner.py); on SFTP the
mover beneath it keeps pp files in flight per connection and splits big
files over p connections (engine/sftp_mover.py). Connections come from a pool
that outlives the chunk, so the next chunk reuses them.

Every file is written under a temporary name next to its final one and renamed
only when complete; a file whose destination already has the same size and
mtime is skipped, which is how a re-run after a crash finishes the job.
"""

from __future__ import annotations

import os
import posixpath
from typing import Unpack

from ..errors import TransferError, UsageError, describe_oserror
from ..manifest import Manifest, list_remote
from ..paths import check_relative
from ..protocols.endpoint import Endpoint
from ..protocols.pool import WARM_CONNECTIONS, SFTPPool
from .block_verify import DEFAULT_BLOCK_SIZE, BlockVerifier, choose_threads
from .bundle import BUNDLE_MAX_FILE, BundleMover, BundleState
from .bundle_channel import SINK_PYTHON
from .failures import error_text
from .listing_ahead import take_walk
from .local_mover import LocalMover
from .remote_tree import MkdirFailed, make_dirs, missing_parents, same_size_and_mtime, verify_account
from .runner import Mover, Runner
from .session import Session, SessionOptions
from .sftp_jobs import FileTask
from .sftp_mover import SFTPMover
from .verify import DestinationDigests, Verifier

DEFAULT_INFLIGHT = 8 * 1024 * 1024  # bytes outstanding per connection (bounded memory)


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
            self._session.control.event(False, "connect", error_text(exc, self._session.pool.target.display, ""))
            raise

    def __getattr__(self, name):
        return getattr(self._session.pool, name)


class TransferSession(Session):
    """Source and destination endpoints with pooled connections, reused across chunks."""

    def __init__(
        self,
        src: Endpoint,
        dst: Endpoint,
        *,
        inflight: int = DEFAULT_INFLIGHT,
        verify_mode: str = "file",
        block_size: int | None = None,
        verify_threads: int | None = None,
        pool: SFTPPool | None = None,
        bundle: bool = True,
        **opts: Unpack[SessionOptions],
    ) -> None:
        """`pool`: connections to the remote end opened (or warming) before the session
        existed; the CLI starts them ahead of its heavy imports. The session owns it from here."""
        if src.scheme == "sftp" and dst.scheme == "sftp":
            raise UsageError(
                "sftp to sftp copies are not supported yet",
                f"{src.display} -> {dst.display}",
                "copy to a local staging directory first",
            )
        super().__init__(src, dst, **opts)
        self.inflight = inflight
        self.verify_mode, self.verify_why = verify_mode, ""
        self.block_size, self.verify_threads = block_size, verify_threads
        remote = src if src.scheme == "sftp" else dst if dst.scheme == "sftp" else None
        self.remote = remote
        if pool is not None and (remote is None or pool.target is not remote.target):
            pool.close()  # opened for another endpoint: of no use here
            pool = None
        if pool is None and remote is not None:
            assert remote.target is not None  # an sftp endpoint always names its SSH target
            pool = SFTPPool(remote.target)
        self.pool: SFTPPool | None = pool
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
        self.bundle = BundleState(bundle)  # small files in bundles over SSH exec (engine/bundle.py)
        self.block_t = self.block_c = 0.0  # block mode: per-block transfer and checksum times balanced
        self._dirs_made: set[str] = set()
        self._fresh_dirs: set[str] = set()  # created here, not yet claimed (claim_fresh_dirs)
        self._parent: TransferSession | None = None  # set on a sibling()
        self._retired: list[Verifier] = []  # stopped verifiers of siblings, for verify_summary

    def sibling(self) -> TransferSession:
        """A session over the same endpoints, connection pool, stats and journal with a verifier
        of its own: a chunk running alongside others (Multi-Chunk) needs one, since a verifier
        calls back into one chunk's runner. Closing it keeps the pool and hands its verifier's
        counts to this session's verify_summary."""
        s = TransferSession(
            self.src,
            self.dst,
            inflight=self.inflight,
            verify_mode=self.verify_mode,
            block_size=self.block_size,
            verify_threads=self.verify_threads,
            **self.options(),
        )
        s.pool, s._dirs_made, s._parent, s.bundle = self.pool, self._dirs_made, self, self.bundle
        s._fresh_dirs = self._fresh_dirs
        s.bandwidth_bps, s.resume_blocks, s.before_verify = self.bandwidth_bps, self.resume_blocks, self.before_verify
        return s

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
        alg = self.verify
        if alg is None or self.verifier is not None:
            return self.verifier
        if self.verify_mode == "block":
            block = self.block_size or DEFAULT_BLOCK_SIZE
            threads, self.block_t, self.block_c = choose_threads(alg, block, self.bandwidth_bps)
            reported = _ReportedPool(self)
            self.verifier = BlockVerifier(
                lambda: DestinationDigests(alg, reported),
                alg,
                block,
                self.verify_threads or threads,
                time_left=self.time_left,
                before=lambda item: self.before_verify and self.before_verify(item.tmp),
                max_threads=self.verify_threads or max(1, min(4, os.cpu_count() or 1)),
            )
            self.verifier.start()
            return self.verifier
        pool = _ReportedPool(self) if self.pool is not None else None
        src: DestinationDigests | None = None
        if self.direction == "download":
            dest, src = DestinationDigests(alg, None), DestinationDigests(alg, pool)
        else:
            dest = DestinationDigests(alg, pool if self.direction == "upload" else None)
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
        return verify_account(self, [x for x in (self.verifier, *self._retired) if x is not None])

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
        elif caps.exec_method is None and self.bundle.verified:
            caps.exec_method = SINK_PYTHON  # the bundle helper computed the digests
        return caps.summary(), caps.notes()

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
                    if not os.path.isdir(d):
                        self._fresh_dirs.add(posixpath.normpath(d))
                    os.makedirs(d, exist_ok=True)
                except OSError as exc:
                    raise TransferError(
                        f"cannot create destination directory: {describe_oserror(exc)}",
                        f"localhost:{d}",
                        "check the destination path and its permissions",
                    ) from exc
            self._dirs_made.update(todo)
            return
        # As mkdir -p, like a local destination: missing parents of the root are looked for only
        # once making it failed, not before (a STAT's round trip on every copy). Only a refused
        # MKDIR leads there: a connection's error (a host key, a login) is raised as it is. The
        # root's own STAT rides with its MKDIR: it is usually there already.
        parents: list[str] = []
        try:
            created = make_dirs(self._pool(), todo, self.dst.host_label, stat_first=todo[0] == dst_root)
        except MkdirFailed:
            parents = missing_parents(self._pool(), dst_root) if dst_root not in self._dirs_made else []
            if not parents:
                raise
        if parents:
            created = make_dirs(self._pool(), parents + todo, self.dst.host_label)
        self._dirs_made.update(todo)
        self._fresh_dirs.update(posixpath.normpath(d) for d in created)

    def claim_fresh_dirs(self) -> set[str]:
        # Why: a copy into a new tree used to send one LSTAT per file (100,000 of them for as
        # many files) only to learn that nothing was there.
        fresh = set(self._fresh_dirs)
        self._fresh_dirs.difference_update(fresh)
        return fresh

    def already_there(self, tasks: list[FileTask]) -> set[int]:
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
        return same_size_and_mtime(self._pool(), tasks)

    # -- the primitive ---------------------------------------------------------
    def attach(self, runner: Runner, resume: dict[str, list] | None) -> None:
        if self._ensure_verifier() is None:
            return
        self.verifier.on_verdict = runner.verify.on_verdict
        self.verifier.deliver = runner.verify.on_verdicts
        if getattr(self.verifier, "block_mode", False):
            mover = runner.mover
            assert isinstance(mover, SFTPMover)  # block mode verifies uploads only
            runner.verify.attach_blocks(self.verifier, resume, mover.is_big)
        elif self.verify_mode == "sequential":
            self.verifier.gate.clear()  # this chunk's checksums wait for all its transfers

    def bundle_max_file(self) -> int:
        # A fault-injection hook (before_verify) runs between a file's write and its check: only
        # the SFTP path has that moment; the bundle sink writes, checks and renames in one step.
        # A server found later to refuse the helper turns bundles off (BundleState): then 0.
        if self.direction == "local" or self.bundle.off or self.before_verify is not None:
            return 0
        return BUNDLE_MAX_FILE

    def mover(self, runner: Runner) -> Mover:
        if self.direction == "local":
            return LocalMover(runner)
        small = any(t.size <= BUNDLE_MAX_FILE for t in runner.tasks)
        if small and self.bundle_max_file():
            return BundleMover(self, runner)
        return SFTPMover(self, runner, self.bundle.off if small else "")

    def _pool(self) -> SFTPPool:
        assert self.pool is not None  # the SFTP directions have one from the start
        return self.pool

    def list_source(self) -> Manifest:
        if self.src.scheme == "sftp":
            return list_remote(self._pool(), self.src.path, self.src.display)
        return super().list_source()

    def walked_ahead(self) -> list[list] | None:
        walk = take_walk(self.pool, self.src.path) if self.pool is not None else None
        if walk is None:
            return None
        try:
            return walk.records()
        except Exception:  # noqa: BLE001 - the walk met something: walked again, it is met and reported
            return None

    def drive_engine(self) -> TransferSession:
        return self
