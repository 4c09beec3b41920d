"""Request lists (paper 001, goal E): many (source, destination) pairs across many hosts.

Pairs are grouped by host pair (scheme, host and port of each end). Each group
is planned on its own: the chosen algorithm plans the group's combined listing
once and the group's pairs then run with those parameters, so a slow far link
and a fast near one are not tuned as if they were one. The summary has one
entry per group with its parameters and totals.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa

from .engine.params import TransferParams
from .errors import UsageError
from .job import open_session, run_copy
from .protocols.endpoint import Endpoint
from .summary import throughput_mbit
from .tuning import LinkInfo, get_algorithm


def load_pairs(path: str) -> list[tuple[str, str]]:
    """'SRC DST' per line (blank lines and # comments skipped), or a JSON list of [src, dst]."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as exc:
        raise UsageError(f"cannot read the request list: {exc.strerror or exc}", path, "check the path") from exc
    if text.lstrip().startswith("["):
        try:
            pairs = [tuple(p) for p in json.loads(text)]
        except (ValueError, TypeError) as exc:
            raise UsageError(f"bad JSON request list: {exc}", path, 'use [["SRC", "DST"], ...]') from exc
    else:
        pairs = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise UsageError(f"line {n} of the request list is not 'SRC DST'", path, "one pair per line")
            pairs.append((parts[0], parts[1]))
    if not pairs or any(len(p) != 2 for p in pairs):
        raise UsageError("the request list has no (source, destination) pairs", path, "one 'SRC DST' per line")
    return pairs


def host_key(ep: Endpoint) -> str:
    if ep.scheme == "file":
        return "file://localhost"
    if ep.target is not None:
        return f"sftp://{ep.target.host}:{ep.target.port}"
    return f"{ep.scheme}://{ep.host or ''}{':' + str(ep.port) if ep.port else ''}"


def group_pairs(
    pairs: list[tuple[Endpoint, Endpoint]],
) -> list[tuple[tuple[str, str], list[tuple[Endpoint, Endpoint]]]]:
    groups: dict[tuple[str, str], list] = {}
    for src, dst in pairs:
        groups.setdefault((host_key(src), host_key(dst)), []).append((src, dst))
    return list(groups.items())


def _group_params(base_req, members, algorithm: str, given: TransferParams) -> tuple[TransferParams, str]:
    """Parameters for a whole group: the given ones, or the algorithm's plan of the group's files."""
    if algorithm == "fixed":
        return given, "given"
    tables = []
    for src, dst in members:
        with open_session(replace(base_req, src=src, dst=dst, alt_protocols=[]), None) as session:
            tables.append(session.list_source().table.select(["path", "size", "mtime"]))
    table = pa.concat_tables(tables).sort_by([("size", "ascending")])
    link = base_req.link or LinkInfo.unknown()
    specs = get_algorithm(algorithm).plan(table, link)
    if not specs:
        return given, f"{algorithm}: nothing to plan"
    biggest = max(specs, key=lambda s: s.bytes)
    return biggest.params, f"{algorithm} plan of {table.num_rows} files ({len(specs)} chunks; largest chunk's)"


def run_request_list(
    base_req,
    pairs: list[tuple[str, str]],
    make_endpoint: Callable[[str], Endpoint],
    on_group: Callable[[dict], None] | None = None,
) -> dict:
    """Run every pair, group by group; returns {"groups": [...], "files", "bytes", "seconds", "failed"}."""
    t0 = time.monotonic()
    eps = [(make_endpoint(s), make_endpoint(d)) for s, d in pairs]
    out_groups = []
    for (src_host, dst_host), members in group_pairs(eps):
        g0 = time.monotonic()
        params, source = _group_params(base_req, members, base_req.algorithm, base_req.params)
        runs = []
        for src, dst in members:
            req = replace(base_req, src=src, dst=dst, params=params, algorithm="fixed", transfer_key=None)
            runs.append(run_copy(req))
        seconds = time.monotonic() - g0
        moved = sum(r.get("bytes_moved", 0) for r in runs)
        group = {
            "src_host": src_host,
            "dst_host": dst_host,
            "pairs": len(members),
            "params": {"pp": params.pp, "p": params.p, "cc": params.cc},
            "params_source": source,
            "files": sum(r["files"] for r in runs),
            "bytes": sum(r["bytes"] for r in runs),
            "seconds": round(seconds, 3),
            "throughput_mbit": throughput_mbit(moved, seconds),
            "failed": [f for r in runs for f in r["failed"]],
            "transfers": [
                {
                    "src": r["src"],
                    "dst": r["dst"],
                    "files": r["files"],
                    "transfer_id": r["transfer_id"],
                    "bytes": r["bytes"],
                    "manifest_digest": r["manifest_digest"],
                }
                for r in runs
            ],
        }
        out_groups.append(group)
        if on_group is not None:
            on_group(group)
    return {
        "groups": out_groups,
        "files": sum(g["files"] for g in out_groups),
        "bytes": sum(g["bytes"] for g in out_groups),
        "seconds": round(time.monotonic() - t0, 3),
        "algorithm": base_req.algorithm,
        "failed": [f for g in out_groups for f in g["failed"]],
    }
