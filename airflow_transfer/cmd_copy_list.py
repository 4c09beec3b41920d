"""`airflow-transfer copy --from-list FILE`: a request list, grouped by host pair."""

from __future__ import annotations

import sys

from .cli_endpoint import endpoint, print_json
from .cli_start import collector_paused
from .engine.accounting import format_rate, plural
from .engine.retry import RetryPolicy
from .protocols.endpoint import Endpoint


def run(args, params) -> int:
    with collector_paused():
        # heavy: job and request_list load the engine, pyarrow and NumPy (~0.3 s); the CLI imports this module
        from .job import CopyRequest, link_from_args
        from .request_list import load_pairs, run_request_list

    pairs = load_pairs(args.from_list)
    base = CopyRequest(
        Endpoint("file", "/"),
        Endpoint("file", "/"),
        params,
        skip_existing=not args.no_skip,
        store_url=args.store,
        restart=args.restart,
        retry=RetryPolicy(max_attempts=args.retries, deadline_s=args.deadline),
        algorithm=args.algorithm,
        verify=None if args.verify == "none" else args.verify,
        link=link_from_args(args.rtt_ms, args.bandwidth_mbit, args.bdp),
        alt_protocols=[p for p in args.alt_protocols.split(",") if p.strip()],
        switch_after=args.switch_after,
        probe_interval=args.probe_interval,
        make_endpoint=lambda url: endpoint(url, args),
    )

    def said(g: dict) -> None:
        sys.stderr.write(
            f"group {g['src_host']} -> {g['dst_host']}: {plural(g['pairs'], 'pair')}, {plural(g['files'], 'file')}, "
            f"pp={g['params']['pp']} p={g['params']['p']} cc={g['params']['cc']} "
            f"({g['params_source']}), {format_rate(g['throughput_mbit'])}, {len(g['failed'])} failed\n"
        )

    summary = run_request_list(base, pairs, lambda url: endpoint(url, args), on_group=said)
    ok = not summary["failed"]
    sys.stderr.write(
        f"{'done' if ok else 'INCOMPLETE'}: {plural(len(pairs), 'pair')} in {plural(len(summary['groups']), 'group')}, "
        f"{plural(summary['files'], 'file')}, {plural(summary['bytes'], 'byte')} in {summary['seconds']:.1f}s\n"
    )
    print_json(args, summary)
    return 0 if ok else 1
