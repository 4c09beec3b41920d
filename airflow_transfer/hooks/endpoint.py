"""Airflow connections -> endpoints. Credentials come only from connections.

Supported connection types: ssh and sftp (Airflow's own). Fields used: host,
port, login, password; extras: key_file, private_key, private_key_passphrase,
host_key (pins the server key), known_hosts (a file; default ~/.ssh/known_hosts),
no_host_key_check (host keys are checked unless this is explicitly true).
Compression is always off: scientific data rarely compresses and SSH
compression costs ~3x throughput (DESIGN.md section 8).
"""

from __future__ import annotations

import os

from airflow.sdk import BaseHook

from ..errors import UsageError
from ..protocols.endpoint import Endpoint, parse_url
from ..protocols.ssh import SSHTarget

_TRUE = ("true", "1", "yes", "on")


class TransferEndpointHook(BaseHook):
    """Resolves `url` (+ optional `conn_id`) to an Endpoint the core can use."""

    conn_name_attr = "conn_id"
    default_conn_name = "sftp_default"
    conn_type = "sftp"
    hook_name = "airflow-transfer endpoint"

    def __init__(self, conn_id: str | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id

    def endpoint(self, url: str) -> Endpoint:
        parsed = parse_url(url) if "://" in url or not self.conn_id else None
        if self.conn_id is None:
            if parsed.scheme == "sftp":
                target = SSHTarget(host=parsed.host, port=parsed.port or 22, username=parsed.user,
                                   known_hosts=[os.path.expanduser("~/.ssh/known_hosts")])
                return Endpoint("sftp", parsed.path, target)
            return Endpoint("file", parsed.path)
        conn = self.get_connection(self.conn_id)
        extra = conn.extra_dejson or {}
        if parsed is not None and parsed.scheme == "file":
            raise UsageError(f"connection {self.conn_id!r} given for a local path", url,
                             "drop the conn_id or use an sftp:// URL / a remote path")
        path = parsed.path if parsed is not None else url
        host = (parsed.host if parsed is not None else None) or conn.host
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
            check_host_key=str(extra.get("no_host_key_check", "false")).lower() not in _TRUE,
            look_for_keys=not (key_file or extra.get("private_key") or conn.password),
        )
        return Endpoint("sftp", path, target)
