"""Which engine can move a pair of endpoints.

Protocol-level questions only: choosing and building the session that moves a
copy (the pipelined engine, the generic backend path, or the fall-back over
several protocols) is job.open_session's business, one layer up.
"""

from __future__ import annotations

from . import backends
from .endpoint import Endpoint

ENGINE_SCHEMES = {"file", "sftp"}


def uses_engine(src: Endpoint, dst: Endpoint) -> bool:
    """Whether the pipelined SFTP engine moves src -> dst: one end local, the other local or
    SFTP, and no test/benchmark wrapper on the remote protocol's backend (a wrapped backend is
    only seen by the generic path)."""
    schemes = {src.scheme, dst.scheme}
    if not schemes <= ENGINE_SCHEMES or src.scheme == dst.scheme == "sftp":
        return False
    return not any(backends.wrapped(s) for s in schemes if s != "file")
