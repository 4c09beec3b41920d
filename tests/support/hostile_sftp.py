"""A deliberately hostile or buggy SFTP server for tests (paramiko's server interface).

OpenSSH cannot be made to lie, so this one serves a real directory (`root`, shown
to clients as "/") and misbehaves as its `Behaviour` says: listings with names
that escape, absolute names, names with '/' or control characters, symlinks
reported as directories (loops), sizes that lie, reads that come back short or
long (or of random length), writes that must be sequential (rclone without a VFS
cache), reads that fail while the connection stays up, connections dropped mid-file,
and requests that are never answered. It offers the sftp subsystem only:
exec is refused, so the engine must list, verify and read back over SFTP.

Every path a client asks for is recorded in `requests`, so a test can assert
that a hostile name was never followed.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
import random
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko import SFTPAttributes, SFTPHandle, SFTPServer, SFTPServerInterface
from paramiko.sftp import SFTP_FAILURE, SFTP_NO_SUCH_FILE, SFTP_OK, SFTP_PERMISSION_DENIED


@dataclass
class Behaviour:
    """What the server does wrong. Paths are server paths ("/data/a.bin")."""

    # directory -> names added to its listing as regular files (never created on disk)
    extra_names: dict[str, list[str]] = field(default_factory=dict)
    fake_size: int = 6
    # report what a symlink points to in listings and lstat (a buggy server): a link
    # to "." then looks like an endless chain of directories
    follow_links: bool = False
    # path -> size that stat, lstat, fstat and listings report instead of the real one
    size_lies: dict[str, int] = field(default_factory=dict)
    read_extra: int = 0  # a read reply carries this many bytes more than asked for
    short_read: int = 0  # a read reply carries at most this many bytes
    # a read reply carries a random length between short_read_min and the length asked for
    # (rclone answers a 255 KiB READ with 32 KiB). The seed, not a shared generator, decides
    # each length from the request itself, so a test replays the same lengths however the
    # connections' requests interleave. None: off.
    short_read_seed: int | None = None
    short_read_min: int = 1024
    # A WRITE must land at its handle's write position (bytes written through it so far, from
    # 0): rclone serving a remote without --vfs-cache-mode streams each write handle as one
    # upload (vfs/write.go). Elsewhere it fails with SSH_FX_FAILURE "Illegal seek"; a file
    # that existed when it was opened without TRUNC cannot be written at all (rclone refuses
    # to replace it: SSH_FX_FAILURE "permission denied", since pkg/sftp maps only errnos).
    refuse_offset_writes: bool = False
    # reads of paths matching one of these globs ("*.atpart") fail with SSH_FX_FAILURE (EIO
    # at the client); open and stat work and the connection stays healthy
    fail_reads: list[str] = field(default_factory=list)
    stall_ops: set[str] = field(default_factory=set)  # "open", "read", "stat", "list", "write", "close"
    stall_after_reads: int | None = None  # reads after this many answered ones are never answered
    stall_after_writes: int | None = None  # writes after this many answered ones are never answered
    # after this many answered reads the connection of the next read is closed, once: a link
    # that drops mid-file while other reads are in flight; later connections are served
    drop_after_reads: int | None = None
    # after this many answered reads, the next reply is cut off in the middle of its packet
    partial_after_reads: int | None = None
    read_only: bool = False
    # a directory of this name appears in every listing and holds only itself, without end
    # (and realpath cannot tell the levels apart: only a depth limit stops a client)
    endless_dir: str = ""


def _norm(path: str) -> str:
    return posixpath.normpath("/" + path.lstrip("/"))


def _real_size(attr: SFTPAttributes, lie: int | None) -> SFTPAttributes:
    if lie is not None:
        attr.st_size = lie
    return attr


class _Status(int):
    """An SFTP status code with its own message (paramiko sends only the code's stock text)."""

    def __new__(cls, code: int, desc: str) -> _Status:
        obj = super().__new__(cls, code)
        obj.desc = desc
        return obj


def attr_endless(name: str) -> SFTPAttributes:
    attr = SFTPAttributes()
    attr.filename, attr.st_mode, attr.st_size, attr.st_mtime = name, 0o040755, 4096, 1_700_000_000
    return attr


class _Handle(SFTPHandle):
    def __init__(
        self, server: HostileSFTPServer, spath: str, fd: int, flags: int, channel, existed: bool = False
    ) -> None:
        super().__init__(flags)
        self.srv, self.spath, self.fd, self.channel = server, spath, fd, channel
        # refuse_offset_writes: the next offset this handle accepts, and whether it may write at
        # all (rclone truncates what it writes to, so an existing file needs TRUNC)
        self.wpos = 0
        self.may_replace = bool(flags & os.O_TRUNC) or not existed
        self.read_failed = False

    def read(self, offset, length):
        self.srv.stall("read")
        with self.srv.lock:
            self.srv.reads += 1
            n = self.srv.reads
        if self.srv.b.stall_after_reads is not None and n > self.srv.b.stall_after_reads:
            self.srv.block_forever()
        if self.srv.b.drop_after_reads is not None and n == self.srv.b.drop_after_reads + 1:
            self.channel.get_transport().close()  # replies already sent stay delivered
            raise EOFError("connection dropped")
        if self.srv.b.partial_after_reads is not None and n > self.srv.b.partial_after_reads:
            # A DATA reply's length, type and a few bytes of its body, then nothing more.
            self.channel.sendall(struct.pack(">IB", 1 + 4 + 4 + length, 103) + b"\0\0")
            self.srv.block_forever()
        if any(fnmatch.fnmatchcase(self.spath, g) for g in self.srv.b.fail_reads):
            with self.srv.lock:
                self.srv.failed_reads += 1
            if not self.read_failed:  # once per handle: how often the client tried that file again
                self.read_failed = True
                self.srv.record("read-failed", self.spath)
            return SFTP_FAILURE  # what OpenSSH sends for EIO; the session goes on
        if self.srv.b.short_read:
            length = min(length, self.srv.b.short_read)
        if self.srv.b.short_read_seed is not None and length > 1:
            rng = random.Random(f"{self.srv.b.short_read_seed}:{self.spath}:{offset}:{length}")
            length = rng.randint(min(max(1, self.srv.b.short_read_min), length), length)
        data = os.pread(self.fd, length, offset)
        if data and self.srv.b.read_extra:
            data += b"\0" * self.srv.b.read_extra
        return data

    def write(self, offset, data):
        self.srv.stall("write")
        with self.srv.lock:
            self.srv.writes += 1
            n = self.srv.writes
        if self.srv.b.stall_after_writes is not None and n > self.srv.b.stall_after_writes:
            self.srv.block_forever()
        if self.srv.b.refuse_offset_writes:
            # rclone checks the offset first (after waiting --vfs-write-wait for writes that
            # arrive out of order; a paramiko channel answers in order, so no wait here).
            if offset != self.wpos:
                return self.srv.refused(_Status(SFTP_FAILURE, "Illegal seek"))
            if not self.may_replace:
                return self.srv.refused(_Status(SFTP_FAILURE, "permission denied"))
            self.wpos += len(data)
        os.pwrite(self.fd, data, offset)
        return SFTP_OK

    def stat(self):
        self.srv.stall("stat")
        return _real_size(SFTPAttributes.from_stat(os.fstat(self.fd)), self.srv.b.size_lies.get(self.spath))

    def chattr(self, attr):
        return SFTP_OK

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Interface(SFTPServerInterface):
    def __init__(self, server, hostile: HostileSFTPServer, *args, **kwargs) -> None:
        super().__init__(server, *args, **kwargs)
        self.h = hostile
        self.channel = None  # set by _Subsystem: raw writes for replies cut off mid-packet

    # -- paths ------------------------------------------------------------
    def _real(self, spath: str) -> str:
        """The file under root for a client path; never outside root, whatever the client sends."""
        norm = _norm(spath)
        return os.path.join(str(self.h.root), norm.lstrip("/"))

    def _attrs(self, real: str, spath: str, follow: bool) -> SFTPAttributes:
        st = os.stat(real) if follow or self.h.b.follow_links else os.lstat(real)
        return _real_size(SFTPAttributes.from_stat(st), self.h.b.size_lies.get(_norm(spath)))

    @staticmethod
    def _err(exc: OSError) -> int:
        if exc.errno == errno.EACCES:
            return SFTP_PERMISSION_DENIED
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return SFTP_NO_SUCH_FILE
        return SFTP_FAILURE

    # -- requests ---------------------------------------------------------
    def canonicalize(self, path):
        # Honest, like OpenSSH's realpath(3): links resolved (it is the listing that lies).
        root = os.path.realpath(self.h.root)
        real = os.path.realpath(self._real(path))
        if real == root or real.startswith(root + os.sep):
            return "/" + os.path.relpath(real, root).replace(os.sep, "/").lstrip(".")
        return _norm(path)

    def list_folder(self, path):
        self.h.record("list", path)
        self.h.stall("list")
        real = self._real(path)
        endless = self.h.b.endless_dir
        if endless:
            if endless in _norm(path).split("/"):
                return [attr_endless(endless)]
        try:
            names = os.listdir(real)
        except OSError as exc:
            return self._err(exc)
        out = []
        for name in names:
            try:
                attr = self._attrs(os.path.join(real, name), posixpath.join(path, name), follow=False)
            except OSError:
                continue
            attr.filename = name
            out.append(attr)
        for name in self.h.b.extra_names.get(_norm(path), []):
            attr = SFTPAttributes()
            attr.filename = name
            attr.st_size, attr.st_mode = self.h.b.fake_size, 0o100644
            attr.st_mtime = attr.st_atime = 1_700_000_000
            out.append(attr)
        if endless:
            out.append(attr_endless(endless))
        return out

    def stat(self, path):
        self.h.record("stat", path)
        self.h.stall("stat")
        try:
            return self._attrs(self._real(path), path, follow=True)
        except OSError as exc:
            return self._err(exc)

    def lstat(self, path):
        self.h.record("lstat", path)
        self.h.stall("stat")
        try:
            return self._attrs(self._real(path), path, follow=False)
        except OSError as exc:
            return self._err(exc)

    def open(self, path, flags, attr):
        self.h.record("open", path)
        self.h.stall("open")
        if self.h.b.read_only and flags & (os.O_WRONLY | os.O_RDWR):
            return SFTP_PERMISSION_DENIED
        existed = os.path.lexists(self._real(path))
        try:
            fd = os.open(self._real(path), flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            return self._err(exc)
        return _Handle(self.h, _norm(path), fd, flags, self.channel, existed)

    def remove(self, path):
        self.h.record("remove", path)
        try:
            os.remove(self._real(path))
        except OSError as exc:
            return self._err(exc)
        return SFTP_OK

    def rename(self, oldpath, newpath):
        self.h.record("rename", newpath)
        try:
            os.replace(self._real(oldpath), self._real(newpath))
        except OSError as exc:
            return self._err(exc)
        return SFTP_OK

    posix_rename = rename

    def mkdir(self, path, attr):
        self.h.record("mkdir", path)
        try:
            os.mkdir(self._real(path), 0o755)
        except OSError as exc:
            return self._err(exc)
        return SFTP_OK

    def rmdir(self, path):
        try:
            os.rmdir(self._real(path))
        except OSError as exc:
            return self._err(exc)
        return SFTP_OK

    def chattr(self, path, attr):
        self.h.record("setstat", path)
        try:
            if attr.st_mode is not None:
                os.chmod(self._real(path), attr.st_mode & 0o7777)
            if attr.st_mtime is not None:
                os.utime(self._real(path), (attr.st_atime or attr.st_mtime, attr.st_mtime))
        except OSError as exc:
            return self._err(exc)
        return SFTP_OK

    def readlink(self, path):
        try:
            return os.readlink(self._real(path))
        except OSError as exc:
            return self._err(exc)


class _Subsystem(SFTPServer):
    def __init__(self, channel, name, server, sftp_si, *args, **kwargs) -> None:
        super().__init__(channel, name, server, sftp_si, *args, **kwargs)
        self.server.channel = channel

    def _send_status(self, request_number, code, desc=None):
        super()._send_status(request_number, int(code), getattr(code, "desc", desc))


class _Auth(paramiko.ServerInterface):
    def __init__(self, client_key: paramiko.PKey) -> None:
        self.client_key = client_key

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL if key == self.client_key else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        return False  # sftp only: no helper, no coreutils, no remote lister

    def check_channel_shell_request(self, channel):
        return False


class HostileSFTPServer:
    """Serves `root` on 127.0.0.1 (a free port) from a thread; `stop()` ends every session."""

    def __init__(self, base: Path, root: Path, behaviour: Behaviour | None = None) -> None:
        self.base, self.root = Path(base), Path(root)
        self.b = behaviour or Behaviour()
        self.lock = threading.Lock()
        self.reads = 0
        self.writes = 0
        self.connections = 0  # accepted so far: a client that reconnects shows here
        self.failed_reads = 0  # reads refused by fail_reads
        self.refused_writes: list[str] = []  # refuse_offset_writes: the message of each refusal
        self.requests: list[tuple[str, str]] = []
        self._stopping = threading.Event()
        self._transports: list[paramiko.Transport] = []
        self.base.mkdir(parents=True, exist_ok=True)
        self.host_key_file = self.base / "hostile_host_key"
        self.client_key_file = self.base / "id_hostile"
        for path in (self.host_key_file, self.client_key_file):
            if not path.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        self.host_key = paramiko.Ed25519Key.from_private_key_file(str(self.host_key_file))
        self.client_key = paramiko.Ed25519Key.from_private_key_file(str(self.client_key_file))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.sock.settimeout(0.2)  # accept() wakes up to notice stop()
        self.port = self.sock.getsockname()[1]
        self.known_hosts = self.base / "known_hosts"
        self.known_hosts.write_text(
            f"[127.0.0.1]:{self.port} {self.host_key.get_name()} {self.host_key.get_base64()}\n"
        )
        self._thread = threading.Thread(target=self._serve, name="hostile-sftp", daemon=True)

    # -- behaviour helpers -------------------------------------------------
    def record(self, op: str, path: str) -> None:
        with self.lock:
            self.requests.append((op, path))

    def block_forever(self) -> None:
        """Never answer: the session's thread waits here until the server stops."""
        self._stopping.wait()
        raise EOFError("server stopped")

    def refused(self, status: _Status) -> _Status:
        with self.lock:
            self.refused_writes.append(status.desc)
        return status

    def stall(self, op: str) -> None:
        if op in self.b.stall_ops:
            self.block_forever()

    def asked_for(self, needle: str) -> list[tuple[str, str]]:
        with self.lock:
            return [r for r in self.requests if needle in r[1]]

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> HostileSFTPServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms delayed-ACK stalls
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            t.set_subsystem_handler("sftp", _Subsystem, _Interface, self)
            with self.lock:
                self._transports.append(t)
                self.connections += 1
            try:
                t.start_server(server=_Auth(self.client_key))
            except (paramiko.SSHException, EOFError, OSError):
                t.close()

    def stop(self) -> None:
        self._stopping.set()
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            transports, self._transports = self._transports, []
        for t in transports:
            t.close()
        self._thread.join(timeout=5)

    def url(self, path: str) -> str:
        return f"sftp://tester@127.0.0.1:{self.port}{path}"

    def cli_args(self) -> list[str]:
        return ["--identity", str(self.client_key_file), "--known-hosts", str(self.known_hosts)]

    def __enter__(self) -> HostileSFTPServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
