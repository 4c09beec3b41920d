"""What the UI pages show, read from the store as plain dicts (no Airflow, no HTML).

The FastAPI app (app.py) renders these dicts as HTML pages and returns them
as JSON; tests call them directly on a real store.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from ..store import Store
from ..store import schema as S
from ..store.records import ChunkRecord, TransferRecord

AIRFLOW_KEY_PREFIX = "airflow:"
FILE_LIST_LIMIT = 200  # rows of failed / retried files shown on one page


def parse_key(key: str) -> dict[str, Any] | None:
    """The Airflow parts of a transfer key; None for other keys (CLI runs).

    Two forms: ``airflow:<dag>/<task>/<run>/<map index>`` (one task's transfer,
    TunedTransferOperator) and ``airflow:<dag>/<run>/<plan task>`` (a transfer
    split into mapped chunk tasks, keyed by its ChunkPlanOperator). Dag and
    task ids cannot contain '/', and run ids are checked against Airflow's
    run id pattern, which excludes it.
    """
    if not key.startswith(AIRFLOW_KEY_PREFIX):
        return None
    parts = key[len(AIRFLOW_KEY_PREFIX) :].split("/")
    if not all(parts):
        return None
    if len(parts) == 4:
        try:
            index = int(parts[3])
        except ValueError:
            return None
        return {"dag_id": parts[0], "task_id": parts[1], "run_id": parts[2], "map_index": index}
    if len(parts) == 3:
        return {"dag_id": parts[0], "task_id": parts[2], "run_id": parts[1], "map_index": -1}
    return None


def dag_of(record: TransferRecord) -> str | None:
    parts = parse_key(record.key)
    return parts["dag_id"] if parts else None


def visible(records: Iterable[TransferRecord], readable_dags: Collection[str] | None) -> list[TransferRecord]:
    """Transfers the user may see: those of DAGs they can read, and those run outside Airflow.

    ``readable_dags=None`` means no restriction (tests, the CLI).
    """
    if readable_dags is None:
        return list(records)
    return [r for r in records if (dag := dag_of(r)) is None or dag in readable_dags]


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat(timespec="seconds")


def _duration(record: TransferRecord, state: str, now: datetime) -> float | None:
    """Seconds from the start to the end; only a transfer still running keeps counting. A lost
    one stops at its last heartbeat (the last moment it is known to have run)."""
    if state == S.RUNNING:
        end: datetime | None = now
    elif state == S.LOST:
        end = record.last_seen
    else:
        end = record.ended_at
    if end is None or record.started_at is None:
        return None
    start = record.started_at if record.started_at.tzinfo else record.started_at.replace(tzinfo=UTC)
    end = end if end.tzinfo else end.replace(tzinfo=UTC)
    return max(0.0, (end - start).total_seconds())


def lost_error(record: TransferRecord) -> dict[str, str]:
    """What a lost transfer shows in place of an error: the process died without writing one."""
    what = (
        f"no heartbeat since {_iso(record.last_seen)}: the process running it stopped without "
        "recording an end (killed, or its machine lost)"
    )
    todo = "run the same copy (same transfer key) again: it takes the transfer over and resumes it"
    return {"kind": "lost", "type": "", "what": what, "where": "", "todo": todo, "message": f"{what}: {todo}"}


def transfer_row(record: TransferRecord, now: datetime | None = None) -> dict[str, Any]:
    """One line of the transfers list: the state as shown (``lost`` for a running transfer whose
    lease ran out), the error that ended it, and a duration that stops when it ended."""
    summary = record.summary or {}
    now = now or datetime.now(UTC)
    state = record.current_state(now)
    return {
        "id": record.id,
        "key": record.key,
        "airflow": parse_key(record.key),
        "state": state,
        "src": record.src_url,
        "dst": record.dst_url,
        "algorithm": record.algorithm,
        "attempts": record.attempts,
        "started_at": _iso(record.started_at),
        "ended_at": _iso(record.ended_at),
        "heartbeat_at": _iso(record.heartbeat_at),
        "duration_s": _duration(record, state, now),
        "files": summary.get("files"),
        "bytes": summary.get("bytes"),
        "throughput_mbit": summary.get("throughput_mbit"),
        "failed": len(summary.get("failed") or []) if summary else None,
        "error": lost_error(record) if state == S.LOST else record.error,
    }


def list_transfers(
    store: Store,
    *,
    dag_id: str | None = None,
    state: str | None = None,
    readable_dags: Collection[str] | None = None,
    limit: int = 100,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The transfers page: newest first, optionally one DAG's and / or one (shown) state's."""
    if state is not None and state not in S.SHOWN_STATES:
        raise ValueError(f"unknown state {state!r}; states are {', '.join(S.SHOWN_STATES)}")
    now = now or datetime.now(UTC)
    prefix = f"{AIRFLOW_KEY_PREFIX}{dag_id}/" if dag_id else None
    records = visible(store.list_transfers(state=state, key_prefix=prefix, limit=limit, now=now), readable_dags)
    return {
        "filters": {"dag_id": dag_id, "state": state, "limit": limit},
        "states": list(S.SHOWN_STATES),
        "dag_ids": known_dags(store, readable_dags),
        "transfers": [transfer_row(r, now) for r in records],
    }


def known_dags(store: Store, readable_dags: Collection[str] | None, scan: int = 2000) -> list[str]:
    """DAG ids of the most recent transfers, for the filter's choices."""

    def query(conn):
        rows = conn.execute(
            select(S.transfers.c.key)
            .where(S.transfers.c.key.startswith(AIRFLOW_KEY_PREFIX))
            .order_by(S.transfers.c.id.desc())
            .limit(scan)
        )
        return {parts["dag_id"] for (key,) in rows if (parts := parse_key(key))}

    dags = store.read(query)
    if readable_dags is not None:
        dags &= set(readable_dags)
    return sorted(dags)


def chunk_row(chunk: ChunkRecord) -> dict[str, Any]:
    return {
        "chunk_id": chunk.chunk_id,
        "pp": chunk.pp,
        "p": chunk.p,
        "cc": chunk.cc,
        "files": chunk.files,
        "bytes": chunk.bytes,
        "bytes_moved": chunk.bytes_moved,
        "seconds": chunk.seconds,
        "throughput_mbit": chunk.throughput_mbit,
        "started_at": _iso(chunk.started_at),
        "ended_at": _iso(chunk.ended_at),
    }


def chunk_timeline(chunks: list[dict[str, Any]], transfer_start: datetime | None) -> list[dict[str, Any]]:
    """Each chunk with ``t0`` / ``t1``: seconds from the transfer's start.

    Uses the chunk's own timestamps when the store has them; otherwise chunks
    are laid end to end in run order (the algorithms run them one after another).
    """
    out, cursor = [], 0.0
    base = transfer_start if transfer_start is None or transfer_start.tzinfo else transfer_start.replace(tzinfo=UTC)
    for c in chunks:
        t0 = cursor
        if c.get("started_at") and base is not None:
            t0 = max(0.0, (datetime.fromisoformat(c["started_at"]) - base).total_seconds())
        t1 = t0 + max(float(c["seconds"]), 0.0)
        cursor = t1
        out.append({**c, "t0": t0, "t1": t1, "timed": bool(c.get("started_at") and base is not None)})
    return out


def _file_rows(store: Store, transfer_id: int, condition, limit: int) -> dict[str, Any]:
    f = S.files

    def query(conn):
        total = conn.execute(select(func.count()).where(f.c.transfer_id == transfer_id, condition)).scalar_one()
        rows = (
            conn.execute(
                select(f.c.path, f.c.size, f.c.state, f.c.attempts, f.c.last_error)
                .where(f.c.transfer_id == transfer_id, condition)
                .order_by(f.c.path)
                .limit(limit)
            )
            .mappings()
            .all()
        )
        return {"total": int(total), "rows": [dict(r) for r in rows]}

    return store.read(query)


def transfer_detail(
    store: Store, transfer_id: int, *, file_limit: int = FILE_LIST_LIMIT, now: datetime | None = None
) -> dict[str, Any] | None:
    """One transfer: how it ended (state and error), its chunks on a timeline, journal progress,
    failed / retried files, switches."""
    record = store.get_transfer(transfer_id, with_chunks=True)
    if record is None:
        return None
    summary = record.summary or {}
    chunks = chunk_timeline([chunk_row(c) for c in record.chunks], record.started_at)
    counts = store.journal_counts(transfer_id)
    total_files = sum(v["files"] for v in counts.values())
    total_bytes = sum(v["bytes"] for v in counts.values())
    done_bytes = sum(v["bytes_done"] for v in counts.values())
    verify = summary.get("verify") or {}
    return {
        "transfer": transfer_row(record, now),
        "chunks": chunks,
        "journal": {
            "counts": counts,
            "files": total_files,
            "bytes": total_bytes,
            "bytes_done": done_bytes,
            "percent": round(100.0 * done_bytes / total_bytes, 1) if total_bytes else None,
        },
        "failed_files": _file_rows(store, transfer_id, S.files.c.state == S.FILE_FAILED, file_limit),
        "retried_files": _file_rows(store, transfer_id, S.files.c.attempts > 1, file_limit),
        "files_retried": summary.get("files_retried"),
        "files_resumed": summary.get("files_resumed"),
        # faults the copy got over without retrying a file still show here (None: older summaries)
        "connections_lost": summary.get("connections_lost"),
        "verify": verify,
        "repaired": verify.get("repaired"),
        # written as each switch happens, so a running transfer shows them too
        "protocol_switches": store.protocol_switches(transfer_id) or list(summary.get("protocol_switches") or []),
        "tuning": summary.get("tuning"),
        "summary_failed": list(summary.get("failed") or [])[:file_limit],
    }


def latest_for_key(store: Store, key: str) -> TransferRecord | None:
    """The newest transfer recorded under exactly ``key`` (what an extra link points at)."""
    for record in store.list_transfers(key_prefix=key, limit=50):
        if record.key == key:
            return record
    return None


# --- libraries written by other parts of the project ---------------------------------------

PROFILE_LIMIT = 100
PAYLOAD_PREVIEW = 160  # characters of a profile's JSON shown in a table cell


def tuning(store: Store, *, limit: int = PROFILE_LIMIT) -> dict[str, Any]:
    """The tuning library: newest tuned parameters per link, light-profiler back-off, recent profiles."""
    tuned = store.tuning_library()
    profiles = store.profiles(limit=limit)
    for p in profiles:
        text = json.dumps(p.get("payload"), sort_keys=True, default=str)
        p["preview"] = text if len(text) <= PAYLOAD_PREVIEW else text[:PAYLOAD_PREVIEW] + " ..."
    return {
        "library": "tuning",
        "tuned": tuned,
        "schedules": store.light_schedules(),
        "profiles": profiles,
        "recorded": bool(tuned or profiles),
    }


def protocols(store: Store) -> dict[str, Any]:
    """The host-protocol library: every (host, protocol, port) probed, with its last probe and expiry."""
    now = datetime.now(UTC)
    entries = store.host_protocols()
    for e in entries:
        expires = datetime.fromisoformat(e["expires_at"])
        e["fresh"] = (expires if expires.tzinfo else expires.replace(tzinfo=UTC)) > now
    return {
        "library": "protocols",
        "entries": entries,
        "hosts": sorted({e["host"] for e in entries}),
        "recorded": bool(entries),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return _iso(value)
    return value
