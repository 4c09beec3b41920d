"""The extras of an ssh/sftp Airflow connection that shape how its SSH connections are opened.

Named as Airflow's SSHHook names them, so an existing connection keeps meaning the same:
conn_timeout (timeout, its deprecated name), disabled_algorithms, ciphers, auth_timeout,
look_for_keys; compress and allow_host_key_change are read and deliberately not followed (a
log line says why). Ours: proxy_jump and proxy_command (SSHHook only takes ProxyCommand from
~/.ssh/config, which applies here too when neither is set). The table is in docs/bastions.md.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..errors import UsageError
from ..protocols.ssh import SSHTarget
from ..protocols.ssh_config import set_proxy

log = logging.getLogger(__name__)

TRUE = ("true", "1", "yes", "on")
# paramiko's algorithm kinds (Transport(disabled_algorithms=...)); OpenSSH's options for them in openssh.py
ALGORITHM_KINDS = ("ciphers", "macs", "kex", "keys", "pubkeys")


def flag(extra: dict, name: str) -> bool | None:
    """A boolean extra as SSHHook reads it (true/1/yes/on, JSON true), None when absent."""
    value = extra.get(name)
    if value is None:
        return None
    return str(value).strip().lower() in TRUE


def _seconds(extra: dict, name: str, where: str) -> float | None:
    value = extra.get(name)
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise UsageError(f"{where}: {name} must be positive seconds (got {value!r})", "", f'e.g. {{"{name}": 10}}')
    return seconds


def _json(value: Any) -> Any:
    # An extra given in a connection URI arrives as a string: it may hold JSON.
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _names(value: Any) -> list[str] | None:
    value = _json(value)
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def disabled_algorithms(extra: dict, where: str) -> dict[str, list[str]]:
    value = _json(extra.get("disabled_algorithms"))
    if value in (None, "", {}):
        return {}
    example = '{"disabled_algorithms": {"ciphers": ["aes128-gcm@openssh.com"], "pubkeys": ["rsa-sha2-512"]}}'
    if not isinstance(value, dict):
        raise UsageError(
            f"{where}: disabled_algorithms must map kinds to lists of names (got {value!r})", "", f"e.g. {example}"
        )
    out: dict[str, list[str]] = {}
    for kind, names in value.items():
        listed = _names(names)
        if kind not in ALGORITHM_KINDS or listed is None:
            raise UsageError(
                f"{where}: disabled_algorithms[{kind!r}] must be a list of names, kind one of "
                f"{', '.join(ALGORITHM_KINDS)}",
                "",
                f"e.g. {example}",
            )
        out[kind] = listed
    return out


def apply_extras(target: SSHTarget, extra: dict, where: str) -> None:
    """Set what the connection's extras say on `target` (its host, keys and host key already set)."""
    timeout = _seconds(extra, "conn_timeout", where)
    if timeout is None:
        timeout = _seconds(extra, "timeout", where)
        if timeout is not None:
            log.warning("%s: the extra 'timeout' is deprecated (as in SSHHook); use 'conn_timeout'", where)
    if timeout is not None:
        target.timeout = timeout
    auth_timeout = _seconds(extra, "auth_timeout", where)
    if auth_timeout is not None:
        target.auth_timeout = auth_timeout
    look = flag(extra, "look_for_keys")
    if look is not None:
        target.look_for_keys = look
    target.disabled_algorithms = disabled_algorithms(extra, where)
    if extra.get("ciphers") not in (None, "", []):
        ciphers = _names(extra["ciphers"])
        if not ciphers:
            raise UsageError(
                f"{where}: ciphers must be a list of cipher names (got {extra['ciphers']!r})",
                "",
                'e.g. {"ciphers": ["aes128-gcm@openssh.com", "aes128-ctr"]}',
            )
        target.ciphers = ciphers
    if flag(extra, "compress"):
        log.info(
            "%s: compress=true is ignored: SSH compression stays off (about 3x slower on data that does "
            "not compress, docs/bastions.md)",
            where,
        )
    if flag(extra, "allow_host_key_change"):
        log.warning(
            "%s: allow_host_key_change=true is ignored: a changed host key is always refused; update "
            "known_hosts (ssh-keygen -R HOST) or pin the new key in the host_key extra",
            where,
        )
    jump, command = extra.get("proxy_jump"), extra.get("proxy_command")
    set_proxy(
        target,
        jump=str(jump) if jump not in (None, "") else None,
        command=str(command) if command not in (None, "") else None,
    )
