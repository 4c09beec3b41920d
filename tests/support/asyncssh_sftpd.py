"""An SFTP-only server on asyncssh, for the interoperability harness (tests/support/interop_servers.py).

    python -m tests.support.asyncssh_sftpd --port P --host-key K --authorized-keys A --root DIR --user NAME

Serves DIR as "/" (asyncssh's chroot: a path mapping in the server, not chroot(2)),
accepts only public-key logins of NAME whose key is in A, and refuses everything but
the sftp subsystem: exec, shell and SCP requests are rejected. Prints READY once it
listens. Started as root, it switches to NAME's uid/gid after binding, so the files
it writes belong to that user as on a real server.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pwd
import sys

import asyncssh


def _drop_to(user: str) -> None:
    pw = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    os.environ["HOME"] = pw.pw_dir


async def _serve(args: argparse.Namespace) -> None:
    root = os.path.realpath(args.root).encode()
    # Keys are read now, as root: the server gives up root before any connection.
    authorized = asyncssh.read_authorized_keys(args.authorized_keys)
    host_key = asyncssh.read_private_key(args.host_key)

    class Server(asyncssh.SSHServer):
        def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
            self._conn = conn

        def begin_auth(self, username: str) -> bool:
            if username == args.user:
                self._conn.set_authorized_keys(authorized)
            return True  # authentication required (and impossible for any other name)

        def password_auth_supported(self) -> bool:
            return False

        def kbdint_auth_supported(self) -> bool:
            return False

    class ChrootSFTP(asyncssh.SFTPServer):
        def __init__(self, chan: asyncssh.SSHServerChannel) -> None:
            super().__init__(chan, chroot=root)

    await asyncssh.listen(
        args.host,
        args.port,
        server_factory=Server,
        server_host_keys=[host_key],
        sftp_factory=ChrootSFTP,
        allow_scp=False,
        # No process_factory / session_factory: a session may only start the sftp
        # subsystem; exec and shell requests get a failure reply.
    )
    if os.geteuid() == 0 and args.user != "root":
        _drop_to(args.user)
    print("READY", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.asyncssh_sftpd")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host-key", required=True)
    ap.add_argument("--authorized-keys", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--log-level", default="INFO", help="asyncssh's log level (to stderr)")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
