"""What carries a bundle helper's stream: an exec channel of the connection's paramiko
Transport, an `ssh host command` process of OpenSSH's client, or (to land downloads) the
helper started on this host.

Why more than paramiko: on a stream of small files the engine's own process is the
bottleneck, and every byte paramiko carries costs this process Python steps (framing,
the cipher call, the window). An `ssh` process encrypts in C on its own CPU time, and
a local helper process creates, flushes and reads back downloaded files on its own,
outside this process's GIL; each talks to the engine over a pipe. What each carrier
measured is in docs/transfers.md ("Small files in bundles").
"""

from __future__ import annotations

import sys
from typing import Any

from ..protocols import openssh
from ..protocols.ssh import SSHTarget

HELLO_TIMEOUT = 10.0  # the sink answers at once where python3 runs; a forced command never does


class BundleUnavailable(Exception):
    """The destination cannot run the bundle sink; the message says why (for the summary)."""


def paramiko_exec(transport: Any, command: str, first: bytes = b"") -> Any:
    """`command` on an exec channel of a paramiko Transport, `first` written to its input."""
    try:
        chan = transport.open_session()
        chan.settimeout(HELLO_TIMEOUT)
        if in_order(transport) and can_pipeline(chan):
            _exec_then_write(chan, command, first)
        else:  # the input after the reply
            chan.exec_command(command)
            chan.sendall(first)
    except Exception as exc:
        raise BundleUnavailable(f"the server runs no commands over SSH exec ({exc})") from exc
    return chan


def in_order(transport: Any) -> bool:
    """Whether the server is known to start an exec request's command before it reads the
    channel data sent behind the request: OpenSSH's sshd handles a connection's messages one
    after the other, and an exec request forks the command before the next message is read.
    Other servers get the input only once the command is confirmed."""
    return "OpenSSH" in str(getattr(transport, "remote_version", "") or "")


def _exec_then_write(chan: Any, command: str, first: bytes) -> None:
    """Channel.exec_command, with `first` sent behind the request instead of after its reply:
    the helper's source is on its way while the server starts the command, one round trip
    less before the helper answers (50 ms on wan50). The reply is still waited for, and a
    refusal raises as exec_command's does. Only where can_pipeline(chan): the steps used here
    are not paramiko's public interface."""
    from ..protocols.paramiko_lib import paramiko  # loaded already: the channel is paramiko's

    m = paramiko.Message()
    m.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    m.add_int(chan.remote_chanid)
    m.add_string("exec")
    m.add_boolean(True)  # want a reply: a refusal must still be heard
    m.add_string(command)
    chan._event_pending()
    chan.transport._send_user_message(m)
    if first:
        chan.sendall(first)
    chan._wait_for_event()


def can_pipeline(chan: Any) -> bool:
    """Whether `chan` (and the paramiko it comes from) has the steps _exec_then_write uses."""
    from ..protocols.paramiko_lib import paramiko  # loaded already where the channel is paramiko's

    common = getattr(paramiko, "common", None)
    return (
        all(callable(getattr(chan, name, None)) for name in ("_event_pending", "_wait_for_event", "sendall"))
        and isinstance(getattr(chan, "remote_chanid", None), int)
        and callable(getattr(getattr(chan, "transport", None), "_send_user_message", None))
        and isinstance(getattr(common, "cMSG_CHANNEL_REQUEST", None), bytes)
    )


def openssh_exec(target: SSHTarget, command: str, first: bytes = b"") -> openssh.PipeChannel:
    """`ssh host command`, with the same host key checks and keys as the data connections,
    `first` written to its input (ssh holds it until the command runs). The first reply waits
    for connect and authentication: allowed the connect timeout too."""
    try:
        proc = openssh.OpenSSHProcess(target, command)
    except OSError as exc:
        raise BundleUnavailable(f"OpenSSH's client did not start ({exc})") from exc
    return _written(openssh.PipeChannel(proc, timeout=HELLO_TIMEOUT + max(target.timeout, 1.0)), first)


def local_exec(bootstrap: str, first: bytes = b"", args: tuple[str, ...] = ()) -> openssh.PipeChannel:
    """The helper under this interpreter (its standard library is all it needs), `first`
    written to its input; `args` are its sys.argv[1:]."""
    try:
        # Not a session of its own: when this process dies (even by kill -9) the helper reads EOF
        # on stdin and stops there, and what it had not renamed stays under temporary names.
        # -S: the standard library is all it imports, so this environment's site-packages and its
        # .pth files are not read at each start (13 ms of CPU of a lander's 62 here, editable install).
        proc = openssh.PipedProcess([sys.executable, "-I", "-S", "-c", bootstrap, *args])
    except OSError as exc:
        raise BundleUnavailable(f"the local bundle helper did not start ({exc})") from exc
    return _written(openssh.PipeChannel(proc, timeout=HELLO_TIMEOUT), first)


def _written(chan: openssh.PipeChannel, first: bytes) -> openssh.PipeChannel:
    try:
        chan.sendall(first)
    except OSError:
        pass  # the process is gone: reading its first reply meets the end, and says why
    return chan


def forget(chan: Any) -> None:
    """Key text written for an `ssh` process is removed once it has authenticated."""
    proc = chan.process if isinstance(chan, openssh.PipeChannel) else None
    if isinstance(proc, openssh.OpenSSHProcess):
        proc.forget_files()
