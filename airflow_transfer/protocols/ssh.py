"""SSH connections for transfers: host keys checked, compression off, TCP_NODELAY on.

Why not paramiko.SSHClient defaults: paramiko never sets TCP_NODELAY (small
SFTP requests then wait for delayed ACKs: setting it took 64 KiB files from
5 to 21 MiB/s), Airflow's SSHHook turns compression on (~3x slower on
scientific data that rarely compresses), and the default 2 MiB channel window
caps one connection at window/RTT on long links.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import io
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import AuthError, ConnectError, HostKeyError, TransferError, UsageError
from .sftp_wire import SFTPWire
from .ssh_proxy import CommandSocket, HopSocket

# Bytes the server may send us before we acknowledge: must exceed the link's
# BDP per connection for downloads (500 Mbit/s x 100 ms = 6.25 MB).
DEFAULT_WINDOW = 16 * 1024 * 1024
CONNECT_TIMEOUT = 15.0
# A server that stops answering mid-transfer must not hang a task forever: no
# reply for this long fails the connection (its files are reported, not lost).
IDLE_TIMEOUT = 120.0
SSH_CLIENTS = ("paramiko", "openssh", "auto")  # SSHTarget.client; the first is the default
HOP_PREFIX = "jump host "  # errors of a jump host start with it, so the hop that failed is named once


@dataclass
class SSHTarget:
    """Everything needed to open one authenticated SSH connection.

    Secrets (password, private_key, passphrase) are never included in repr()
    or str(): they must not reach logs.
    """

    host: str
    port: int = 22
    username: str | None = None
    key_filenames: list[str] = field(default_factory=list)
    private_key: str | None = field(default=None, repr=False)  # PEM/OpenSSH text
    passphrase: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    known_hosts: list[str] = field(default_factory=list)
    host_key: str | None = None  # "ssh-ed25519 AAAA..." pinned by the connection
    check_host_key: bool = True  # off only when a connection explicitly says so
    allow_agent: bool = False
    look_for_keys: bool = True
    timeout: float = CONNECT_TIMEOUT
    tcp_buffer: int = 0
    idle_timeout: float = IDLE_TIMEOUT  # seconds an SFTP request may go unanswered
    # What carries the SFTP data connections: "paramiko" (default: in-process, 0.07 s to open
    # on loopback against 0.2 s, and as fast on wan50: docs/transfers.md), "openssh" (the `ssh`
    # client, one process per connection; openssh.py), or "auto" (OpenSSH where usable, else
    # paramiko), for hosts where the client's CPU is the bottleneck.
    client: str = SSH_CLIENTS[0]
    # How the host is reached when not directly (ssh_config.py sets them from ~/.ssh/config or a
    # connection): through a jump host (ProxyJump; the jump host may sit behind another), or over
    # a command's stdin/stdout (ProxyCommand, tokens already expanded). At most one is set.
    jump: SSHTarget | None = None
    proxy_command: str | None = field(default=None, repr=False)  # may name a proxy's credentials
    # paramiko's disabled_algorithms ({"ciphers": [...], "kex": [...], "macs": [...], "keys": [...],
    # "pubkeys": [...]}) and an explicit cipher preference (empty: paramiko's, AES-GCM first).
    disabled_algorithms: dict[str, list[str]] = field(default_factory=dict)
    ciphers: list[str] = field(default_factory=list)
    auth_timeout: float | None = None  # seconds to wait for an authentication answer (None: paramiko's 30)

    @property
    def display(self) -> str:
        user = f"{self.username}@" if self.username else ""
        port = f":{self.port}" if self.port != 22 else ""
        return f"{user}{self.host}{port}"

    @property
    def known_hosts_name(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def route(self) -> str:
        """How the host is reached, for messages: "" when directly."""
        hops = []
        hop = self.jump
        while hop is not None:
            hops.append(hop.display)
            hop = hop.jump
        if hops:
            return ("via jump host " if len(hops) == 1 else "via jump hosts ") + " -> ".join(reversed(hops))
        return "via a proxy command" if self.proxy_command else ""


def fingerprint(key) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def local_user() -> str:
    return getpass.getuser()


def _load_pkeys(target: SSHTarget) -> list:
    # heavy: paramiko costs ~0.1 s at import; parsing URLs and the CLI's --help need none of it
    from .paramiko_lib import paramiko

    keys = []
    if target.private_key:
        for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
            try:
                keys.append(cls.from_private_key(io.StringIO(target.private_key), password=target.passphrase))
                break
            except paramiko.SSHException:
                continue
        else:
            raise UsageError(
                "the private key in the connection could not be read",
                target.display,
                "give an OpenSSH or PEM private key (and its passphrase)",
            )
    files = list(target.key_filenames)
    if not files and target.look_for_keys and not target.private_key and not target.password:
        home = Path.home() / ".ssh"
        files = [str(home / n) for n in ("id_ed25519", "id_ecdsa", "id_rsa") if (home / n).exists()]
    for path in files:
        try:
            keys.append(paramiko.PKey.from_path(path, password=target.passphrase))
        except FileNotFoundError as exc:
            raise UsageError(f"identity file not found: {path}", target.display, "check the key path") from exc
        except (paramiko.SSHException, ValueError) as exc:
            raise UsageError(
                f"cannot read identity file {path}: {exc}", target.display, "check the key format and passphrase"
            ) from exc
    return keys


def pinned_blob(host_key: str) -> str:
    """The base64 key of a pinned host key, given as "type base64 [comment]" or base64 alone."""
    parts = host_key.split()
    return parts[-1] if len(parts) == 1 else parts[1]


def _verify_host_key(target: SSHTarget, key) -> None:
    # heavy: paramiko costs ~0.1 s at import; parsing URLs and the CLI's --help need none of it
    from .paramiko_lib import paramiko

    if not target.check_host_key:
        return
    name = target.known_hosts_name
    fp = fingerprint(key)
    if target.host_key:
        if base64.b64encode(key.asbytes()).decode() == pinned_blob(target.host_key):
            return
        raise HostKeyError(
            f"host key of {name} does not match the key pinned in the connection (server offers {fp})",
            target.display,
            "if the server was re-keyed on purpose, update the connection's host_key extra",
        )
    known = paramiko.HostKeys()
    for path in target.known_hosts:
        if path and os.path.exists(path):
            try:
                known.load(path)
            except (OSError, paramiko.SSHException) as exc:
                raise UsageError(f"cannot read known_hosts file {path}: {exc}", target.display) from exc
    entry = known.lookup(name)
    if entry and key.get_name() in entry:
        if entry[key.get_name()] == key:
            return
        raise HostKeyError(
            f"host key of {name} CHANGED: server offers {fp}, known_hosts has "
            f"{fingerprint(entry[key.get_name()])}; refusing (possible man-in-the-middle)",
            target.display,
            f"if the server was re-keyed on purpose, run: ssh-keygen -R '{name}'",
        )
    files = ", ".join(target.known_hosts) or "no known_hosts file"
    raise HostKeyError(
        f"host key of {name} is not known ({key.get_name()} {fp}; looked in {files})",
        target.display,
        f"check the fingerprint with the server's admin, then add it: ssh-keyscan -p {target.port} "
        f"{target.host} >> ~/.ssh/known_hosts (or pass --known-hosts FILE)",
    )


def open_transport(
    target: SSHTarget, window: int = DEFAULT_WINDOW, on_socket: Callable[[socket.socket | None], None] | None = None
):
    """Connect (directly, through jump hosts or over a proxy command), verify the host key,
    authenticate. Returns a paramiko.Transport; closing it closes what it runs over.
    `on_socket` is called once connected, before the login, with the TCP socket (None when
    the connection runs through a jump host or a proxy command)."""
    # Connected first: the TCP handshake and the server's banner travel while paramiko loads.
    sock = _open_carrier(target, window)
    if on_socket is not None:
        on_socket(sock if isinstance(sock, socket.socket) else None)
    try:
        # heavy: paramiko costs ~0.1 s at import; parsing URLs and the CLI's --help need none of it
        from .paramiko_lib import paramiko
        from .transport import Transport

        transport = Transport(sock, default_window_size=window, disabled_algorithms=target.disabled_algorithms or None)
    except BaseException:
        sock.close()
        raise
    try:
        transport.use_compression(False)
        if target.ciphers:
            _set_ciphers(transport, target)
        else:
            _prefer_aead(transport)
        if target.auth_timeout:
            transport.auth_timeout = target.auth_timeout
        try:
            transport.start_client(timeout=target.timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise _handshake_error(target, sock, exc) from exc
        _verify_host_key(target, transport.get_remote_server_key())
        _authenticate(transport, target)
        if isinstance(sock, socket.socket):
            # paramiko's own 0.1 s poll stays on channels and pipes, which would otherwise block a
            # close() that races their reader
            sock.settimeout(None)
        return transport
    except BaseException:
        transport.close()
        raise


def _open_carrier(target: SSHTarget, window: int):
    """What the SSH connection to `target` runs over: a TCP socket, a jump host's channel or a command."""
    if target.jump is not None:
        return _through_jump(target, window)
    if target.proxy_command:
        try:
            return CommandSocket(target.proxy_command)
        except OSError as exc:
            raise ConnectError(
                f"cannot start the proxy command for {target.host}:{target.port}: {exc.strerror or exc}",
                target.display,
                "check the ProxyCommand (or the connection's proxy_command)",
            ) from exc
    try:
        sock = socket.create_connection((target.host, target.port), timeout=target.timeout)
    except socket.gaierror as exc:
        raise ConnectError(f"cannot resolve host {target.host!r}", target.display, "check the host name") from exc
    except TimeoutError as exc:
        raise ConnectError(
            f"connection to {target.host}:{target.port} timed out after {target.timeout:g}s",
            target.display,
            "check the host, port and firewall",
        ) from exc
    except OSError as exc:
        raise ConnectError(
            f"cannot connect to {target.host}:{target.port}: {exc.strerror or exc}",
            target.display,
            "check that the SSH server is running and the port is right",
        ) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if target.tcp_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, target.tcp_buffer)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, target.tcp_buffer)
    return sock


def _through_jump(target: SSHTarget, window: int) -> HopSocket:
    """A channel from the jump host to `target`, on a connection of its own to the jump host.

    Each failure names its hop: the jump host's own errors (refused, host key, login) say
    "jump host X", and a target the jump host cannot reach says so, with the jump host's reason."""
    # heavy: paramiko costs ~0.1 s at import; parsing URLs and the CLI's --help need none of it
    from .paramiko_lib import paramiko

    hop = target.jump
    assert hop is not None  # the caller checked
    if target.tcp_buffer and not hop.tcp_buffer:  # the first leg's socket is the jump host's
        hop = replace(hop, tcp_buffer=target.tcp_buffer)
    try:
        hop_transport = open_transport(hop, window)
    except TransferError as exc:
        if exc.what.startswith(HOP_PREFIX):  # a hop further out already said which one failed
            raise
        raise type(exc)(f"{HOP_PREFIX}{hop.display}: {exc.what}", f"on the way to {target.display}", exc.todo) from exc
    try:
        channel = hop_transport.open_channel(
            "direct-tcpip", (target.host, target.port), ("127.0.0.1", 0), window_size=window, timeout=target.timeout
        )
    except paramiko.ChannelException as exc:
        hop_transport.close()
        raise ConnectError(
            f"{HOP_PREFIX}{hop.display} cannot reach {target.host}:{target.port}: {exc.text or exc}",
            target.display,
            "check the host and port as the jump host sees them (its DNS, routes and firewall), "
            "and that its sshd allows TCP forwarding (AllowTcpForwarding)",
        ) from exc
    except (paramiko.SSHException, EOFError, OSError) as exc:
        hop_transport.close()
        raise ConnectError(
            f"{HOP_PREFIX}{hop.display} did not open a channel to {target.host}:{target.port}: {exc}",
            target.display,
            "check the jump host's sshd (AllowTcpForwarding) and its load",
        ) from exc
    return HopSocket(channel, hop_transport)


def _handshake_error(target: SSHTarget, sock, exc: BaseException) -> ConnectError:
    route = f" ({target.route})" if target.route else ""
    if isinstance(sock, CommandSocket):
        said = sock.said()
        code = sock.exited()
        why = f"the proxy command exited with {code}" if code is not None else f"{exc}"
        return ConnectError(
            f"SSH handshake with {target.host}:{target.port} over the proxy command failed: {why}"
            + (f": {said}" if said else ""),
            target.display,
            # only the program: the rest of the command line may hold a proxy's credentials
            f"run the proxy command ({_program(target.proxy_command)} ...) by hand to see why",
        )
    return ConnectError(
        f"SSH handshake with {target.host}:{target.port}{route} failed: {exc}",
        target.display,
        "check that the port is an SSH server",
    )


def _program(command: str | None) -> str:
    words = (command or "").split()
    return os.path.basename(words[0]) if words else "?"


def _set_ciphers(transport, target: SSHTarget) -> None:
    """The connection's cipher list, in its order; names paramiko does not know are left out."""
    opts = transport.get_security_options()
    known = set(opts.ciphers)
    wanted = tuple(c for c in target.ciphers if c in known)
    if not wanted:
        raise UsageError(
            f"none of the ciphers {', '.join(target.ciphers)} is supported here",
            target.display,
            f"choose from: {', '.join(opts.ciphers)}",
        )
    opts.ciphers = wanted


# AES-GCM authenticates as it encrypts: no separate HMAC pass over every byte. On
# loopback it cut the client's CPU per byte by about 40 % against paramiko's
# default aes128-ctr + hmac-sha2-256 (benchmarks/cipher_cpu.py, docs/transfers.md);
# servers without it still negotiate the rest of paramiko's list.
PREFERRED_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")


def _prefer_aead(transport) -> None:
    opts = transport.get_security_options()
    first = [c for c in PREFERRED_CIPHERS if c in opts.ciphers]
    opts.ciphers = tuple(first) + tuple(c for c in opts.ciphers if c not in first)


def _authenticate(transport, target: SSHTarget) -> None:
    # heavy: paramiko costs ~0.1 s at import; parsing URLs and the CLI's --help need none of it
    from .paramiko_lib import paramiko

    user = target.username or local_user()
    errors = []
    for key in _load_pkeys(target):
        try:
            transport.auth_publickey(user, key)
            if transport.is_authenticated():
                return
        except paramiko.AuthenticationException:
            errors.append(f"key {key.get_name()} refused")
        except paramiko.SSHException as exc:
            errors.append(str(exc))
    if target.allow_agent:
        for key in paramiko.Agent().get_keys():
            try:
                transport.auth_publickey(user, key)
                if transport.is_authenticated():
                    return
            except paramiko.SSHException:
                errors.append("agent key refused")
    if target.password:
        try:
            transport.auth_password(user, target.password)
            if transport.is_authenticated():
                return
        except paramiko.AuthenticationException:
            errors.append("password refused")
        except paramiko.SSHException as exc:
            errors.append(str(exc))
    if not errors:
        errors.append("no key or password to offer")
    raise AuthError(
        f"authentication as {user!r} failed ({'; '.join(errors)})",
        target.display,
        "check the user name and key (--identity / the connection's key_file or password)",
    )


def open_sftp(transport, window: int = DEFAULT_WINDOW, idle_timeout: float = IDLE_TIMEOUT):
    """Open the SFTP subsystem on a new channel and speak pipelined SFTP on it.

    A reply that does not come within `idle_timeout` seconds raises TimeoutError
    from the wire: the engine then treats the connection as lost and retries."""
    try:
        chan = transport.open_session(window_size=window, timeout=idle_timeout)
        chan.settimeout(idle_timeout)
        chan.invoke_subsystem("sftp")
    except Exception as exc:
        raise TransferError(
            f"the server refused the SFTP subsystem: {exc}", "", "enable 'Subsystem sftp' in the server's sshd_config"
        ) from exc
    return SFTPWire(chan)
