"""Digests of files where they lie, by the best method the host allows.

Where the digest is computed is reported, never silently downgraded:

  helper     the stdlib helper (remote/checksum_helper.py) over SSH exec
  coreutils  one `sha256sum`-style command per file (no python3 there)
  read-back  the file read back over SFTP (exec not allowed: a second transfer)
  local      the destination is this host: fsync, drop cache, read back

Uploads ask the destination; downloads ask both sides (the source digest is then computed
from the source's disk).
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..integrity.algorithms import COREUTILS_COMMANDS, algorithm_info, digest_file, new_hasher
from ..integrity.remote import (
    BareChecksummer,
    ChecksumHelperClient,
    CoreutilsChecksummer,
    DigestRequest,
    RemoteChecksumError,
)
from .verify_channel import ReadBackError
from .verify_items import Piece, VerifyItem

if TYPE_CHECKING:
    from ..protocols.pool import Conn
    from ..protocols.sftp_wire import SFTPWire
    from ..protocols.ssh import SSHTarget

BATCH = 64  # files verified per round
# Digest requests in flight on the helper's channel: a whole batch, so a round costs one
# round trip, not batch/window of them. With 16, 100,000 small files verified at ~80/s on
# a busy loopback while the transfer itself ran at ~200/s.
HELPER_WINDOW = BATCH
LOCAL_THREADS = 4  # local destination: files fsynced and read back at once
HELLO_TIMEOUT = 10.0  # the helper answers in well under a second where python3 runs
DIGEST_TIMEOUT = 300.0

_T = TypeVar("_T")


class ConnectionPool(Protocol):
    """What digests need of a pool: an SFTPPool, or the session's wrapper of one."""

    @property
    def target(self) -> SSHTarget: ...

    def acquire(self, prefer: Callable[[Conn], bool] | None = None) -> Conn: ...

    def release(self, conn: Conn) -> None: ...


class ExecRefused(Exception):
    """The server opens no exec channels (an SFTP-only account or server)."""


def _exec(chan, command: str) -> None:
    try:
        chan.exec_command(command)
    except Exception as exc:
        raise ExecRefused(
            "the server runs no commands over SSH exec (SFTP only), so neither the "
            f"python3 helper nor coreutils can run there ({exc})"
        ) from exc


def _local_digest(algorithm: str, path: str, offset: int, length: int) -> str:
    """fsync, drop the page cache, read back: the digest of what is on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        with os.fdopen(os.dup(fd), "rb") as f:
            return digest_file(algorithm, f, offset=offset, length=length)
    finally:
        os.close(fd)


def _bare(conn: Conn) -> bool:
    return not conn.companions


class DestinationDigests:
    """Computes destination digests by the best method the destination allows."""

    def __init__(self, algorithm: str, pool: ConnectionPool | None = None) -> None:
        self.algorithm = algorithm
        self.pool = pool  # the destination's connections, None for a local destination
        self.where = "local" if pool is None else ""
        self.exec: str | None = None  # what SSH exec allowed: python3, shell, bare, forced, refused...
        self.reason = ""
        self._conn: Conn | None = None
        self._helper: ChecksumHelperClient | None = None
        self._coreutils: CoreutilsChecksummer | BareChecksummer | None = None
        self._local_threads: ThreadPoolExecutor | None = None  # for local digests, made on first use
        self.start_error: BaseException | None = None  # set where start() runs in the background

    def start(self) -> None:
        if self.pool is None:
            return
        pool = self.pool
        # A connection nothing rides on yet: the upload sinks started ahead are left to the
        # bundle workers, which would otherwise start a sink of their own on the one left over.
        self._conn = pool.acquire(prefer=_bare)
        transport = self._conn.transport

        channels = []

        def open_channel(command: str):
            chan = transport.open_session()
            # A host that forces another command on exec never answers the hello:
            # wait briefly for it, then allow long digests of large files.
            chan.settimeout(HELLO_TIMEOUT)
            _exec(chan, command)
            channels.append(chan)
            out = chan.makefile("rb")
            return (chan.sendall, out.readline, chan.shutdown_write)

        def run(command: str):
            chan = transport.open_session()
            chan.settimeout(DIGEST_TIMEOUT if self.where == "coreutils" else HELLO_TIMEOUT)
            _exec(chan, command)
            chan.shutdown_write()  # the commands read no input; a forced command then sees EOF
            out = chan.makefile("rb").read()
            err = chan.makefile_stderr("rb").read()
            return chan.recv_exit_status(), out, err

        try:
            helper = ChecksumHelperClient(open_channel, where=pool.target.display, window=HELPER_WINDOW)
            helper.start()
            for chan in channels:
                chan.settimeout(DIGEST_TIMEOUT)
            if self.algorithm in helper.algorithms:
                self._helper, self.where, self.exec = helper, "helper", "python3"
                return
            helper_error: object = f"it cannot compute {self.algorithm}"
            helper.close()
        except ExecRefused as exc:
            self.reason = str(exc)  # coreutils would be refused the same way
            self.where, self.exec = "read-back", "refused"
            return
        except Exception as exc:  # noqa: BLE001 - any failure means: try the next method
            helper_error = exc
        self.where = "read-back"
        where = pool.target.display
        try:
            # Where exec is forced to another command (ForceCommand internal-sftp), a probe's exit
            # status says nothing: first check that our own command really ran.
            status, out, _ = run("echo airflow-transfer-exec-ok")
            if status != 0 or out.strip() != b"airflow-transfer-exec-ok":
                self.exec = "forced"
                self.reason = (
                    "the server runs no command of ours over SSH exec (a forced command such as "
                    "ForceCommand internal-sftp answers instead), so the file is read back over SFTP"
                )
                return
            self.reason = f"python3 helper unavailable ({helper_error})"
            checker = CoreutilsChecksummer(run, where=where)
            if checker.probe(self.algorithm):
                self._coreutils, self.where, self.exec = checker, "coreutils", "shell"
                self.reason += f"; {self.algorithm} by a coreutils command per file, through sh"
                return
            bare = BareChecksummer(run, where=where)
            if bare.probe(self.algorithm):
                # rclone's serve sftp: a few checksum commands emulated, no shell.
                self._coreutils, self.where, self.exec = bare, "coreutils", "bare"
                tool = COREUTILS_COMMANDS[algorithm_info(self.algorithm).name]
                self.reason += (
                    f"; no sh there, but the server answers a bare {tool} "
                    "(whole files, no fsync or cache drop possible)"
                )
                return
            self.exec = "no-checksum-command"
            self.reason += f"; neither sh nor a bare command computes {self.algorithm} there"
        except Exception as exc:  # noqa: BLE001 - any failure here falls back to reading the file back
            self.reason = f"python3 helper unavailable ({helper_error}); checksum commands failed: {exc}"
            self._coreutils, self.where = None, "read-back"

    def close(self) -> None:
        if self._local_threads is not None:
            self._local_threads.shutdown(wait=True)
            self._local_threads = None
        if self._helper is not None:
            self._helper.close()
        if self._conn is not None and self.pool is not None:
            self.pool.release(self._conn)
            self._conn = None

    @property
    def wire(self) -> SFTPWire | None:
        return self._conn.wire if self._conn is not None else None

    @property
    def helper(self) -> ChecksumHelperClient:
        """The helper's client, where digests are computed by it (`where` == "helper")."""
        if self._helper is None:
            raise RuntimeError(f"no checksum helper runs for this side (digests: {self.where or 'not started'})")
        return self._helper

    @property
    def checksummer(self) -> CoreutilsChecksummer | BareChecksummer:
        """The per-file checksum command, where digests are computed by one (`where` == "coreutils")."""
        if self._coreutils is None:
            raise RuntimeError(f"no checksum command runs for this side (digests: {self.where or 'not started'})")
        return self._coreutils

    def digests(self, items: list[VerifyItem]) -> list[list[str] | BaseException]:
        """Per item: the destination digest of each piece (or the whole file), or an error."""
        if self.where == "local":

            def one(it: VerifyItem) -> list[str] | BaseException:
                return self._each(
                    lambda it: [_local_digest(self.algorithm, it.tmp, p.offset, p.length) for p in it.pieces], it
                )

            if len(items) < 2:
                return [one(it) for it in items]
            # Each file's fsync waits for a journal commit; from several threads at once the
            # file system commits them together (one by one, 100,000 downloaded 1 KiB files
            # were verified at a fraction of the rate they arrived).
            if self._local_threads is None:
                self._local_threads = ThreadPoolExecutor(LOCAL_THREADS, thread_name_prefix="verify-local")
            return list(self._local_threads.map(one, items))
        if self.where == "helper":
            reqs, owners = [], []
            for k, it in enumerate(items):
                for p in it.pieces:
                    reqs.append(DigestRequest(it.tmp, self.algorithm, p.offset, p.length))
                    owners.append(k)
            results = self.helper.digest_many(reqs)
            out: list[list[str] | BaseException] = [[] for _ in items]
            for k, res in zip(owners, results):
                done = out[k]
                if isinstance(done, BaseException):
                    continue
                out[k] = res if isinstance(res, BaseException) else done + [res.digest]
            return out
        if self.where == "coreutils":
            return [self._each(lambda it: [self.checksummer.digest(it.tmp, self.algorithm).digest], it) for it in items]
        return [self._each(self._read_back, it) for it in items]

    @staticmethod
    def _each(fn: Callable[[VerifyItem], _T], item: VerifyItem) -> _T | OSError | RemoteChecksumError:
        try:
            return fn(item)
        except (OSError, RemoteChecksumError) as exc:
            return exc

    def _read_back(self, item: VerifyItem) -> list[str]:
        try:
            return self._read_back_once(item)
        except (OSError, EOFError) as exc:
            conn = self._conn
            if isinstance(exc, (ConnectionError, socket.timeout, TimeoutError)) or conn is None or not conn.alive:
                raise
            # The server answered with an error and the connection is up: this file cannot be read
            # back (some servers fail reads of a file another session writes). Reconnecting would
            # fail the same way, so it is this file's error.
            raise ReadBackError(errno.EIO, f"reading it back over SFTP failed: {exc}", item.tmp) from exc

    def _read_back_once(self, item: VerifyItem) -> list[str]:
        # heavy: paramiko costs 0.1 s at import, and only a read-back (no exec there) needs its SFTPClient
        from ..protocols.paramiko_lib import paramiko

        conn, pool = self._conn, self.pool
        if conn is None or pool is None:
            raise ConnectionError(f"{item.tmp}: no connection to read it back over (start() was not called)")
        sftp = paramiko.SFTPClient.from_transport(conn.transport)
        # paramiko waits forever by default: a stalled server must fail like the data channel does.
        sftp.get_channel().settimeout(pool.target.idle_timeout)
        try:
            out = []
            with sftp.open(item.tmp, "rb") as f:
                for p in item.pieces:
                    f.seek(p.offset)
                    h, left = new_hasher(self.algorithm), p.length
                    while left:
                        data = f.read(min(left, 1 << 20))
                        if not data:
                            raise OSError(errno.EIO, f"file is shorter than its listed size: {item.tmp}")
                        h.update(data)
                        left -= len(data)
                    out.append(h.hexdigest())
            return out
        finally:
            sftp.close()

    def pieces_for_method(self, item: VerifyItem) -> list[Piece]:
        """coreutils digests whole files only: compare one whole-file digest there."""
        if self.where == "coreutils" and (len(item.pieces) != 1 or item.pieces[0].offset != 0):
            if item.whole_source is None:
                raise RuntimeError(f"{item.tmp}: a whole-file digest is needed here, and no source digest of it")
            total = sum(p.length for p in item.pieces)
            return [Piece(0, total, item.whole_source())]
        return item.pieces
