"""`airflow-transfer query SRC DST --select COLS --where EXPR`: move only the records and columns asked for."""

from __future__ import annotations

import sys

from .cli_endpoint import add_json_option, endpoint, error_object, failure_json, print_json
from .errors import UsageError
from .protocols.endpoint import Endpoint


def add_parser(subparsers) -> None:
    q = subparsers.add_parser(
        "query",
        help="copy the selected columns of the matching rows of a Parquet / Arrow IPC / CSV dataset",
        description="Reads only what the query needs at SRC (Parquet: needed column chunks of row groups "
        "that can match) and writes the result atomically at DST. See docs/query.md.",
    )
    q.add_argument(
        "src", help="file or directory: path, file://, sftp://[user@]host[:port]/path, or http(s):// (a file)"
    )
    q.add_argument("dst", help="output file (or an existing directory): path, file:// or sftp:// URL")
    q.add_argument(
        "--select",
        default=None,
        help="comma-separated columns to keep, in this order (default: all); quote odd names: '\"a b\",c'",
    )
    q.add_argument(
        "--where", default=None, help="filter, e.g. \"humidity > 50 and time >= '2020-01-01'\" (grammar: docs/query.md)"
    )
    q.add_argument(
        "--format",
        choices=["parquet", "csv"],
        default=None,
        help="output format (default: from DST's extension, else parquet)",
    )
    q.add_argument("--ca-file", help="extra CA certificates for https sources")
    q.add_argument("--identity", help="private key file for SSH")
    q.add_argument("--known-hosts", help="known_hosts file to verify host keys against")
    q.add_argument("--ssh-config", help="OpenSSH client config file (default ~/.ssh/config)")
    add_json_option(q)


def resolve(url: str, args) -> str | Endpoint:
    """An http(s) URL stays a string (query sources only); everything else is an Endpoint."""
    # heavy: the query sources load http.client and email (~0.07 s); `airflow-transfer` imports this module
    from .query.sources import is_http

    return url if is_http(url) else endpoint(url, args)


def _progress(p: dict) -> None:
    sys.stderr.write(
        f"query: {p['rows']} rows out, {p['bytes_read']} bytes read, file {p['files_done'] + 1}/{p['files']}\n"
    )


def run(args) -> int:
    # heavy: the query engine loads pyarrow, NumPy, http.client (~0.15 s); `airflow-transfer` imports this module
    from .query.expr import QueryError
    from .query.run import QueryRequest, run_query
    from .query.sources import is_http

    try:
        if is_http(args.dst):
            raise UsageError("http(s) destinations are not supported", args.dst, "write to a path or an sftp:// URL")
        req = QueryRequest(
            resolve(args.src, args),
            resolve(args.dst, args),
            select=args.select,
            where=args.where,
            format=args.format,
            cafile=args.ca_file,
            progress=_progress,
        )
        summary = run_query(req)
    except QueryError as exc:
        sys.stderr.write(f"airflow-transfer: error: {exc.message}\n{exc.caret}\n")
        error = {**error_object(exc, exc.message, exc.exit_code), "position": exc.pos + 1}
        print_json(args, failure_json(exc.message, error))
        return exc.exit_code
    rg = summary["row_groups"]
    groups = f", {rg['read']}/{rg['total']} row groups" if rg else ""
    sys.stderr.write(
        f"done: {summary['rows']} of {summary['rows_scanned']} rows ({', '.join(summary['columns'])}) -> "
        f"{summary['destination']}; read {summary['bytes_read']} of {summary['bytes_source']} source bytes "
        f"({summary['read_fraction'] * 100:.1f} %{groups}), wrote {summary['bytes_written']} bytes in "
        f"{summary['seconds']:.2f}s, sha256 {summary['sha256']}\n"
    )
    print_json(args, summary)
    return 0
