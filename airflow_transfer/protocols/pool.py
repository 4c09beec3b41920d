"""Pooled SFTP connections, reused across chunks (GridFTP's data-channel caching).

One `Conn` is one TCP connection + SSH transport + one SFTP channel: DESIGN.md
section 3 requires separate TCP connections for p and cc, since channels inside
one SSH connection share one TCP window.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .ssh import DEFAULT_WINDOW, SSHTarget, open_sftp, open_transport
from .sftp_wire import SFTPWire


@dataclass
class Conn:
    transport: object
    wire: SFTPWire
    home: str = ""

    @property
    def alive(self) -> bool:
        return not self.wire.closed and self.transport.is_active()

    def close(self) -> None:
        self.wire.close()
        try:
            self.transport.close()
        except Exception:  # noqa: BLE001 - already gone
            pass


@dataclass
class SFTPPool:
    target: SSHTarget
    window: int = DEFAULT_WINDOW
    _idle: list[Conn] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    opened: int = 0  # connections opened over the pool's life (for reports and tests)

    def acquire(self) -> Conn:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if conn.alive and conn.wire.outstanding == 0:
                    return conn
                conn.close()
        transport = open_transport(self.target, self.window)
        try:
            wire = open_sftp(transport, self.window, self.target.idle_timeout)
        except BaseException:
            transport.close()
            raise
        with self._lock:
            self.opened += 1
        return Conn(transport, wire)

    def release(self, conn: Conn, broken: bool = False) -> None:
        if broken or not conn.alive or conn.wire.outstanding:
            conn.close()
            return
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def exec_command(self, command: str, stdin: bytes = b"", timeout: float = 120.0) -> tuple[int, bytes, bytes]:
        """Run one command on the host over its own channel (remote helpers)."""
        conn = self.acquire()
        try:
            chan = conn.transport.open_session()
            chan.settimeout(timeout)
            chan.exec_command(command)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            while True:
                data = chan.recv(1 << 20)
                if not data:
                    break
                out += data
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(1 << 16)
            status = chan.recv_exit_status()
            err += chan.recv_stderr(1 << 16) if chan.recv_stderr_ready() else b""
            chan.close()
            return status, bytes(out), bytes(err)
        finally:
            self.release(conn)
