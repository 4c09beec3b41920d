"""The network profile of one ordered host pair (source -> destination).

The network profiler's sink runs on one end and its client on the other; the
client always runs on this machine when one end is local, so one direction
is the client's `send` and the other its `recv`:

- local -> remote: sink on the remote host, client here, direction send;
- remote -> local: the same layout, direction recv;
- remote -> remote: client on the source host (over its SSH connection),
  sink on the destination bound to all addresses with a one-time token;
  the client connects straight to the destination's host name.

`via` says how a local client reaches a remote sink:

- "direct" (default): a TCP connection to the sink on the remote host name
  (sink bound to 0.0.0.0, one-time token): the raw network path, which is
  what the tuner's BDP needs. Needs the sink's (ephemeral) port reachable.
- "ssh": through the SSH connection (a direct-tcpip channel to the sink on
  the remote loopback). Works through any firewall that lets SSH in; the
  figure then includes SSH's encryption and channel flow control.

RTT (TCP connects) and hops (traceroute) always go straight to the remote
host's SSH port, never through a tunnel. A remote host behind a jump host
(protocols/ssh_config.py) has no straight path: its RTT and hops are those of
the first jump host (the leg our packets cross; bastions usually sit next to
their hosts), and its sink is reached "ssh" whatever `via` says.
"""

from __future__ import annotations

import secrets
import socket
import threading
from typing import Any

from ..errors import TransferError, UsageError
from .remote import HostRunner

VIAS = ("direct", "ssh")
SINK_READY_TIMEOUT = 30.0


def _client_args(light: bool, direction: str, streams: int, seconds: float | None) -> list[str]:
    args = ["--direction", direction, "--streams", str(streams), "--stop-sink"]
    if light:
        args.append("--light")
    if seconds is not None:
        args += ["--seconds", f"{seconds:g}"]
    return args


def measure_path(
    source: HostRunner,
    dest: HostRunner,
    *,
    light: bool = False,
    via: str = "direct",
    streams: int = 4,
    seconds: float | None = None,
    timeout: float = 180.0,
) -> dict[str, Any]:
    """Profile source -> destination; returns {"payload": client JSON, "direction": send|recv, ...}."""
    if via not in VIAS:
        raise UsageError(f"unknown way to reach the sink {via!r}", "", f"use one of {', '.join(VIAS)}")
    if source.host.key == dest.host.key:
        raise UsageError(
            f"{source.host.key} -> {source.host.key} is not a link", source.host.key, "profile two different hosts"
        )
    if source.host.is_local and dest.host.is_local:
        raise UsageError("both hosts are this machine", "", "name an SSH host")
    if dest.host.is_local:
        client, sink, direction = dest, source, "recv"
    else:
        client, sink, direction = source, dest, "send"
    if not client.host.is_local:
        via = "direct"  # a remote client cannot use our SSH connection to the other host
    elif sink.host.ssh.route:
        via = "ssh"  # behind a jump host or a proxy command there is no direct path to its sink
    token = secrets.token_hex(16)
    bind = "127.0.0.1" if via == "ssh" else "0.0.0.0"
    sink_args = ["--serve", "0", "--bind", bind, "--idle-timeout", "60", "--max-lifetime", str(int(timeout))]
    if via == "direct":
        sink_args += ["--token", token]
    remote_sink = sink.start("network", sink_args, timeout=timeout)
    try:
        ready = remote_sink.wait_line("READY ", SINK_READY_TIMEOUT)
        if ready is None:
            status, out, err = remote_sink.wait(5)
            tail = (err.decode("utf-8", "replace").strip().splitlines() or [f"exit status {status}"])[-1]
            raise TransferError(
                f"the network sink did not start on {sink.host.key}: {tail}",
                sink.host.key,
                "check that python3 runs there",
            )
        sink_port = int(ready.split()[2])
        target = sink.host.ssh  # the sink runs on the SSH end (both ends local was refused above)
        while target.jump is not None:  # the first hop is the one our packets reach directly
            target = target.jump
        args = _client_args(light, direction, streams, seconds)
        args += ["--rtt-host", target.host, "--rtt-port", str(target.port), "--trace-host", target.host]
        if via == "ssh":
            tunnel = sink.transport
            with Forwarder(tunnel, sink_port) as local_port:
                payload = client.run(
                    "network", ["--host", "127.0.0.1", "--port", str(local_port), *args], timeout=timeout
                )
            if not tunnel.is_active():
                # the probe then reads as an empty answer from the sink: say what happened instead
                payload["tunnel_lost"] = f"the SSH connection to {sink.host.key} carrying the probe closed during it"
        else:
            payload = client.run(
                "network", ["--host", target.host, "--port", str(sink_port), "--token", token, *args], timeout=timeout
            )
        try:
            remote_sink.wait(15)
        except TransferError:
            pass  # the measurement is in; a sink that lingers exits on its idle timeout
    finally:
        remote_sink.close()
    payload.pop("token", None)
    return {"payload": payload, "direction": direction, "client": client.host.key, "via": via}


class Forwarder:
    """127.0.0.1:<ephemeral> on this machine, each connection piped to host:port behind an SSH transport."""

    def __init__(self, transport, remote_port: int, remote_host: str = "127.0.0.1") -> None:
        self.transport, self.remote = transport, (remote_host, remote_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="profile-forwarder")

    def __enter__(self) -> int:
        self._thread.start()
        return self.port

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, peer = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                chan = self.transport.open_channel("direct-tcpip", self.remote, peer)
            except Exception:  # noqa: BLE001 - the client then sees a closed connection and reports it
                conn.close()
                continue
            threading.Thread(target=_pipe, args=(conn, chan), daemon=True, name="profile-pipe").start()
            threading.Thread(target=_pipe, args=(chan, conn), daemon=True, name="profile-pipe").start()
            # The pipes hold the only references: a socket closes when both are done with it,
            # and a client's data it never read then resets its sender instead of blocking it.
            del conn, chan


def _pipe(src, dst) -> None:
    try:
        while True:
            data = src.recv(1 << 18)
            if not data:
                break
            dst.sendall(data)
    except Exception:  # noqa: BLE001 - one side failed (the SSH connection died, the client left)
        # Both ends hear of it: a client still sending would otherwise block on a socket nobody
        # reads until its own timeout (42 s for a 4 s probe).
        _end(src, whole=True)
        _end(dst, whole=True)
        return
    _end(dst, whole=False)  # the other direction may still be answering


def _end(end, whole: bool) -> None:
    """Close `end` (a socket or a paramiko channel) for writing, or `whole`ly."""
    try:
        if not hasattr(end, "shutdown_write"):  # a socket
            end.shutdown(socket.SHUT_RDWR if whole else socket.SHUT_WR)
        elif whole:
            end.close()
        else:
            end.shutdown_write()
    except Exception:  # noqa: BLE001 - the peer may be gone already; the measurement is over
        pass
