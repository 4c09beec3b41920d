"""Hosts to profile and their names in the tuning library.

A library key is "localhost" for the machine that runs the transfer client
(the CLI's machine, the Airflow worker), else the SSH host name, with
":port" when the port is not 22. The login user is not part of the key: the
link and the disks are the same whoever logs in.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..protocols.endpoint import Endpoint, parse_url
from ..protocols.resolve import SSHOptions, sftp_target
from ..protocols.ssh import SSHTarget

LOCALHOST = "localhost"
_LOCAL_NAMES = ("localhost", "local", "127.0.0.1", "::1")


@dataclass
class ProfileHost:
    key: str
    target: SSHTarget | None = None  # None: this machine
    path: str | None = None  # directory the disk profiler writes in (None: home / temp directory)

    @property
    def is_local(self) -> bool:
        return self.target is None

    @property
    def ssh(self) -> SSHTarget:
        """The SSH target of a remote host (for what only runs over SSH)."""
        if self.target is None:
            raise UsageError(f"{self.key} is this machine, not an SSH host", self.key, "name an SSH host")
        return self.target


def key_of_target(target: SSHTarget) -> str:
    return target.host if target.port == 22 else f"{target.host}:{target.port}"


def key_of_endpoint(endpoint: Endpoint) -> str:
    """The library key of the host an endpoint lives on."""
    if endpoint.scheme == "file" or endpoint.target is None:
        return LOCALHOST
    return key_of_target(endpoint.target)


def from_endpoint(endpoint: Endpoint) -> ProfileHost:
    if endpoint.scheme == "file" or endpoint.target is None:
        return ProfileHost(LOCALHOST, None, endpoint.path)
    path = endpoint.path if endpoint.path not in ("", ".") else None
    return ProfileHost(key_of_target(endpoint.target), endpoint.target, path)


def parse_host(
    spec: str, ssh_config: str | None = None, identity: str | None = None, known_hosts: str | None = None
) -> ProfileHost:
    """HOST of `airflow-transfer profile`: localhost, a local directory, file:///dir or sftp://[user@]host[:port][/dir]."""
    if not spec:
        raise UsageError("empty host", "", "give localhost, a directory or sftp://[user@]host[:port][/dir]")
    if spec.lower() in _LOCAL_NAMES:
        return ProfileHost(LOCALHOST)
    if "://" not in spec and "/" not in spec and "." not in spec:
        raise UsageError(
            f"{spec!r} is neither localhost, a directory nor an sftp:// URL",
            spec,
            f"write sftp://{spec} for an SSH host, or ./{spec} for a local directory",
        )
    parsed = parse_url(spec)
    if parsed.scheme == "file":
        return ProfileHost(LOCALHOST, None, parsed.path)
    if parsed.scheme != "sftp":  # the profilers run over SSH only
        raise UsageError(
            f"cannot profile a {parsed.scheme}:// host",
            spec,
            "give localhost, a directory or sftp://[user@]host[:port][/dir]",
        )
    target = sftp_target(parsed, SSHOptions(ssh_config=ssh_config, identity=identity, known_hosts=known_hosts))
    path = parsed.path if parsed.path not in ("", ".") else None
    return ProfileHost(key_of_target(target), target, path)
