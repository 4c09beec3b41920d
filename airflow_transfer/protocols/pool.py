"""Pooled SFTP connections, reused across chunks (GridFTP's data-channel caching).

One `Conn` is one TCP connection + SSH transport + one SFTP channel: p and cc
need separate TCP connections (docs/transfers.md), since channels inside
one SSH connection share one TCP window. The SSH layer is paramiko, or OpenSSH's
`ssh` client when the target asks for it (`SSHTarget.client`, openssh.py).
`warm` opens the first connections of a copy in the background.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import UsageError
from . import openssh
from .capabilities import ServerCapabilities
from .rtt import connection_rtt, tcp_rtt
from .sftp_wire import SFTPProtocolError, SFTPWire
from .ssh import DEFAULT_WINDOW, SSH_CLIENTS, SSHTarget, open_sftp, open_transport

log = logging.getLogger(__name__)

# Connections opened ahead at the start of a copy: two, because every tuned plan for more
# than one file runs at least two channels (a single-channel plan then has one spare).
WARM_CONNECTIONS = 2


def warm_count(algorithm: str, streams: int, verify: bool) -> int:
    """Connections worth opening before the plan exists: a fixed setting says how many it uses
    (`streams` = p x cc), every other algorithm's plan uses at least WARM_CONNECTIONS; end-to-end
    verification holds one more for the checksum helper from the chunk's start on."""
    data = min(WARM_CONNECTIONS, streams) if algorithm == "fixed" else WARM_CONNECTIONS
    return data + (1 if verify else 0)


class Carrier(Protocol):
    """What carries a connection's SFTP channel: a paramiko Transport or an openssh.OpenSSHProcess."""

    def is_active(self) -> bool: ...

    def close(self) -> None: ...


def close_companions(companions: dict[str, Any]) -> None:
    """Close and forget each of a connection's companions; one that fails to close is dropped
    (its channel dies with the connection anyway)."""
    for companion in companions.values():
        try:
            companion.close()
        except Exception:  # noqa: BLE001 - see above
            pass
    companions.clear()


@dataclass
class Conn:
    carrier: Carrier
    wire: SFTPWire
    target: SSHTarget | None = None
    home: str = ""
    _control: Carrier | None = None  # a paramiko Transport for exec channels over an OpenSSH carrier
    # Channels that live as long as this connection (the bundle sink, started once and kept
    # across chunks), by name; each has close(), called when the connection closes.
    companions: dict[str, Any] = field(default_factory=dict)

    @property
    def client(self) -> str:
        return "openssh" if isinstance(self.carrier, openssh.OpenSSHProcess) else "paramiko"

    @property
    def transport(self):
        """A paramiko Transport for exec channels and paramiko's SFTPClient (verify.py, helpers).

        Over OpenSSH one is opened on first use and closed with the connection."""
        if not isinstance(self.carrier, openssh.OpenSSHProcess):
            return self.carrier
        if self._control is None or not self._control.is_active():
            self._control = open_transport(self.target)
        return self._control

    @property
    def alive(self) -> bool:
        return not self.wire.closed and self.carrier.is_active()

    def close(self) -> None:
        close_companions(self.companions)
        self.wire.close()
        for part in (self.carrier, self._control):
            try:
                if part is not None:
                    part.close()
            except Exception:  # noqa: BLE001 - already gone
                pass


@dataclass
class SFTPPool:
    target: SSHTarget
    window: int = DEFAULT_WINDOW
    _idle: list[Conn] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    clients: dict[str, int] = field(default_factory=dict)  # connections opened over the pool's life, per SSH client
    _openssh: bool = True  # False once OpenSSH failed where paramiko then worked
    _warming: int = 0  # connections `warm` is opening now
    _waiting: int = 0  # acquirers waiting for one of them
    _closed: bool = False
    # Connections that failed while the copy ran (the server went away, the link broke, a helper
    # on them died) and were dropped: a copy that got over a fault without retrying a file
    # still says it happened (the summary's connections_lost).
    lost: int = 0
    caps: ServerCapabilities = field(default_factory=ServerCapabilities)  # found out once for the server
    # Companions of connections started ahead (the bundle helpers of a download), by name, and
    # how many of each are still being started: expect / stash / take.
    _spares: dict[str, list[Any]] = field(default_factory=dict)
    _expected: dict[str, int] = field(default_factory=dict)
    # Called with the paramiko Transport of each connection `warm` opens, in its thread, as soon
    # as the login is done and before the SFTP session is opened on it; what it returns becomes
    # the connection's companions (an upload's sink is started there: bundle_channel.
    # prestart_upload_sinks, so the helper starts while SFTP does). It must not block: whatever
    # it starts runs on in a thread of its own, and has close().
    on_transport: Callable[[Any], dict[str, Any]] | None = None
    # Work begun on the pool before the copy that owns it was ready (a copy's first small
    # files, engine/head_start.py): anything with close(), closed with the pool.
    ahead: Any = None
    # The round trip of the first connection it opened, in seconds, as the kernel measured its
    # TCP handshake (None: not measured, as through a jump host, a proxy command or `ssh`),
    # once `_connected` is set: read with first_round_trip.
    _first_rtt: float | None = None
    # What an upload's bundle sinks ride, once decided for this pool (engine/carrier_choice.py):
    # "" for OpenSSH's client, else why paramiko.
    upload_carrier_why: str | None = None

    def __post_init__(self) -> None:
        self._cond = threading.Condition(self._lock)
        self._connected = threading.Event()

    def first_round_trip(self, wait: float) -> float | None:
        """The first connection's TCP round trip, waiting up to `wait` seconds for its handshake
        (one round trip; `warm` starts it); None when none was measured by then."""
        self._connected.wait(wait)
        return self._first_rtt

    def handshake_seen(self) -> bool:
        """Whether the first connection got past its TCP handshake (or went through `ssh`, a jump
        host or a proxy command, where no round trip is read)."""
        return self._connected.is_set()

    def _saw_socket(self, sock: Any) -> None:
        if self._connected.is_set():
            return
        got = tcp_rtt(sock) if sock is not None else None
        self._first_rtt = got[1] if got is not None else None
        self._connected.set()

    def acquire(self, prefer: Callable[[Conn], bool] | None = None) -> Conn:
        """An idle connection (the one released last), else one being warmed, else a new one.
        With `prefer`, an idle connection it accepts comes before the others, and while none of
        the idle ones is accepted, one being warmed is waited for (it may be): what `warm`
        started on a connection (an upload's sink) is known only once it is open."""
        with self._cond:
            while True:
                if prefer is not None:
                    self._idle.sort(key=prefer)  # stable: the accepted ones last, each kind in its order
                    if self._idle and not prefer(self._idle[-1]) and self._wait_for_warm():
                        continue
                while self._idle:
                    conn = self._idle.pop()
                    if conn.alive and conn.wire.outstanding == 0:
                        return conn
                    self.lost += not conn.alive
                    conn.close()
                # A connection `warm` is opening is taken when it arrives rather than opened twice.
                if not self._wait_for_warm():
                    break
        conn = self._open()
        with self._lock:
            self._adopt(conn)
        return conn

    def _wait_for_warm(self) -> bool:
        """Wait (lock held) for a connection `warm` is opening, unless each is already awaited by
        another acquirer; whether it waited."""
        if self._warming <= self._waiting:
            return False
        self._waiting += 1
        try:
            self._cond.wait()
        finally:
            self._waiting -= 1
        return True

    def warm(self, n: int) -> int:
        """Start opening up to `n` connections in the background; returns how many were started.

        A copy spends its first moments listing the source, opening the journal and planning:
        the SSH handshakes (about 12 round trips each, 0.6 s at 50 ms) overlap that instead of
        following it, and a chunk's first workers find their connections ready. A handshake
        that fails here is not reported: `acquire` then opens its own and raises the precise error."""
        with self._cond:
            n = max(0, n - len(self._idle) - self._warming)
            self._warming += n
        for _ in range(n):
            threading.Thread(target=self._warm_one, name="sftp-warm", daemon=True).start()
        return n

    def expect(self, name: str, n: int) -> None:
        """`n` companions named `name` are being started for this pool's connections elsewhere
        (each handed over with `stash`, or None when it failed): `take` waits for them."""
        with self._cond:
            self._expected[name] = self._expected.get(name, 0) + n

    def stash(self, name: str, item: Any) -> None:
        """Hand over one expected companion (anything with close()), or None for one that failed."""
        with self._cond:
            self._expected[name] = max(0, self._expected.get(name, 0) - 1)
            if item is not None and not self._closed:
                self._spares.setdefault(name, []).append(item)
                item = None
            self._cond.notify_all()
        if item is not None and hasattr(item, "close"):
            item.close()  # the pool was closed while it was being started

    def take(self, name: str) -> Any:
        """A companion stashed under `name`, after waiting for one still being started; None
        when none is left."""
        with self._cond:
            while not self._spares.get(name) and self._expected.get(name, 0) > 0 and not self._closed:
                self._cond.wait()
            spares = self._spares.get(name)
            return spares.pop(0) if spares else None

    def _warm_one(self) -> None:
        conn = None
        try:
            conn = self._open(ahead=True)
        except Exception as exc:  # noqa: BLE001 - acquire reports it, with the same cause
            log.debug("opening an SFTP connection ahead to %s failed: %s", self.target.display, exc)
        with self._cond:
            self._warming -= 1
            if conn is not None:
                self._adopt(conn)
                if not self._closed:
                    self._idle.append(conn)
                    conn = None
            self._cond.notify_all()
        if conn is not None:
            conn.close()  # the pool was closed while this one was being opened

    def _adopt(self, conn: Conn) -> None:
        """Count a newly opened connection (lock held); it shares what is known of the server."""
        self.clients[conn.client] = self.clients.get(conn.client, 0) + 1
        conn.wire.caps = self.caps
        self.caps.saw_extensions(conn.wire.extensions)

    @property
    def opened(self) -> int:
        """Connections opened over the pool's life (for reports and tests)."""
        return sum(self.clients.values())

    @property
    def client(self) -> str | None:
        """What carried this pool's connections: "openssh", "paramiko", both joined by "+", or None."""
        return "+".join(sorted(self.clients)) or None

    def _open(self, ahead: bool = False) -> Conn:
        client = self.target.client
        if client not in SSH_CLIENTS:
            raise UsageError(
                f"unknown SSH client {client!r}", self.target.display, f"choose one of: {', '.join(SSH_CLIENTS)}"
            )
        why = openssh.usable(self.target) if self._openssh else "OpenSSH failed where paramiko worked"
        if client == "openssh" and why:
            raise UsageError(
                f"cannot carry SFTP over OpenSSH's client: {why}",
                self.target.display,
                "use --ssh-client paramiko or auto (falls back to paramiko), or fix the reason",
            )
        failed = None
        if not why:
            self._saw_socket(None)  # `ssh` holds the socket: no round trip to read here
            try:
                return self._open_openssh()
            except (OSError, SFTPProtocolError) as exc:
                failed = exc
        # paramiko gives the precise error (host key, auth, refused) when both fail, and
        # OpenSSH stays in use then: the cause was the host or the network, not the client.
        transport = open_transport(self.target, self.window, on_socket=self._saw_socket)
        early = self.on_transport(transport) if ahead and self.on_transport is not None else {}
        try:
            wire = open_sftp(transport, self.window, self.target.idle_timeout)
            if failed is not None and client == "openssh":
                raise failed
        except BaseException:
            close_companions(early)
            transport.close()
            raise
        if failed is not None:
            self._openssh = False
            log.warning(
                "OpenSSH's client could not open SFTP to %s (%s); using paramiko for this transfer",
                self.target.display,
                failed,
            )
        return Conn(transport, wire, self.target, companions=early)

    def _open_openssh(self) -> Conn:
        proc = openssh.OpenSSHProcess(self.target)
        try:
            # The handshake waits for connect + auth: bound it by the connect timeout, not the idle one.
            chan = openssh.PipeChannel(proc, timeout=max(self.target.timeout, 1.0) * 2)
            wire = SFTPWire(chan)
            chan.settimeout(self.target.idle_timeout)
        except BaseException:
            proc.close()
            raise
        proc.forget_files()
        return Conn(proc, wire, self.target)

    def rtt(self) -> tuple[float, float, str]:
        """(RTT, minimum RTT, how) measured on a pooled connection (protocols/rtt.py)."""
        conn = self.acquire()
        broken = False
        try:
            return connection_rtt(conn)
        except BaseException:
            broken = True
            raise
        finally:
            self.release(conn, broken=broken)

    def release(self, conn: Conn, broken: bool = False) -> None:
        if broken or not conn.alive or conn.wire.outstanding:
            if broken or not conn.alive:
                with self._lock:
                    self.lost += 1
            conn.close()
            return
        with self._cond:
            self._idle.append(conn)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True  # connections still being warmed are closed when they arrive
            idle, self._idle = self._idle, []
            spares, self._spares = [x for xs in self._spares.values() for x in xs], {}
            self._cond.notify_all()  # a `take` waiting for a companion gets None
            ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.close()  # first: it may hold helpers it would hand back to the spares
        for conn in idle:
            conn.close()
        for spare in spares:
            if hasattr(spare, "close"):
                spare.close()

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
