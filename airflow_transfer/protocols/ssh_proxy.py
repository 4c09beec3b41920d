"""What an SSH connection runs over when it cannot reach its host directly: socket-like carriers.

paramiko's Transport reads and writes any object with send/recv/settimeout/close, so a host
behind a bastion is reached over a channel of the bastion's own SSH connection (ProxyJump), or
over the stdin/stdout of a command (ProxyCommand). Neither is a TCP socket of this process:
TCP_NODELAY and buffer sizes belong to the carrier then, and the RTT comes from SFTP round trips
(rtt.py).

Why not paramiko.ProxyCommand: it splits the command with shlex instead of running it through
the shell as OpenSSH does (so `ProxyCommand ssh -W %h:%p bastion 2>/dev/null` breaks), it keeps
the command's stderr where nobody reads it (the reason a proxy failed is lost), and a command
that exits leaves its reader polling an empty pipe instead of reporting the end of the stream.
"""

from __future__ import annotations

import os
import select
import subprocess
import tempfile
import threading
from typing import Any

SHELL = "/bin/sh"  # OpenSSH runs ProxyCommand through a shell; /bin/sh behaves the same for every user


class CommandSocket:
    """A ProxyCommand's stdin and stdout, as the socket paramiko's Transport expects."""

    def __init__(self, command: str) -> None:
        self.command = command
        self._stderr = tempfile.TemporaryFile()
        self._timeout: float | None = None
        self._closed = False
        self._said: str | None = None
        self._closing = threading.Lock()
        try:
            self.process = subprocess.Popen(
                [SHELL, "-c", f"exec {command}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                close_fds=True,
                start_new_session=True,  # a Ctrl-C meant for us is handled by us, then we end it
            )
        except OSError:
            self._stderr.close()
            raise
        if self.process.stdin is None or self.process.stdout is None:  # Popen with PIPE always makes both
            raise RuntimeError("the proxy command was started without its pipes")
        self._w = self.process.stdin.fileno()
        self._r = self.process.stdout.fileno()

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def gettimeout(self) -> float | None:
        return self._timeout

    def send(self, data: bytes) -> int:
        if self._closed:
            raise OSError("the proxy command was closed")
        try:
            return os.write(self._w, data)
        except OSError as exc:
            raise OSError(f"the proxy command stopped reading ({self.said() or exc})") from exc

    def recv(self, n: int) -> bytes:
        """Up to n bytes; b"" when the command's output ended (paramiko: the connection is gone)."""
        if self._closed:
            return b""
        ready, _, _ = select.select([self._r], [], [], self._timeout)
        if not ready:
            raise TimeoutError("no data from the proxy command")
        try:
            return os.read(self._r, n)
        except OSError:
            return b""

    def said(self) -> str:
        """The last of what the command wrote to stderr (why it could not connect), one line."""
        if self._said is not None:  # closed already (paramiko's thread closes on end of stream)
            return self._said
        try:
            self._stderr.seek(0)
            text = self._stderr.read()[-2000:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        return " ".join(text.split())[-400:]

    def exited(self) -> int | None:
        return self.process.poll()

    def close(self) -> None:
        with self._closing:  # Transport.close() and the transport's thread may both get here
            if self._closed:
                return
            self._closed = True
            self._end()

    def _end(self) -> None:
        # End the command first: its stdout then reaches end of file, which wakes a reader
        # blocked in recv, before the descriptors it waits on are closed.
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self._said = self.said()  # kept for the error message, which may be written after this
        self._stderr.close()


class HopSocket:
    """A direct-tcpip channel through a jump host, closing the jump host's connection with it.

    Each connection to the far host gets its own connection to the jump host: p and cc open
    separate TCP connections so that each has its own window, and channels multiplexed over
    one bastion connection would share one again on the first leg."""

    def __init__(self, channel: Any, hop_transport: Any) -> None:
        self.channel = channel
        self.hop_transport = hop_transport
        self._closing = threading.Lock()
        self._done = False

    def __getattr__(self, name: str) -> Any:
        # send, recv, settimeout, gettimeout, fileno, getpeername: the channel's own
        return getattr(self.channel, name)

    @property
    def _closed(self) -> bool:  # paramiko's Transport.stop_thread looks at it, as on a socket
        return bool(self.channel.closed)

    def close(self) -> None:
        # Transport.close() and the transport's own thread both close their socket, at the same
        # moment when a connection is closed: the second call must not find the first half done.
        with self._closing:
            if self._done:
                return
            self._done = True
            try:
                self.channel.close()
            except (EOFError, OSError):  # the jump host's connection went first; nothing left to tell it
                pass
            finally:
                self.hop_transport.close()
