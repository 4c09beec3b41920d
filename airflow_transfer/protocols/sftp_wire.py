"""A pipelining SFTP v3 client over one SSH channel.

paramiko's SFTPClient waits for each open/close/rename before the next, so a
file costs several round trips no matter how many are in flight elsewhere.
Here every request is asynchronous: it is sent at once and its reply is handed
to a callback when it arrives. The engine keeps `pp` files' operations
outstanding on one connection this way (Yildirim, Arslan, Kim, Kosar,
Application-Level Optimization of Big Data Transfers Through Pipelining,
Parallelism and Concurrency, IEEE TCC 2016, section 2: pipelining hides the
per-file control round trips).

One thread drives one SFTPWire: it calls `send_*` and `pump()`. Replies are
matched by request id, so they may arrive in any order.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .capabilities import ServerCapabilities

# Packet types (draft-ietf-secsh-filexfer-02, the version OpenSSH speaks).
INIT, VERSION, OPEN, CLOSE, READ, WRITE, LSTAT, FSTAT = 1, 2, 3, 4, 5, 6, 7, 8
SETSTAT, FSETSTAT, OPENDIR, READDIR, REMOVE, MKDIR, RMDIR = 9, 10, 11, 12, 13, 14, 15
REALPATH, STAT, RENAME, READLINK, SYMLINK = 16, 17, 18, 19, 20
STATUS, HANDLE, DATA, NAME, ATTRS = 101, 102, 103, 104, 105
EXTENDED, EXTENDED_REPLY = 200, 201

FXF_READ, FXF_WRITE, FXF_APPEND, FXF_CREAT, FXF_TRUNC, FXF_EXCL = 1, 2, 4, 8, 16, 32
ATTR_SIZE, ATTR_UIDGID, ATTR_PERMISSIONS, ATTR_ACMODTIME = 1, 2, 4, 8
ATTR_EXTENDED = 0x80000000

FX_OK, FX_EOF, FX_NO_SUCH_FILE, FX_PERMISSION_DENIED, FX_FAILURE = 0, 1, 2, 3, 4
FX_BAD_MESSAGE, FX_NO_CONNECTION, FX_CONNECTION_LOST, FX_OP_UNSUPPORTED = 5, 6, 7, 8

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HDR = struct.Struct(">IBI")  # length, type, request id

# OpenSSH accepts packets up to 256 KiB; its limits@openssh.com reply says so
# exactly. These are used when the server does not advertise limits.
DEFAULT_MAX_READ = 255 * 1024
DEFAULT_MAX_WRITE = 255 * 1024


class SFTPProtocolError(ConnectionError):
    """The server sent something this client cannot parse, or hung up."""


class SFTPStallError(SFTPProtocolError):
    """The server left a request unanswered for longer than the channel's timeout."""


def _s(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _path(path: str) -> bytes:
    return _s(path.encode("utf-8", "surrogateescape"))


@dataclass
class Attrs:
    size: int | None = None
    uid: int | None = None
    gid: int | None = None
    mode: int | None = None
    atime: int | None = None
    mtime: int | None = None

    def pack(self) -> bytes:
        flags, out = 0, b""
        if self.size is not None:
            flags |= ATTR_SIZE
            out += _U64.pack(self.size)
        if self.mode is not None:
            flags |= ATTR_PERMISSIONS
            out += _U32.pack(self.mode)
        if self.mtime is not None:
            flags |= ATTR_ACMODTIME
            out += _U32.pack(int(self.atime if self.atime is not None else self.mtime)) + _U32.pack(int(self.mtime))
        return _U32.pack(flags) + out

    @property
    def is_dir(self) -> bool:
        return self.mode is not None and (self.mode & 0o170000) == 0o040000

    @property
    def is_reg(self) -> bool:
        return self.mode is not None and (self.mode & 0o170000) == 0o100000

    @property
    def is_link(self) -> bool:
        return self.mode is not None and (self.mode & 0o170000) == 0o120000


class Reader:
    """Cursor over one reply body (what a request's callback gets)."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def u32(self) -> int:
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self) -> int:
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def bytes_(self) -> memoryview:
        n = self.u32()
        v = self.buf[self.pos : self.pos + n]
        if len(v) != n:
            raise SFTPProtocolError("truncated SFTP reply")
        self.pos += n
        return v

    def str_(self) -> str:
        return bytes(self.bytes_()).decode("utf-8", "surrogateescape")

    def status_message(self) -> str:
        """A STATUS reply's message: optional in SFTP v3, so servers may end the packet before it."""
        return self.str_() if self.pos < len(self.buf) else ""

    def attrs(self) -> Attrs:
        flags = self.u32()
        a = Attrs()
        if flags & ATTR_SIZE:
            a.size = self.u64()
        if flags & ATTR_UIDGID:
            a.uid, a.gid = self.u32(), self.u32()
        if flags & ATTR_PERMISSIONS:
            a.mode = self.u32()
        if flags & ATTR_ACMODTIME:
            a.atime, a.mtime = self.u32(), self.u32()
        if flags & ATTR_EXTENDED:
            for _ in range(self.u32()):
                self.bytes_()
                self.bytes_()
        return a


_STATUS_ERRNO = {
    FX_NO_SUCH_FILE: errno.ENOENT,
    FX_PERMISSION_DENIED: errno.EACCES,
    FX_FAILURE: errno.EIO,
    FX_BAD_MESSAGE: errno.EBADMSG,
    FX_NO_CONNECTION: errno.ENOTCONN,
    FX_CONNECTION_LOST: errno.ECONNRESET,
    FX_OP_UNSUPPORTED: errno.EOPNOTSUPP,
}


def status_error(code: int, message: str, path: str = "") -> OSError:
    """Map an SFTP status to Python's own exception classes."""
    err = _STATUS_ERRNO.get(code, errno.EIO)
    text = message or f"SFTP status {code}"
    # OpenSSH reports ENOSPC/EDQUOT as a generic failure; its text still says so.
    low = text.lower()
    if code == FX_FAILURE and ("no space" in low or "quota" in low):
        err = errno.ENOSPC if "no space" in low else errno.EDQUOT
    exc = OSError(err, text, path) if path else OSError(err, text)
    return exc  # OSError(errno.ENOENT, ...) is a FileNotFoundError instance


Callback = Callable[[int, Reader], None]


class SFTPWire:
    """Asynchronous SFTP requests over one paramiko channel."""

    def __init__(self, channel, recv_size: int = 1 << 20) -> None:
        self.chan = channel
        self._recv_size = recv_size
        self._buf = bytearray()
        self._next_id = 1
        self._pending: dict[int, Callback] = {}
        self.extensions: dict[str, str] = {}
        self._max_read = DEFAULT_MAX_READ
        self._max_write = DEFAULT_MAX_WRITE
        self._limits_due = False  # the server's limits were asked for and have not come yet
        self.closed = False
        self.caps: ServerCapabilities | None = None  # what is known of the server, shared by a pool's connections
        self._handshake()

    # -- framing ----------------------------------------------------------
    def _handshake(self) -> None:
        self.chan.sendall(_U32.pack(5) + bytes([INIT]) + _U32.pack(3))
        ptype, body = self._read_packet()
        if ptype != VERSION:
            raise SFTPProtocolError(f"expected SFTP VERSION, got packet type {ptype}")
        r = Reader(body)
        version = r.u32()
        if version < 3:
            raise SFTPProtocolError(f"server speaks SFTP version {version}, need 3")
        while r.pos < len(body):
            name, data = r.str_(), r.str_()
            self.extensions[name] = data
        if "limits@openssh.com" in self.extensions:
            # Asked for, not waited for: the connection is ready one round trip sooner (50 ms on
            # a 50 ms link, for every connection opened). max_read / max_write wait for the answer
            # the first time they are read, by which time it has usually come.
            self._limits_due = True
            self.send(EXTENDED, _s(b"limits@openssh.com"), self._take_limits)

    def _take_limits(self, ptype: int, r: Reader) -> None:
        self._limits_due = False
        if ptype != EXTENDED_REPLY:
            return  # refused after all: the defaults stand
        _max_packet, max_read, max_write = r.u64(), r.u64(), r.u64()
        if max_read:
            self._max_read = min(int(max_read), 1 << 20)
        if max_write:
            self._max_write = min(int(max_write), 1 << 20)

    def _await_limits(self) -> None:
        while self._limits_due and not self.closed:
            self.pump(block=True)

    @property
    def max_read(self) -> int:
        """The largest READ this server answers in full (its limits, else 255 KiB)."""
        self._await_limits()
        return self._max_read

    @property
    def max_write(self) -> int:
        """The largest WRITE this server accepts (its limits, else 255 KiB)."""
        self._await_limits()
        return self._max_write

    def _fill(self, block: bool) -> bool:
        if not block and not self.chan.recv_ready():
            return False
        try:
            data = self.chan.recv(self._recv_size)
        except TimeoutError:  # socket.timeout: the channel's settimeout() ran out
            # A stalled server is a lost connection: never reuse it, let the engine retry.
            self.closed = True
            waited = self.chan.gettimeout()
            raise SFTPStallError(
                f"the SFTP server sent no reply for {waited:g}s (stalled); the connection was dropped "
                "(raise --stall-timeout if the server is only slow)"
            ) from None
        if not data:
            self.closed = True
            raise SFTPProtocolError("SFTP server closed the channel")
        self._buf += data
        return True

    def _take_packet(self) -> tuple[int, memoryview] | None:
        if len(self._buf) < 5:
            return None
        (length,) = _U32.unpack_from(self._buf, 0)
        if length > (1 << 24):
            raise SFTPProtocolError(f"SFTP packet of {length} bytes is larger than any server sends")
        if len(self._buf) < 4 + length:
            return None
        packet = bytes(self._buf[4 : 4 + length])
        del self._buf[: 4 + length]
        return packet[0], memoryview(packet)[1:]

    def _read_packet(self) -> tuple[int, memoryview]:
        while True:
            p = self._take_packet()
            if p is not None:
                return p
            self._fill(block=True)

    # -- requests -----------------------------------------------------------
    @property
    def outstanding(self) -> int:
        """Requests sent and not answered, not counting the handshake's own limits request:
        its answer is dispatched to the wire itself whenever it comes, so a connection with
        only that in flight may be handed to anyone."""
        return len(self._pending) - self._limits_due

    def send(self, ptype: int, payload: bytes, callback: Callback, data: bytes | memoryview | None = None) -> int:
        """Send one request; `callback(reply_type, reader)` runs from pump().

        `data` is appended to the packet without copying it into `payload`
        (the body of a WRITE)."""
        rid = self._next_id
        self._next_id = (rid + 1) & 0xFFFFFFFF or 1
        extra = len(data) if data is not None else 0
        self.chan.sendall(_HDR.pack(1 + 4 + len(payload) + extra, ptype, rid) + payload)
        if data is not None:
            self.chan.sendall(data)
        self._pending[rid] = callback
        return rid

    def pump(self, block: bool = True) -> int:
        """Dispatch every complete reply; wait for one first if `block`.

        Returns the number of callbacks run."""
        ran = 0
        while True:
            p = self._take_packet()
            if p is None:
                if ran or not self._pending:
                    if not self._fill(block=False):
                        return ran
                    continue
                if not self._fill(block=block):
                    return ran
                continue
            ptype, body = p
            r = Reader(body)
            rid = r.u32()
            cb = self._pending.pop(rid, None)
            if cb is None:
                raise SFTPProtocolError(f"SFTP reply to unknown request {rid}")
            cb(ptype, r)
            ran += 1

    def call(self, ptype: int, payload: bytes) -> tuple[int, Reader]:
        """Send one request and wait for its reply (other replies still dispatch)."""
        box: list[tuple[int, Reader]] = []
        self.send(ptype, payload, lambda t, r: box.append((t, r)))
        while not box:
            self.pump(block=True)
        return box[0]

    def close(self) -> None:
        self.closed = True
        try:
            self.chan.close()
        except Exception:  # noqa: BLE001 - closing a dead channel is not an error
            pass

    # -- request payloads (async forms take a callback) ----------------------
    @staticmethod
    def p_open(path: str, flags: int, attrs: Attrs | None = None) -> bytes:
        return _path(path) + _U32.pack(flags) + (attrs or Attrs()).pack()

    @staticmethod
    def p_handle(handle: bytes) -> bytes:
        return _s(handle)

    @staticmethod
    def p_write_head(handle: bytes, offset: int, length: int) -> bytes:
        """A WRITE's fields before its data: the same layout as a READ request."""
        return SFTPWire.p_read(handle, offset, length)

    @staticmethod
    def p_read(handle: bytes, offset: int, length: int) -> bytes:
        return _s(handle) + _U64.pack(offset) + _U32.pack(length)

    @staticmethod
    def p_fsetstat(handle: bytes, attrs: Attrs) -> bytes:
        return _s(handle) + attrs.pack()

    @staticmethod
    def p_path(path: str) -> bytes:
        return _path(path)

    @staticmethod
    def p_setstat(path: str, attrs: Attrs) -> bytes:
        return _path(path) + attrs.pack()

    def send_rename(self, old: str, new: str, callback: Callback) -> None:
        """Rename `old` over `new`: atomically where the server offers posix-rename (OpenSSH does).
        Elsewhere SFTP v3's RENAME refuses an existing target, so a REMOVE of it goes first, in the
        same round trip (its reply is ignored: usually there is nothing to remove)."""
        if "posix-rename@openssh.com" in self.extensions:
            self.send(EXTENDED, _s(b"posix-rename@openssh.com") + _path(old) + _path(new), callback)
            return
        self.send(REMOVE, _path(new), lambda t, r: None)
        self.send(RENAME, _path(old) + _path(new), callback)

    # -- reply helpers ---------------------------------------------------------
    @staticmethod
    def expect_status(ptype: int, r: Reader, path: str = "") -> None:
        """Raise the mapped OSError unless the reply is STATUS OK."""
        if ptype != STATUS:
            raise SFTPProtocolError(f"expected STATUS, got packet type {ptype}")
        code = r.u32()
        if code != FX_OK:
            raise status_error(code, r.status_message(), path)

    @staticmethod
    def expect_handle(ptype: int, r: Reader, path: str = "") -> bytes:
        if ptype == HANDLE:
            return bytes(r.bytes_())
        if ptype == STATUS:
            code = r.u32()
            raise status_error(code, r.status_message(), path)
        raise SFTPProtocolError(f"expected HANDLE, got packet type {ptype}")

    # -- synchronous conveniences (listing, mkdir, stat) ------------------------
    def stat(self, path: str, follow: bool = True) -> Attrs:
        t, r = self.call(STAT if follow else LSTAT, _path(path))
        if t == ATTRS:
            return r.attrs()
        self.expect_status(t, r, path)
        raise SFTPProtocolError("STAT returned OK without attributes")

    def realpath(self, path: str) -> str:
        t, r = self.call(REALPATH, _path(path))
        if t == NAME and r.u32() >= 1:
            return r.str_()
        self.expect_status(t, r, path)
        raise SFTPProtocolError("REALPATH returned no name")

    def mkdir(self, path: str, mode: int = 0o755) -> None:
        t, r = self.call(MKDIR, _path(path) + Attrs(mode=mode).pack())
        self.expect_status(t, r, path)

    def remove(self, path: str) -> None:
        t, r = self.call(REMOVE, _path(path))
        self.expect_status(t, r, path)

    def rename(self, old: str, new: str) -> None:
        reply: list[tuple[int, Reader]] = []
        self.send_rename(old, new, lambda t, r: reply.append((t, r)))
        while not reply:
            self.pump(block=True)
        t, r = reply[0]
        self.expect_status(t, r, new)

    def setstat(self, path: str, attrs: Attrs) -> None:
        t, r = self.call(SETSTAT, _path(path) + attrs.pack())
        self.expect_status(t, r, path)

    def listdir_attrs(self, path: str) -> list[tuple[str, Attrs]]:
        """Every entry of a directory except '.' and '..', with lstat attributes."""
        t, r = self.call(OPENDIR, _path(path))
        handle = self.expect_handle(t, r, path)
        out: list[tuple[str, Attrs]] = []
        try:
            while True:
                t, r = self.call(READDIR, _s(handle))
                if t == STATUS:
                    code = r.u32()
                    if code == FX_EOF:
                        break
                    raise status_error(code, r.status_message(), path)
                if t != NAME:
                    raise SFTPProtocolError(f"expected NAME, got packet type {t}")
                for _ in range(r.u32()):
                    name = r.str_()
                    r.str_()  # long name, ls -l style: not needed
                    attrs = r.attrs()
                    if name not in (".", ".."):
                        out.append((name, attrs))
        finally:
            t, r = self.call(CLOSE, _s(handle))
        return out

    def free_bytes(self, path: str) -> int | None:
        """Bytes available to the user at `path` (statvfs@openssh.com), None if unknown.

        OpenSSH reports a full disk as a generic SFTP failure; this tells ENOSPC apart."""
        if "statvfs@openssh.com" not in self.extensions:
            return None
        try:
            t, r = self.call(EXTENDED, _s(b"statvfs@openssh.com") + _path(path))
        except (OSError, SFTPProtocolError):
            return None
        if t != EXTENDED_REPLY:
            return None
        _bsize, frsize, _blocks, _bfree, bavail = r.u64(), r.u64(), r.u64(), r.u64(), r.u64()
        return frsize * bavail
