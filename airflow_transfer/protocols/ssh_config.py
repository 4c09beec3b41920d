"""SSH hosts as OpenSSH's client would see them: ~/.ssh/config, ProxyJump and ProxyCommand.

`from_ssh_config` resolves a host of an sftp:// URL (the CLI, the hook without a connection).
`set_proxy` routes any SSHTarget through jump hosts or a proxy command, given in OpenSSH's own
syntax or taken from ~/.ssh/config (the Airflow connection's way, hooks/endpoint.py).

A jump host is resolved through the same config file (its HostName, Port, User, IdentityFile,
UserKnownHostsFile, StrictHostKeyChecking and, for the first hop, its own ProxyJump or
ProxyCommand). What the file does not say is taken from the far host: its keys (never its
password: a password is sent to the server, a key only proves it is held), its known_hosts
files, a switched-off host key check and its connect timeout.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from ..errors import UsageError
from .ssh import SSHTarget, local_user

log = logging.getLogger(__name__)

# A chain that long is a loop in the config (a jump host whose own ProxyJump leads back).
MAX_HOPS = 8
_HOP_RE = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@\s/]+)@)?(?P<host>\[[^\]\s]+\]|[^:@\s/\[\]]+)(?::(?P<port>\d+))?/?$")


def read_config(ssh_config: str | None = None) -> Any:
    """The parsed config file (paramiko.SSHConfig): `ssh_config`, else ~/.ssh/config; None when absent."""
    if ssh_config and not os.path.exists(ssh_config):
        raise UsageError(f"SSH config file not found: {ssh_config}", "", "check the --ssh-config path")
    path = ssh_config or os.path.expanduser("~/.ssh/config")
    if not os.path.exists(path) or _says_nothing(path):
        return None
    # heavy: paramiko takes 0.05-0.1 s of CPU to import. Without a config file to parse, the
    # command line connects and starts its `ssh` helpers that much sooner: it imports paramiko
    # only once they are on their way (on a WAN, while the TCP handshake travels).
    from .paramiko_lib import paramiko

    try:
        return paramiko.SSHConfig.from_path(path)
    except Exception as exc:
        raise UsageError(f"cannot parse SSH config: {exc}", path, "fix the file or pass --ssh-config") from exc


def _says_nothing(path: str) -> bool:
    """Whether a config file holds only blank lines and comments (an empty file given with
    --ssh-config, as the benchmarks give one): nothing to look up. Unreadable: left to paramiko."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return all(not line.strip() or line.lstrip().startswith("#") for line in f)
    except OSError:
        return False


def _lookup(config: Any, host: str) -> dict:
    if config is None:
        return {"hostname": host}
    try:
        return dict(config.lookup(host))
    except Exception as exc:  # paramiko raises plain Exceptions for Match and canonicalization errors
        raise UsageError(f"cannot look {host} up in the SSH config: {exc}", host, "fix the file") from exc


def from_ssh_config(
    host: str,
    port: int | None,
    username: str | None,
    ssh_config: str | None = None,
    identity: str | None = None,
    known_hosts: str | None = None,
) -> SSHTarget:
    """Resolve a host the way OpenSSH's client would: ~/.ssh/config (or a given file) supplies
    HostName, Port, User, IdentityFile, UserKnownHostsFile, StrictHostKeyChecking, ProxyJump
    and ProxyCommand; command-line values win over the file."""
    if identity and not os.path.exists(identity):
        raise UsageError(f"identity file not found: {identity}", "", "check the --identity path")
    config = read_config(ssh_config)
    opts = _lookup(config, host)
    target = _target(opts, host, port, username, identity, known_hosts)
    _proxy_from_config(target, opts, config, depth=0)
    return target


def _target(
    opts: dict, host: str, port: int | None, username: str | None, identity: str | None, known_hosts: str | None
) -> SSHTarget:
    target = SSHTarget(host=opts.get("hostname", host))
    target.port = port or int(opts.get("port", 22))
    target.username = username or opts.get("user") or local_user()
    keys = [identity] if identity else [os.path.expanduser(k) for k in opts.get("identityfile", [])]
    target.key_filenames = [k for k in keys if k]
    target.known_hosts = (
        [known_hosts]
        if known_hosts
        else [os.path.expanduser(p) for p in str(opts.get("userknownhostsfile", "~/.ssh/known_hosts")).split()]
    )
    strict = str(opts.get("stricthostkeychecking", "yes")).lower()
    target.check_host_key = strict not in ("no", "off")
    target.look_for_keys = not identity
    if "connecttimeout" in opts:
        try:
            target.timeout = float(opts["connecttimeout"])
        except ValueError:
            raise UsageError(
                f"ConnectTimeout must be seconds (got {opts['connecttimeout']!r})", host, "fix the SSH config"
            ) from None
    return target


def _proxy_from_config(target: SSHTarget, opts: dict, config: Any, depth: int) -> None:
    jump = str(opts.get("proxyjump") or "").strip()
    command = opts.get("proxycommand")  # paramiko has expanded %h %p %r and dropped "none"
    if jump.lower() == "none":
        jump = ""
    if jump and command:
        # OpenSSH keeps whichever comes first in the file; paramiko no longer knows which did.
        log.warning("the SSH config gives %s both ProxyJump and ProxyCommand; using ProxyJump %s", target.display, jump)
    if jump:
        target.jump = jump_chain(jump, config, target, depth)
    elif command:
        target.proxy_command = str(command)


def jump_chain(spec: str, config: Any, target: SSHTarget, depth: int = 0) -> SSHTarget:
    """The last jump host of a ProxyJump list ("[user@]host[:port],..."), each hop behind the one before."""
    hops = [h.strip() for h in spec.split(",") if h.strip()]
    if not hops:
        raise UsageError(f"empty ProxyJump {spec!r}", target.display, "give [user@]host[:port][,...]")
    if depth + len(hops) > MAX_HOPS:
        raise UsageError(
            f"more than {MAX_HOPS} jump hosts on the way to {target.host}",
            target.display,
            "check the SSH config for a ProxyJump that leads back to itself",
        )
    previous: SSHTarget | None = None
    for hop_spec in hops:
        m = _HOP_RE.match(hop_spec)
        if m is None:
            raise UsageError(
                f"cannot read jump host {hop_spec!r}", target.display, "write it as [user@]host[:port], comma-separated"
            )
        name = m["host"].strip("[]")
        opts = _lookup(config, name)
        hop = _target(opts, name, int(m["port"]) if m["port"] else None, m["user"], None, None)
        if previous is None:
            _proxy_from_config(hop, opts, config, depth + len(hops))
        else:
            hop.jump = previous
        _inherit(hop, target, configured_keys=bool(opts.get("identityfile")))
        previous = hop
    assert previous is not None
    return previous


def _inherit(hop: SSHTarget, target: SSHTarget, configured_keys: bool) -> None:
    """What a jump host takes from the far host when its own config entry does not say."""
    if not configured_keys:
        hop.key_filenames = list(target.key_filenames)
        hop.private_key = target.private_key
        hop.passphrase = target.passphrase
        hop.look_for_keys = target.look_for_keys
    hop.known_hosts = list(dict.fromkeys([*hop.known_hosts, *target.known_hosts]))
    if not target.check_host_key:  # the connection explicitly switched checks off
        hop.check_host_key = False
    hop.timeout = min(hop.timeout, target.timeout)
    hop.idle_timeout = target.idle_timeout


def expand_tokens(command: str, target: SSHTarget) -> str:
    """OpenSSH's ProxyCommand tokens: %h host, %p port, %r remote user, %n the name given, %% a %."""
    values = {
        "h": target.host,
        "p": str(target.port),
        "r": target.username or local_user(),
        "n": target.host,
        "%": "%",
    }

    def one(m: re.Match) -> str:
        if m[1] not in values:
            raise UsageError(
                f"unknown token %{m[1]} in proxy command {command!r}", target.display, "use %h, %p, %r, %n or %%"
            )
        return values[m[1]]

    return re.sub(r"%(.)", one, command)


def set_proxy(
    target: SSHTarget,
    *,
    jump: str | None = None,
    command: str | None = None,
    ssh_config: str | None = None,
    alias: str | None = None,
) -> None:
    """Route `target` through jump hosts (ProxyJump syntax) or a proxy command (tokens expanded here).

    With neither, the config file's ProxyJump or ProxyCommand for `alias` (default: the target's
    host) applies, as Airflow's SSHHook reads ProxyCommand from ~/.ssh/config. "none" for either
    means directly."""
    if jump and command:
        raise UsageError(
            "both a jump host and a proxy command are given", target.display, "keep proxy_jump or proxy_command"
        )
    target.jump, target.proxy_command = None, None
    if jump and jump.strip().lower() != "none":
        target.jump = jump_chain(jump, read_config(ssh_config), target)
    elif command and command.strip().lower() != "none":
        target.proxy_command = expand_tokens(command, target)
    elif not jump and not command:
        config = read_config(ssh_config)
        if config is not None:
            _proxy_from_config(target, _lookup(config, alias or target.host), config, depth=0)
