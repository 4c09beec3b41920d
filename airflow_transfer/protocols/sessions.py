"""Endpoints from URLs, and which engine can move a pair of them.

Protocol-level questions only: choosing and building the session that moves a
copy (the pipelined engine, the generic backend path, or the fall-back over
several protocols) is job.open_session's business, one layer up.
"""

from __future__ import annotations

from . import backends
from .endpoint import Endpoint, parse_url

ENGINE_SCHEMES = {"file", "sftp"}


def endpoint_from_url(url: str) -> Endpoint:
    """An Endpoint from a URL with default SSH settings (~/.ssh/config); the CLI passes its own."""
    parsed = parse_url(url)
    if parsed.scheme == "file":
        return Endpoint("file", parsed.path)
    if parsed.scheme == "any":
        from .hostlib import resolve_any_cached

        return endpoint_from_url(resolve_any_cached(url)[0])
    if parsed.scheme == "sftp":
        from .ssh import from_ssh_config

        return Endpoint("sftp", parsed.path, from_ssh_config(parsed.host, parsed.port, parsed.user))
    return Endpoint(parsed.scheme, parsed.path, host=parsed.host, port=parsed.port, user=parsed.user)


def uses_engine(src: Endpoint, dst: Endpoint) -> bool:
    """Whether the pipelined SFTP engine moves src -> dst: one end local, the other local or
    SFTP, and no test/benchmark wrapper on the remote protocol's backend (a wrapped backend is
    only seen by the generic path)."""
    schemes = {src.scheme, dst.scheme}
    if not schemes <= ENGINE_SCHEMES or src.scheme == dst.scheme == "sftp":
        return False
    return not any(backends.wrapped(s) for s in schemes if s != "file")
