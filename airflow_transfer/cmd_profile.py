"""`airflow-transfer profile HOST [HOST2] [--json]`: profilers + tuner -> the tuning library.

One HOST: that host's disk, memory and kernel limits; when it is an SSH host,
also this machine's and the link both ways between them (the link every
transfer from here to there takes). Two HOSTs: both hosts and the link both
ways between them. Progress goes to stderr; --json prints one JSON object.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from .cli_endpoint import add_json_option, check_location, error_object, print_json
from .engine.accounting import format_rate
from .errors import TransferError, UsageError
from .profiling.hosts import LOCALHOST, ProfileHost, parse_host
from .profiling.remote import HostRunner
from .protocols.ssh import open_sftp


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("profile", help="profile hosts and the link between them; store the tuned parameters")
    p.add_argument(
        "host",
        help="localhost, a local directory, or sftp://[user@]host[:port][/dir] "
        "(the directory is where the disk profiler writes)",
    )
    p.add_argument("host2", nargs="?", help="second host; default: this machine when HOST is an SSH host")
    p.add_argument(
        "--protocol", action="append", dest="protocols", help="tune for this protocol (repeatable; default sftp)"
    )
    p.add_argument(
        "--via",
        choices=("direct", "ssh"),
        default="direct",
        help="reach the remote bandwidth sink by direct TCP (default: the raw link) or through SSH",
    )
    p.add_argument(
        "--light",
        action="store_true",
        help="only the light network profile and the tuner (reuses stored host profiles)",
    )
    p.add_argument("--quick", action="store_true", help="small budgets: a few seconds per profiler")
    p.add_argument("--store", help="store URL (default: as for copy)")
    p.add_argument("--identity", help="private key file for SSH")
    p.add_argument("--known-hosts", help="known_hosts file to verify host keys against")
    p.add_argument("--ssh-config", help="OpenSSH client config file (default ~/.ssh/config)")
    add_json_option(p)


def run(args) -> int:
    # heavy: the store and the profiling library load SQLAlchemy and pyarrow (~0.3 s); `airflow-transfer`
    # imports this module
    from .profiling.library import light_run, profile_host, profile_link, tune_link
    from .store import open_store

    ssh = (args.ssh_config, args.identity, args.known_hosts)
    for spec in (args.host, args.host2):
        if spec:
            check_location(spec)
    first = parse_host(args.host, *ssh)
    if args.host2:
        second = parse_host(args.host2, *ssh)
    elif first.is_local:
        second = None
    else:
        second = ProfileHost(LOCALHOST)
    if second is not None and second.key == first.key:
        raise UsageError(f"both hosts are {first.key}", "", "name two different hosts")
    protocols = tuple(args.protocols or ("sftp",))

    def progress(line: str) -> None:
        sys.stderr.write(readable_figures(line) + "\n")
        sys.stderr.flush()

    store = open_store(args.store)
    runners = [HostRunner(h) for h in (first, second) if h is not None]
    result: dict[str, Any] = {"hosts": {}, "links": [], "tuned": [], "store": store.masked_url}
    try:
        if not args.light:
            for runner, spec in zip(runners, (args.host, args.host2)):
                _check_directory(runner, spec or runner.host.key)
            for runner in runners:
                result["hosts"][runner.host.key] = profile_host(store, runner, quick=args.quick, progress=progress)
        if len(runners) == 2:
            client = LOCALHOST if any(r.host.is_local for r in runners) else None
            for src, dst in (runners, runners[::-1]):
                if args.light:
                    step = light_run(
                        store, src, dst, protocols=protocols, via=args.via, quick=args.quick, progress=progress
                    )
                    result["links"].append(
                        {
                            **step["profile"],
                            "source": src.host.key,
                            "destination": dst.host.key,
                            "schedule": step["schedule"],
                        }
                    )
                    result["tuned"].extend(step["tuned"])
                    continue
                link = profile_link(store, src, dst, via=args.via, quick=args.quick, progress=progress)
                result["links"].append({**link, "source": src.host.key, "destination": dst.host.key})
                result["tuned"].extend(tune_link(store, src.host.key, dst.host.key, protocols=protocols, client=client))
        elif args.light:
            raise UsageError(
                "--light profiles a link: give an SSH host", "", "airflow-transfer profile sftp://host --light"
            )
    finally:
        for runner in runners:
            runner.close()
        store.close()
    for t in result["tuned"]:
        progress(
            f"tuned {t['source']} -> {t['destination']} ({t['protocol']}): streams {t['streams']}, "
            f"TCP buffer {t['tcp_buffer']} B, block {t['block_size']} B, BDP {t['bdp_bytes']} B"
        )
    failed = [
        {"host": key, "profile": kind, "error": str((p.get("summary") or {}).get("error") or "failed")}
        for key, kinds in result["hosts"].items()
        for kind, p in kinds.items()
        if not p.get("ok")
    ]
    if failed:
        # A profile that failed is stored (its error is the record), but nothing was learned
        # from it: the command failed at what it was asked to do.
        f = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        exc = TransferError(
            f"the {f['profile']} profile of {f['host']} failed{more}: {_without_script_hint(f['error'])}",
            f["host"],
            "name a writable directory on the disk to profile as HOST"
            if f["profile"] == "disk"
            else "the lines above show each profile's outcome; run the command again once the cause is fixed",
        )
        print_json(
            args, {**result, "failed": failed, "error": error_object(exc, exc.message, exc.exit_code)}, default=str
        )
        raise exc
    print_json(args, result, default=str)
    return 0


_EXPONENT_RATE = re.compile(r"\b(\d+(?:\.\d+)?e[+-]?\d+) Mbit/s")


def readable_figures(line: str) -> str:
    """A progress line with its rates written out: the profiling library prints figures to four
    significant digits, which Python writes with an exponent from 10,000 up (5.267e+04 Mbit/s
    on a fast link)."""
    return _EXPONENT_RATE.sub(lambda m: format_rate(float(m[1])), line)


def _check_directory(runner: HostRunner, spec: str) -> None:
    """The directory HOST names must exist before the disk profiler runs in it: the profiler's
    own complaint would name an option of its script, not of this command."""
    host = runner.host
    if host.path is None:
        return
    if host.is_local:
        exists = os.path.isdir(host.path)
    else:
        wire = open_sftp(runner.transport)
        try:
            exists = wire.stat(host.path).is_dir
        except OSError:
            exists = False
        finally:
            wire.close()
    if not exists:
        example = spec.split("://", 1)[0] + "://" + host.key + "/tmp" if "://" in spec else "/tmp"
        raise UsageError(
            f"no directory {host.path} on {host.key} for the disk profile",
            spec,
            f"name an existing directory on the disk to profile as HOST, e.g. airflow-transfer profile {example}",
        )


def _without_script_hint(error: str) -> str:
    """A profiler's error without the advice meant for running its script by hand."""
    return error.split("; pass --", 1)[0]
