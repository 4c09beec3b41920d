"""Storage backends behind one interface (base.Backend); `connect(endpoint)` opens one.

file   local filesystem                      LocalBackend
sftp   paramiko over our verified transport  SFTPBackend
ftp    ftplib                                FTPBackend
http(s) source only, Range reads             HTTPBackend
other  any fsspec protocol (s3, memory, ...) FsspecBackend
"""

from __future__ import annotations

from collections.abc import Callable

from ..endpoint import FSSPEC_SCHEMES
from .base import Backend, Capabilities, FileInfo, Listing
from .local import LocalBackend

__all__ = [
    "Backend",
    "Capabilities",
    "FileInfo",
    "Listing",
    "connect",
    "capabilities",
    "register_wrapper",
    "FSSPEC_SCHEMES",
]

# Fault injection and instrumentation: scheme -> wrapper(backend) -> backend (tests, benchmarks).
_wrappers: dict[str, Callable[[Backend], Backend]] = {}


def register_wrapper(scheme: str, wrapper: Callable[[Backend], Backend] | None) -> None:
    if wrapper is None:
        _wrappers.pop(scheme, None)
    else:
        _wrappers[scheme] = wrapper


def wrapped(scheme: str) -> bool:
    return scheme in _wrappers


def connect(endpoint) -> Backend:
    """One new connection for an Endpoint (protocols.endpoint)."""
    scheme = endpoint.scheme
    if scheme == "file":
        b: Backend = LocalBackend()
    elif scheme == "sftp":
        # heavy: paramiko costs ~0.1 s at import; only sftp backends need it
        from .sftp import SFTPBackend

        b = SFTPBackend(endpoint.target)
    elif scheme == "ftp":
        # heavy: ftplib and netrc load for ftp endpoints only; an SFTP copy's start skips them (tests/test_start_imports.py)
        from .ftp import FTPBackend

        b = FTPBackend(endpoint.host, endpoint.port, endpoint.user)
    elif scheme == "replicas":
        # lazy: replicas imports backends.base, which runs this __init__ first (a cycle at the top)
        from ..replicas import ReplicaSource

        b = ReplicaSource(endpoint.options["set"], connect)  # it opens each replica through this function
    elif scheme in ("http", "https"):
        # heavy: http.client, email and html.parser load for http(s) endpoints only (tests/test_start_imports.py)
        from .http import HTTPBackend

        b = HTTPBackend(scheme, endpoint.host, endpoint.port, verify_tls=(endpoint.options or {}).get("verify", True))
    else:
        # heavy: fsspec costs ~0.04 s at import; only object-store and other fsspec schemes need it
        from .fsspec_backend import FsspecBackend

        b = FsspecBackend(scheme, endpoint.options)
    w = _wrappers.get(scheme)
    return w(b) if w else b


def capabilities(scheme: str) -> Capabilities:
    """What a scheme can do, without connecting."""
    if scheme == "file":
        return LocalBackend.caps
    if scheme == "sftp":
        # heavy: paramiko costs ~0.1 s at import; only sftp backends need it
        from .sftp import SFTPBackend

        return SFTPBackend.caps
    if scheme == "ftp":
        # heavy: ftplib and netrc load for ftp endpoints only; an SFTP copy's start skips them (tests/test_start_imports.py)
        from .ftp import FTPBackend

        return FTPBackend.caps
    if scheme in ("http", "https"):
        # heavy: http.client, email and html.parser load for http(s) endpoints only (tests/test_start_imports.py)
        from .http import HTTPBackend

        return HTTPBackend.caps
    if scheme == "replicas":
        return Capabilities(write=False, rename=False)
    # heavy: fsspec costs ~0.04 s at import; only object-store and other fsspec schemes need it
    from .fsspec_backend import _OBJECT_STORES

    obj = scheme in _OBJECT_STORES
    return Capabilities(rename=not obj, atomic_put=obj)
