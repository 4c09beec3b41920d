"""Which session moves a pair of endpoints: the one place that decides it."""

from __future__ import annotations

from typing import Any, Unpack

from ..protocols.endpoint import Endpoint
from ..protocols.pool import SFTPPool
from ..protocols.sessions import uses_engine
from .backend_copy import BackendSession
from .session import Session, SessionOptions
from .transfer import TransferSession


def session_for(
    src: Endpoint,
    dst: Endpoint,
    *,
    engine_options: dict[str, Any] | None = None,
    pool: SFTPPool | None = None,
    **opts: Unpack[SessionOptions],
) -> Session:
    """The pipelined engine for a pair it moves (local <-> SFTP, `engine_options` and the warm
    `pool` apply there), else the generic path over the protocols' backends."""
    if uses_engine(src, dst):
        return TransferSession(src, dst, pool=pool, **opts, **(engine_options or {}))
    return BackendSession(src, dst, **opts)
