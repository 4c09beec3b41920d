"""What every subcommand (cli.py, cmd_*.py) shares: its SRC / DST arguments as Endpoints (the SSH
flags become resolve.SSHOptions, the rest is protocols.resolve) and its --json output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

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


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def print_json(args: argparse.Namespace, result: Any, *, default: Callable[[Any], Any] | None = None) -> None:
    """With --json, the command's one JSON object on stdout; human output goes to stderr either way."""
    if args.json:
        sys.stdout.write(json.dumps(result, default=default) + "\n")
