"""Command-line arguments -> Endpoint, for every subcommand (cli.py, cmd_copy_list.py,
cmd_query.py): the SSH flags become resolve.SSHOptions, the rest is protocols.resolve."""

from __future__ import annotations

from .protocols.endpoint import Endpoint
from .protocols.resolve import SSHOptions, resolve_endpoint


def ssh_options(args) -> SSHOptions:
    """--ssh-config, --identity, --known-hosts, --stall-timeout, --ssh-client (those a subcommand has)."""
    return SSHOptions(
        ssh_config=getattr(args, "ssh_config", None),
        identity=getattr(args, "identity", None),
        known_hosts=getattr(args, "known_hosts", None),
        stall_timeout=getattr(args, "stall_timeout", None),
        client=getattr(args, "ssh_client", None),
    )


def endpoint(url: str, args) -> Endpoint:
    """The Endpoint for a SRC or DST argument. An any:// URL probes through the store given by
    --store; when the command takes --alt-protocol and none was given, the other protocols the
    host offers become args.alt_protocols."""
    alternates: list[str] | None = [] if not getattr(args, "alt_protocols", "x") else None
    ep = resolve_endpoint(
        url,
        ssh_options(args),
        store_url=getattr(args, "store", None),
        writable=url == getattr(args, "dst", None),
        alternates=alternates,
    )
    if alternates:
        args.alt_protocols = ",".join(alternates)
    return ep
