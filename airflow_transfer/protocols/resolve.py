"""URL -> Endpoint, in one place: the CLI, the Airflow hook (without a connection) and the
session layer (alternates, replicas) all resolve through `resolve_endpoint`.

    path, file://      Endpoint("file", absolute path)
    sftp://            the host as OpenSSH's client would see it: ~/.ssh/config (or
                       SSHOptions.ssh_config) for HostName, Port, User, IdentityFile,
                       UserKnownHostsFile, StrictHostKeyChecking, ConnectTimeout, ProxyJump,
                       ProxyCommand (protocols/ssh_config.py); SSHOptions win over it
    any://             the host-protocol library picks a concrete URL (hostlib), which is
                       resolved again; the other offered protocols are the alternates
    ftp, http(s), fsspec protocols
                       host, port and user from the URL; credentials from the protocol's
                       own sources (netrc, environment, fsspec config)

An Airflow connection (hooks/endpoint.py) builds its sftp target from the connection
instead; everything else it hands here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from .endpoint import Endpoint, ParsedURL, parse_url
from .hostlib import resolve_any_cached
from .ssh import SSHTarget
from .ssh_config import from_ssh_config


@dataclass(frozen=True)
class SSHOptions:
    """What a caller sets on top of ~/.ssh/config for sftp URLs (the CLI's --ssh-config,
    --identity, --known-hosts, --stall-timeout, --ssh-client); None leaves the default."""

    ssh_config: str | None = None
    identity: str | None = None
    known_hosts: str | None = None
    stall_timeout: float | None = None  # seconds an SFTP request may go unanswered
    client: str | None = None  # auto, openssh or paramiko


def resolve_endpoint(
    url: str,
    ssh: SSHOptions | None = None,
    *,
    store_url: str | None = None,
    writable: bool = False,
    alternates: list[str] | None = None,
) -> Endpoint:
    """The Endpoint for `url`.

    store_url: where the host-protocol library caches any:// probes (None: the default store).
    writable: the URL is a destination (any:// then skips read-only protocols).
    alternates: when given, an any:// URL appends the other offered protocols to it, in
    preference order, as ``scheme://host`` (the fall-back list of a copy).
    """
    parsed = parse_url(url)
    if parsed.scheme == "file":
        return Endpoint("file", parsed.path)
    if parsed.scheme == "any":
        urls = resolve_any_cached(url, store_url, writable=writable)
        if alternates is not None:
            alternates.extend(_scheme_and_host(u) for u in urls[1:])
        return resolve_endpoint(urls[0], ssh, store_url=store_url, writable=writable)
    if parsed.scheme == "sftp":
        return Endpoint("sftp", parsed.path, sftp_target(parsed, ssh or SSHOptions()))
    return Endpoint(parsed.scheme, parsed.path, host=parsed.host, port=parsed.port, user=parsed.user)


def sftp_target(parsed: ParsedURL, ssh: SSHOptions) -> SSHTarget:
    """The SSHTarget of a parsed sftp:// URL: ~/.ssh/config, then `ssh` on top."""
    if parsed.host is None:  # parse_url refuses sftp URLs without one; a hand-made ParsedURL may lack it
        raise UsageError("sftp URL without a host", parsed.path, "use sftp://[user@]host[:port]/path")
    target = from_ssh_config(parsed.host, parsed.port, parsed.user, ssh.ssh_config, ssh.identity, ssh.known_hosts)
    if ssh.stall_timeout is not None:
        if not 0 < ssh.stall_timeout < float("inf"):
            raise UsageError(
                f"--stall-timeout must be positive seconds (got {ssh.stall_timeout})", "", "e.g. --stall-timeout 60"
            )
        target.idle_timeout = ssh.stall_timeout
    target.client = ssh.client or target.client
    return target


def _scheme_and_host(url: str) -> str:
    """'ftp://user@host:2121/data' -> 'ftp://user@host:2121' (the form alt_protocols takes)."""
    scheme, _, rest = url.partition("//")
    return scheme + "//" + rest.split("/", 1)[0]
