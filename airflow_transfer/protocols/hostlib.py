"""The host-protocol library: which protocols a host offers, found by probing, cached in the store.

A probe is a TCP connect plus that protocol's own handshake, so an open port
that speaks something else does not count: SSH key exchange (no login) for
sftp, the 220 greeting for ftp, a HEAD request's status line for http(s)
(after the TLS handshake for https). Probes of one host run in parallel with a
short timeout, so a host with nothing open is known in seconds. Results are
kept in the store with a TTL (at_host_protocols) and reused until they expire.

`any://[user@]host/path?sftp=2222&ftp=2121&prefer=sftp,ftp` names a host and
a path and lets this library pick: the first protocol in the preference order
that the host offers (the others, in order, become the fall-back list).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import TransferError, UsageError

DEFAULT_PORTS = {"sftp": 22, "ftp": 21, "https": 443, "http": 80}
DEFAULT_PREFERENCE = ("sftp", "ftp", "https", "http")
PROBE_TIMEOUT = 3.0
DEFAULT_TTL = 600.0


@dataclass
class ProbeResult:
    host: str
    protocol: str
    port: int
    available: bool
    detail: str
    millis: int

    def as_dict(self) -> dict:
        out = asdict(self)
        out["probe_ms"] = out.pop("millis")  # the unit in the name, as the JSON readers expect it
        return out


def _handshake(protocol: str, sock: socket.socket, host: str, timeout: float) -> str:
    sock.settimeout(timeout)
    if protocol == "sftp":
        # heavy: paramiko costs ~0.1 s at import; ftp and http probes need none of it
        from .paramiko_lib import paramiko

        t = paramiko.Transport(sock)
        try:
            t.start_client(timeout=timeout)  # version exchange + key exchange, no login
            return t.remote_version
        finally:
            t.close()
    if protocol == "ftp":
        line = sock.makefile("rb").readline(512).decode("latin-1").strip()
        if not line.startswith("220"):
            raise ConnectionError(f"not an FTP greeting: {line[:60]!r}")
        return line[:120]
    if protocol in ("http", "https"):
        if protocol == "https":
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # availability only; transfers verify certificates
            sock = ctx.wrap_socket(sock, server_hostname=host)
        sock.sendall(f"HEAD / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        line = sock.makefile("rb").readline(512).decode("latin-1").strip()
        if not line.startswith("HTTP/"):
            raise ConnectionError(f"not an HTTP reply: {line[:60]!r}")
        return line[:120]
    raise UsageError(f"cannot probe protocol {protocol!r}", host, f"use one of {', '.join(DEFAULT_PORTS)}")


def probe(host: str, protocol: str, port: int | None = None, timeout: float = PROBE_TIMEOUT) -> ProbeResult:
    """Connect and handshake once; never raises for an unavailable protocol."""
    port = port or DEFAULT_PORTS.get(protocol, 0)
    t0 = time.monotonic()
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as exc:
        return ProbeResult(host, protocol, port, False, f"cannot resolve host: {exc}", 0)
    except TimeoutError:
        return ProbeResult(
            host, protocol, port, False, f"connect timed out after {timeout:.0f}s", int((time.monotonic() - t0) * 1000)
        )
    except OSError as exc:
        return ProbeResult(
            host, protocol, port, False, f"connect failed: {exc.strerror or exc}", int((time.monotonic() - t0) * 1000)
        )
    try:
        detail = _handshake(protocol, sock, host, timeout)
        ok = True
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything else means "does not speak it"
        detail, ok = f"handshake failed: {exc.__class__.__name__}: {exc}"[:300], False
    finally:
        try:
            sock.close()
        except OSError:
            pass
    return ProbeResult(host, protocol, port, ok, detail, int((time.monotonic() - t0) * 1000))


def probe_all(
    host: str, protocols: list[str], ports: dict[str, int] | None = None, timeout: float = PROBE_TIMEOUT
) -> list[ProbeResult]:
    """Probe several protocols of one host at once (results in the order asked)."""
    ports = ports or {}
    out: list[ProbeResult | None] = [None] * len(protocols)

    def one(i: int, proto: str) -> None:
        out[i] = probe(host, proto, ports.get(proto), timeout)

    threads = [threading.Thread(target=one, args=(i, p), daemon=True) for i, p in enumerate(protocols)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout * 3 + 5)
    return [
        r or ProbeResult(host, p, ports.get(p) or DEFAULT_PORTS.get(p, 0), False, "probe did not finish", 0)
        for r, p in zip(out, protocols)
    ]


class HostProtocolLibrary:
    """Cached probe results (the store's at_host_protocols); store=None keeps nothing between calls."""

    def __init__(self, store=None, ttl_s: float = DEFAULT_TTL, timeout: float = PROBE_TIMEOUT) -> None:
        self.store, self.ttl_s, self.timeout = store, ttl_s, timeout

    def offered(
        self,
        host: str,
        protocols: list[str] | tuple[str, ...] = DEFAULT_PREFERENCE,
        ports: dict[str, int] | None = None,
        refresh: bool = False,
    ) -> list[ProbeResult]:
        """Probe results for host in the order of `protocols`, from the cache while fresh."""
        ports = ports or {}
        want = list(protocols)
        cached: dict[str, ProbeResult] = {}
        if self.store is not None and not refresh:
            for row in self.store.host_protocols(host, fresh_only=True):
                port = ports.get(row["protocol"]) or DEFAULT_PORTS.get(row["protocol"], 0)
                if row["protocol"] in want and row["port"] == port:
                    cached[row["protocol"]] = ProbeResult(
                        host, row["protocol"], row["port"], row["available"], row["detail"] or "", row["probe_ms"] or 0
                    )
        missing = [p for p in want if p not in cached]
        for r in probe_all(host, missing, ports, self.timeout) if missing else []:
            cached[r.protocol] = r
            if self.store is not None:
                self.store.put_host_protocol(
                    host, r.protocol, r.port, r.available, detail=r.detail, ttl_s=self.ttl_s, probe_ms=r.millis
                )
        return [cached[p] for p in want]


@dataclass
class AnyURL:
    host: str
    user: str | None
    path: str
    ports: dict[str, int]
    prefer: list[str]

    def url_for(self, protocol: str) -> str:
        port = self.ports.get(protocol)
        netloc = (f"{self.user}@" if self.user else "") + self.host + (f":{port}" if port else "")
        return f"{protocol}://{netloc}{self.path}"


def parse_any(url: str, default_prefer: list[str] | None = None) -> AnyURL:
    try:
        parts = urlsplit(url)
        parts.hostname  # noqa: B018 - validates [IPv6] brackets
    except ValueError as exc:
        raise UsageError(f"malformed URL: {exc}", url, "use any://[user@]host/path") from exc
    if parts.scheme.lower() != "any" or not parts.hostname:
        raise UsageError("not an any:// URL with a host", url, "use any://[user@]host/path")
    if parts.password is not None:
        raise UsageError("passwords in URLs are not accepted", parts.hostname, "use keys or netrc")
    q = parse_qs(parts.query)
    ports = {}
    for proto in DEFAULT_PORTS:
        if proto in q:
            try:
                ports[proto] = int(q[proto][0])
            except ValueError as exc:
                raise UsageError(f"bad port for {proto}", url, f"use ?{proto}=PORT") from exc
            if not 0 < ports[proto] <= 65535:
                raise UsageError(f"port for {proto} out of range", url, f"use ?{proto}=PORT with PORT 1-65535")
    prefer = [p.strip().lower() for p in q.get("prefer", [""])[0].split(",") if p.strip()] or list(
        default_prefer or DEFAULT_PREFERENCE
    )
    unknown = [p for p in prefer if p not in DEFAULT_PORTS]
    if unknown:
        raise UsageError(
            f"cannot choose among unknown protocols {unknown}", url, f"use some of {', '.join(DEFAULT_PORTS)}"
        )
    return AnyURL(
        parts.hostname, unquote(parts.username) if parts.username else None, unquote(parts.path) or "/", ports, prefer
    )


def resolve_any(
    url: str, library: HostProtocolLibrary, *, writable: bool = False, default_prefer: list[str] | None = None
) -> list[str]:
    """Concrete URLs for an any:// URL: every offered protocol, in preference order (first = use).

    writable: the URL is a destination, so read-only protocols (http, https) are not candidates."""
    a = parse_any(url, default_prefer)
    prefer = [p for p in a.prefer if not (writable and p in ("http", "https"))]
    results = library.offered(a.host, prefer, a.ports)
    ok = [a.url_for(r.protocol) for r in results if r.available]
    if not ok:
        tried = "; ".join(f"{r.protocol}:{r.port} {r.detail}" for r in results)
        raise TransferError(
            f"no protocol is available on {a.host} (tried {tried})",
            url,
            "check that the host is up and a server (sshd, ftpd, web server) runs on it",
        )
    return ok


def resolve_any_cached(url: str, store_url: str | None = None, *, writable: bool = False) -> list[str]:
    """resolve_any with the library kept in the store (probes are reused until their TTL ends)."""
    with _cached_library(store_url) as library:
        return resolve_any(url, library, writable=writable)


def probe_round(
    host: str, protocols: list[str], ports: dict[str, int], mode: str, store_url: str | None = None
) -> tuple[bool, list[dict]]:
    """One fresh probe of every protocol, refreshing the library in the store at `store_url`;
    (any (mode "any") or all (mode "all") of them answered, the results as dicts).
    ProtocolAvailableSensor pokes and ProtocolAvailableTrigger polls with this."""
    with _cached_library(store_url) as library:
        results = library.offered(host, protocols, ports, refresh=True)
    ok = [r.available for r in results]
    return (all(ok) if mode == "all" else any(ok)), [r.as_dict() for r in results]


def describe_round(results: list[dict]) -> str:
    """One probe round (probe_round's dicts) as a log line: "sftp:22 up; ftp:21 connect failed: ..."."""
    return "; ".join(f"{r['protocol']}:{r['port']} {'up' if r['available'] else r['detail']}" for r in results)


@contextmanager
def _cached_library(store_url: str | None):
    """The library over the store at `store_url` (the default store when None), or an uncached
    one when the store cannot be opened: probing must not depend on the store."""
    store = None
    try:
        # heavy: the store imports SQLAlchemy and pyarrow (~1 s), which probing without a cache never needs
        from ..store import Store

        store = Store.open(store_url)
    except Exception:  # noqa: BLE001 - no store: probe without a cache
        store = None
    try:
        yield HostProtocolLibrary(store)
    finally:
        if store is not None:
            store.close()
