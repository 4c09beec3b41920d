"""Airflow connections -> endpoints. With a conn_id, credentials come only from the connection.

Connection types: `airflow_transfer` (this provider's own, with its form fields and Test
button: provider_info.py, docs/operators.md "Connections"), and the ssh and sftp
connections users already have (read the same way). Fields used: host,
port, login, password; extras: key_file, private_key, private_key_passphrase,
host_key (pins the server key), known_hosts (a file; default ~/.ssh/known_hosts),
no_host_key_check (host keys are checked unless this is explicitly true), and the
SSHHook extras of ssh_extras.py (conn_timeout, disabled_algorithms, proxy_jump, ...).
Without a conn_id a URL resolves exactly as on the command line (protocols/resolve.py:
the worker user's ~/.ssh/config for sftp). Compression is always off: scientific data
rarely compresses, and SSH compression measured about 3x slower on incompressible data
(the Airflow SFTPHook rows of docs/benchmarks.md).
"""

from __future__ import annotations

import os

from airflow.sdk import BaseHook

from ..errors import TransferError, UsageError
from ..operators.failures import airflow_words
from ..protocols.check import check_sftp
from ..protocols.endpoint import Endpoint, parse_url
from ..protocols.resolve import resolve_endpoint
from ..protocols.ssh import SSH_CLIENTS, SSHTarget
from ..provider_info import CONN_TYPE, HOOK_NAME
from .ssh_extras import TRUE, apply_extras


class TransferEndpointHook(BaseHook):
    """Resolves `url` (+ optional `conn_id`) to an Endpoint the core can use."""

    conn_name_attr = "conn_id"
    default_conn_name = "airflow_transfer_default"
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(self, conn_id: str | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id

    def test_connection(self) -> tuple[bool, str]:
        """The connection form's Test button and `airflow connections test`: log in as a copy
        would (host key checked, the connection's credentials and SSH client) and list the
        login's home directory. Returns (ok, one line saying what was reached or what failed)."""
        if not self.conn_id:
            return False, "no connection to test: give the hook a conn_id"
        try:
            target = self.endpoint(".").target
            assert target is not None  # with a conn_id, a path always resolves to the connection's host
            return True, check_sftp(target)
        except TransferError as exc:
            what, todo = airflow_words(exc)
            where = f" ({exc.where})" if exc.where else ""
            return False, f"{what}{where}: {todo}" if todo else f"{what}{where}"
        except Exception as exc:  # noqa: BLE001 - whatever went wrong is the Test button's answer, never a traceback
            return False, f"{type(exc).__name__}: {exc}"

    def endpoint(self, url: str) -> Endpoint:
        if not url or not url.strip():  # e.g. a template that rendered empty
            raise UsageError(
                "empty source or destination",
                f"connection {self.conn_id!r}" if self.conn_id else "",
                "give a path or an sftp:// URL",
            )
        parsed = parse_url(url) if "://" in url or not self.conn_id else None
        if self.conn_id is None or parsed is not None and parsed.scheme not in ("sftp", "file"):
            # No connection: sftp as OpenSSH would (~/.ssh/config), like the CLI; ftp, http(s),
            # fsspec and any:// bring their own credentials (netrc, environment).
            return resolve_endpoint(url)
        conn = self.get_connection(self.conn_id)
        extra = conn.extra_dejson or {}
        if parsed is not None and parsed.scheme == "file":
            raise UsageError(
                f"connection {self.conn_id!r} given for a local path",
                url,
                "drop the conn_id or use an sftp:// URL / a remote path",
            )
        path = parsed.path if parsed is not None else url
        host = (parsed.host if parsed is not None else None) or conn.host
        if parsed is not None and parsed.host and conn.host and parsed.host.lower() != conn.host.lower():
            # The connection's password and keys are for its own host: never hand them to another.
            raise UsageError(
                f"{parsed.host} is not the host of connection {self.conn_id!r} ({conn.host})",
                url,
                "give a path (the connection's host is used), name its host, or use a connection for that host",
            )
        if not host:
            raise UsageError(f"connection {self.conn_id!r} has no host", url, "set the connection's host")
        key_file = extra.get("key_file")
        target = SSHTarget(
            host=host,
            port=(parsed.port if parsed is not None and parsed.port else None) or conn.port or 22,
            username=(parsed.user if parsed is not None else None) or conn.login or None,
            key_filenames=[os.path.expanduser(key_file)] if key_file else [],
            private_key=extra.get("private_key"),
            passphrase=extra.get("private_key_passphrase"),
            password=conn.password or None,
            known_hosts=[os.path.expanduser(extra.get("known_hosts", "~/.ssh/known_hosts"))],
            host_key=extra.get("host_key"),
            check_host_key=str(extra.get("no_host_key_check", "false")).lower() not in TRUE,
            look_for_keys=not (key_file or extra.get("private_key") or conn.password),
        )
        if extra.get("stall_timeout") is not None:
            # Seconds an SFTP request may go unanswered before the connection counts as lost.
            try:
                target.idle_timeout = float(extra["stall_timeout"])
            except (TypeError, ValueError):
                target.idle_timeout = -1.0
            if not 0 < target.idle_timeout < float("inf"):
                raise UsageError(
                    f"connection {self.conn_id!r}: stall_timeout must be positive seconds "
                    f"(got {extra['stall_timeout']!r})",
                    url,
                    'e.g. {"stall_timeout": 60}',
                )
        client = str(extra.get("ssh_client", SSH_CLIENTS[0])).lower()
        if client not in SSH_CLIENTS:
            raise UsageError(
                f"connection {self.conn_id!r}: ssh_client must be auto, openssh or paramiko "
                f"(got {extra['ssh_client']!r})",
                url,
                'e.g. {"ssh_client": "paramiko"}',
            )
        target.client = client
        apply_extras(target, extra, f"connection {self.conn_id!r}")
        return Endpoint("sftp", path, target)
