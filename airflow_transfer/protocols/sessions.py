"""Which session moves a copy: the pipelined SFTP engine, the generic backend path, or the
fall-back controller over several protocols (job.run_copy asks here)."""

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
    schemes = {src.scheme, dst.scheme}
    if not schemes <= ENGINE_SCHEMES or src.scheme == dst.scheme == "sftp":
        return False
    return not any(backends.wrapped(s) for s in schemes if s != "file")


def engine_options(req) -> dict:
    """The pipelined engine's verification options a CopyRequest carries (those it has)."""
    out = {}
    for name, key in (("verify_mode", "verify_mode"), ("verify_block_size", "block_size"),
                      ("verify_threads", "verify_threads")):
        if getattr(req, name, None) is not None:
            out[key] = getattr(req, name)
    return out


def open_session(req, stats):
    """A session for CopyRequest `req` (TransferSession, BackendSession or FallbackSession)."""
    if getattr(req, "replicas", None):
        from ..engine.backend_copy import BackendSession
        from .replicas import ReplicaSet

        make = req.make_endpoint or endpoint_from_url
        rs = ReplicaSet([req.src, *[make(u) for u in req.replicas]], drop_after=req.switch_after)
        src = Endpoint("replicas", req.src.path, options={"set": rs})
        session = BackendSession(src, req.dst, stats=stats, skip_existing=req.skip_existing, retry=req.retry,
                                 verify=req.verify)
        session.summary_extra = lambda: {"replicas": rs.summary()}
        return session
    if req.alt_protocols:
        from .fallback import FallbackSession, alternate_endpoints

        side = "dst" if req.dst.scheme != "file" else "src"
        primary = req.dst if side == "dst" else req.src
        alts = alternate_endpoints(primary, list(req.alt_protocols), req.make_endpoint or endpoint_from_url)
        return FallbackSession(req.src, req.dst, [primary, *alts], side=side, stats=stats,
                               skip_existing=req.skip_existing, retry=req.retry, verify=req.verify,
                               threshold=req.switch_after, probe_interval=req.probe_interval, log=req.log,
                               engine_options=engine_options(req))
    if uses_engine(req.src, req.dst):
        from ..engine.transfer import TransferSession

        return TransferSession(req.src, req.dst, stats=stats, skip_existing=req.skip_existing,
                               retry=req.retry, verify=req.verify, pool=req.pool,
                               **engine_options(req))
    from ..engine.backend_copy import BackendSession

    return BackendSession(req.src, req.dst, stats=stats, skip_existing=req.skip_existing, retry=req.retry,
                          verify=req.verify)
