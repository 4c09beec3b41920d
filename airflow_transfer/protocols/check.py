"""Is this SFTP endpoint usable? One login and one listing, exactly as a copy would make them.

Behind the Test button of an Airflow connection (hooks/endpoint.py): a green test has to mean a
copy gets in. So the connection is opened by the pool the engine uses (same SSH client, host key
verified against the same files or pinned key, same credentials), then the path is resolved and
listed, which proves the SFTP subsystem answers and the login may read there.
"""

from __future__ import annotations

from ..errors import TransferError
from .pool import SFTPPool
from .sftp_wire import SFTPProtocolError
from .ssh import SSHTarget


def check_sftp(target: SSHTarget, path: str = ".") -> str:
    """Log in to `target` and list `path` (default: the login's home directory).

    Returns one line saying what was reached; raises TransferError (what failed, where, what to
    do) when the host cannot be reached, its key is not trusted, the credentials are refused or
    the path cannot be listed."""
    pool = SFTPPool(target)
    try:
        conn = pool.acquire()
        try:
            resolved = conn.wire.realpath(path or ".")
            entries = conn.wire.listdir_attrs(resolved)
        except (OSError, SFTPProtocolError) as exc:
            raise TransferError(
                f"logged in, but cannot list {path or '.'!r}: {getattr(exc, 'strerror', None) or exc}",
                target.display,
                "check the path and that the login may read it",
            ) from exc
        finally:
            conn.close()
    finally:
        pool.close()
    user = f" as {target.username}" if target.username else ""
    trust = "host key verified" if target.check_host_key else "host key NOT checked: the connection turned it off"
    count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
    return f"logged in to {target.host}:{target.port}{user} over {conn.client} ({trust}); {resolved} lists {count}"
