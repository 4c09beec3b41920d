"""Alternate protocols for one remote end (paper 003, Stork): which endpoints, and whether one answers.

The protocol-level half of the fall-back: turning `alt_protocols` entries into
endpoints, naming a protocol, and probing one (connect + handshake/login).
Running a copy over them, counting failures and switching is done one layer
up, by engine/fallback.py's FallbackSession, which job.open_session chooses.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit

from ..errors import UsageError
from . import backends
from .endpoint import Endpoint

DEFAULT_THRESHOLD = 3
DEFAULT_PROBE_INTERVAL = 5.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def protocol_name(ep: Endpoint) -> str:
    return ep.scheme


def alternate_endpoints(remote: Endpoint, specs: list[str], make: Callable[[str], Endpoint]) -> list[Endpoint]:
    """Endpoints for alt_protocols entries: a scheme ("ftp") means the same host, user and path
    on that protocol's default port; a URL ("ftp://user@host:2121") overrides those parts, and
    its path, when it has one, replaces the remote path."""
    out = []
    host = remote.target.host if remote.target else remote.host
    user = remote.target.username if remote.target else remote.user
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        if "://" in spec:
            parts = urlsplit(spec)
            scheme = parts.scheme.lower()
            h = parts.hostname or host
            u = parts.username or user
            port = parts.port
            path = parts.path if parts.path not in ("", "/") else remote.path
        else:
            scheme, h, u, port, path = spec.lower(), host, user, None, remote.path
        if not h:
            raise UsageError(f"alternate protocol {spec!r} needs a host", spec, "give it as scheme://host[:port]")
        netloc = (f"{u}@" if u else "") + h + (f":{port}" if port else "")
        out.append(make(f"{scheme}://{netloc}{path}"))
    return out


def probe(ep: Endpoint) -> str | None:
    """None when the protocol answers (connect + handshake/login), else why not."""
    try:
        b = backends.connect(ep)
    except Exception as exc:  # noqa: BLE001 - any failure means "not available"
        return f"{exc.__class__.__name__}: {exc}"
    try:
        b.close()
    except Exception:  # noqa: BLE001 - the probe succeeded; a failing close does not change that
        pass
    return None
