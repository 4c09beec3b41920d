"""What the profiling DAG profiles: hosts and ordered pairs from its configuration.

Configuration (DAG param `pairs`, else the Airflow Variable
`airflow_transfer_profile_pairs`, JSON): a list of host pairs, each host
"local" (the worker that runs the tasks and, later, the transfers) or an
Airflow ssh/sftp connection id, optionally followed by ":/dir" for the
directory the disk profiler writes in:

    [["local", "hpc_sftp:/scratch"], ["hpc_sftp", "archive_sftp"]]

Each pair is profiled both ways (X->Y and Y->X, paper 003 section 4.4).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import UsageError

LOCAL_SPECS = ("local", "localhost")
VARIABLE = "airflow_transfer_profile_pairs"


def split_spec(spec: str) -> tuple[str, str | None]:
    """ "conn_id:/dir" -> ("conn_id", "/dir"); "local" -> ("local", None)."""
    name, sep, path = spec.partition(":")
    return name.strip(), (path or None) if sep else None


def parse_pairs(value: Any) -> list[tuple[str, str]]:
    """Validated, de-duplicated unordered pairs from the param/Variable value (JSON text or a list)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError as exc:
            raise UsageError(f"host pairs are not JSON: {exc}", VARIABLE, 'write e.g. [["local", "my_sftp"]]') from exc
    if not isinstance(value, list):
        raise UsageError("host pairs must be a list of [host, host] pairs", VARIABLE, 'e.g. [["local", "my_sftp"]]')
    pairs: list[tuple[str, str]] = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(h, str) and h for h in item)):
            raise UsageError(f"bad host pair {item!r}", VARIABLE, 'each pair is ["local" or a conn id, a conn id]')
        a, b = item
        if split_spec(a)[0] == split_spec(b)[0]:
            raise UsageError(f"pair {item!r} names one host twice", VARIABLE, "pair two different hosts")
        if split_spec(a)[0] in LOCAL_SPECS and split_spec(b)[0] in LOCAL_SPECS:
            raise UsageError(f"pair {item!r} is the worker with itself", VARIABLE, "pair it with a connection")
        if (a, b) not in pairs and (b, a) not in pairs:
            pairs.append((a, b))
    return pairs


def hosts_of(pairs: list[tuple[str, str]]) -> list[str]:
    """Every host once, in first-seen order (a host named with and without a dir counts once, dir kept)."""
    seen: dict[str, str] = {}
    for pair in pairs:
        for spec in pair:
            name, path = split_spec(spec)
            if name not in seen or (path and not split_spec(seen[name])[1]):
                seen[name] = spec
    return list(seen.values())


def ordered_pairs(pairs: list[tuple[str, str]]) -> list[list[str]]:
    """Both directions of every pair, host specs reduced to their names (the network needs no dir)."""
    out: list[list[str]] = []
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            item = [split_spec(x)[0], split_spec(y)[0]]
            if item not in out:
                out.append(item)
    return out
