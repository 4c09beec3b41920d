"""Which session moves a pair of endpoints: the one place that decides it."""

from __future__ import annotations

from typing import Any

from ..protocols.endpoint import Endpoint
from ..protocols.pool import SFTPPool
from ..protocols.sessions import uses_engine
from .accounting import Stats
from .backend_copy import BackendSession
from .retry import RetryPolicy
from .session import Session
from .transfer import TransferSession


def session_for(
    src: Endpoint,
    dst: Endpoint,
    *,
    stats: Stats | None,
    skip_existing: bool,
    retry: RetryPolicy,
    verify: str | None,
    engine_options: dict[str, Any] | None = None,
    pool: SFTPPool | None = None,
) -> Session:
    """The pipelined engine for a pair it moves (local <-> SFTP, `engine_options` and the warm
    `pool` apply there), else the generic path over the protocols' backends."""
    common: dict[str, Any] = {"stats": stats, "skip_existing": skip_existing, "retry": retry, "verify": verify}
    if uses_engine(src, dst):
        return TransferSession(src, dst, pool=pool, **common, **(engine_options or {}))
    return BackendSession(src, dst, **common)
