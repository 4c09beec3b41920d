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


def paramiko_exec(transport: Any, command: str) -> Any:
    """`command` on an exec channel of a paramiko Transport."""
    try:
        chan = transport.open_session()
        chan.settimeout(HELLO_TIMEOUT)
        chan.exec_command(command)
    except Exception as exc:
        raise BundleUnavailable(f"the server runs no commands over SSH exec ({exc})") from exc
    return chan


def openssh_exec(target: SSHTarget, command: str) -> openssh.PipeChannel:
    """`ssh host command`, with the same host key checks and keys as the data connections.
    The first reply waits for connect and authentication: allowed the connect timeout too."""
    try:
        proc = openssh.OpenSSHProcess(target, command)
    except OSError as exc:
        raise BundleUnavailable(f"OpenSSH's client did not start ({exc})") from exc
    return openssh.PipeChannel(proc, timeout=HELLO_TIMEOUT + max(target.timeout, 1.0))


def local_exec(bootstrap: str) -> openssh.PipeChannel:
    """The helper under this interpreter (its standard library is all it needs)."""
    try:
        # Not a session of its own: when this process dies (even by kill -9) the helper reads EOF
        # on stdin and stops there, and what it had not renamed stays under temporary names.
        proc = openssh.PipedProcess([sys.executable, "-I", "-c", bootstrap])
    except OSError as exc:
        raise BundleUnavailable(f"the local bundle helper did not start ({exc})") from exc
    return openssh.PipeChannel(proc, timeout=HELLO_TIMEOUT)


def forget(chan: Any) -> None:
    """Key text written for an `ssh` process is removed once it has authenticated."""
    proc = chan.process if isinstance(chan, openssh.PipeChannel) else None
    if isinstance(proc, openssh.OpenSSHProcess):
        proc.forget_files()
