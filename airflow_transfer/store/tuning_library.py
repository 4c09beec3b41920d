"""SQL for the tuning library (paper 003): profiles, tuned parameters, light-profiler back-off.

Each function runs inside the caller's transaction (Store.read / Store.write).
Everything handed back is a plain dict of JSON-friendly values (datetimes as
ISO 8601 strings in UTC), so the UI plugin and the CLI can print it as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, func, insert, select, update
from sqlalchemy.engine import Connection, RowMapping

from .coltypes import utcnow
from .connection import lock_key
from .errors import StoreError
from .schema import HOST_KEY_LENGTH, PROFILE_KINDS, light_schedule, profiles, tuned_params

DEFAULT_STABLE_RUNS = 3  # k: consecutive stable light results before the interval doubles
DEFAULT_TOLERANCE = 0.10  # "within +-10 %"
DEFAULT_BASE_INTERVAL_S = 3600.0
DEFAULT_MAX_INTERVAL_S = 7 * 86400.0

_TUNED_INT_FIELDS = ("streams", "tcp_buffer", "block_size", "bdp_bytes", "pp_level", "p", "cc")


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _check_host(name: str, what: str) -> None:
    if not isinstance(name, str) or len(name) > HOST_KEY_LENGTH:
        raise ValueError(f"{what} must be a host key of at most {HOST_KEY_LENGTH} characters")


# -- profiles -----------------------------------------------------------------------


def add_profile(
    conn: Connection, host: str, kind: str, payload: Mapping[str, Any], peer: str, measured_at: datetime | None
) -> int:
    if kind not in PROFILE_KINDS:
        raise ValueError(f"profile kind must be one of {PROFILE_KINDS} (got {kind!r})")
    _check_host(host, "host")
    _check_host(peer, "peer")
    if not host:
        raise ValueError("a profile needs a host")
    row = dict(
        host=host,
        peer=peer,
        kind=kind,
        measured_at=measured_at or utcnow(),
        ok=1 if payload.get("ok", True) else 0,
        payload=dict(payload),
    )
    return conn.execute(insert(profiles).values(**row).returning(profiles.c.id)).scalar_one()


def _profile_dict(row: RowMapping) -> dict[str, Any]:
    return {
        "id": row["id"],
        "host": row["host"],
        "peer": row["peer"],
        "kind": row["kind"],
        "measured_at": iso(row["measured_at"]),
        "ok": bool(row["ok"]),
        "payload": row["payload"],
    }


def latest_profile(
    conn: Connection, host: str, kind: str | tuple[str, ...], peer: str, ok_only: bool
) -> dict[str, Any] | None:
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    query = select(profiles).where(profiles.c.host == host, profiles.c.peer == peer, profiles.c.kind.in_(kinds))
    if ok_only:
        query = query.where(profiles.c.ok == 1)
    row = conn.execute(query.order_by(profiles.c.measured_at.desc(), profiles.c.id.desc()).limit(1)).mappings().first()
    return _profile_dict(row) if row is not None else None


def list_profiles(conn: Connection, host: str | None, kind: str | None, limit: int) -> list[dict[str, Any]]:
    query = select(profiles)
    if host is not None:
        query = query.where(profiles.c.host == host)
    if kind is not None:
        query = query.where(profiles.c.kind == kind)
    rows = conn.execute(query.order_by(profiles.c.measured_at.desc(), profiles.c.id.desc()).limit(limit)).mappings()
    return [_profile_dict(row) for row in rows]


# -- tuned parameters -------------------------------------------------------------------


def save_tuned(conn: Connection, params: Mapping[str, Any], measured_at: datetime, profile_ids: list[int]) -> int:
    missing = [name for name in ("source", "destination", "protocol", *_TUNED_INT_FIELDS) if name not in params]
    if missing:
        raise ValueError(f"tuned parameters lack {missing}: pass TunedParameters.to_dict()")
    _check_host(params["source"], "source host")
    _check_host(params["destination"], "destination host")
    row: dict[str, Any] = {name: int(params[name]) for name in _TUNED_INT_FIELDS}
    row.update(
        source_host=params["source"],
        dest_host=params["destination"],
        protocol=str(params["protocol"]),
        measured_at=measured_at,
        computed_at=utcnow(),
        rtt_ms=None if params.get("rtt_ms") is None else float(params["rtt_ms"]),
        bandwidth_mbit=None if params.get("bandwidth_mbit") is None else float(params["bandwidth_mbit"]),
        params=dict(params),
        profile_ids=[int(i) for i in profile_ids],
    )
    return conn.execute(insert(tuned_params).values(**row).returning(tuned_params.c.id)).scalar_one()


def _tuned_dict(row: RowMapping) -> dict[str, Any]:
    out = {
        name: row[name]
        for name in (
            "id",
            "source_host",
            "dest_host",
            "protocol",
            *_TUNED_INT_FIELDS,
            "rtt_ms",
            "bandwidth_mbit",
            "profile_ids",
        )
    }
    out.update(
        measured_at=iso(row["measured_at"]),
        computed_at=iso(row["computed_at"]),
        reasons=list((row["params"] or {}).get("reasons", [])),
        params=row["params"],
    )
    return out


def _tuned_newest_first(source_host: str, dest_host: str, protocol: str) -> Select[Any]:
    """Every tuner result of one direction and protocol, newest first."""
    return (
        select(tuned_params)
        .where(
            tuned_params.c.source_host == source_host,
            tuned_params.c.dest_host == dest_host,
            tuned_params.c.protocol == protocol,
        )
        .order_by(tuned_params.c.computed_at.desc(), tuned_params.c.id.desc())
    )


def tuned_for(conn: Connection, source_host: str, dest_host: str, protocol: str) -> dict[str, Any] | None:
    query = _tuned_newest_first(source_host, dest_host, protocol).limit(1)
    row = conn.execute(query).mappings().first()
    return _tuned_dict(row) if row is not None else None


def library(conn: Connection, protocol: str | None, host: str | None) -> list[dict[str, Any]]:
    """The newest tuned row of every (source, destination, protocol), sorted by those."""
    newest = (
        select(func.max(tuned_params.c.id).label("id"))
        .group_by(tuned_params.c.source_host, tuned_params.c.dest_host, tuned_params.c.protocol)
        .subquery()
    )
    query = select(tuned_params).join(newest, tuned_params.c.id == newest.c.id)
    if protocol is not None:
        query = query.where(tuned_params.c.protocol == protocol)
    if host is not None:
        query = query.where((tuned_params.c.source_host == host) | (tuned_params.c.dest_host == host))
    query = query.order_by(tuned_params.c.source_host, tuned_params.c.dest_host, tuned_params.c.protocol)
    return [_tuned_dict(row) for row in conn.execute(query).mappings()]


def tuned_history(
    conn: Connection, source_host: str, dest_host: str, protocol: str, limit: int
) -> list[dict[str, Any]]:
    rows = conn.execute(_tuned_newest_first(source_host, dest_host, protocol).limit(limit)).mappings()
    return [_tuned_dict(row) for row in rows]


# -- light-profiler back-off ----------------------------------------------------------------


def _schedule_dict(row: RowMapping) -> dict[str, Any]:
    out = dict(row)
    for name in ("last_run_at", "next_due_at", "updated_at"):
        out[name] = iso(row[name])
    return out


def get_schedule(conn: Connection, source_host: str, dest_host: str) -> dict[str, Any] | None:
    row = (
        conn.execute(
            select(light_schedule).where(
                light_schedule.c.source_host == source_host, light_schedule.c.dest_host == dest_host
            )
        )
        .mappings()
        .first()
    )
    return _schedule_dict(row) if row is not None else None


def list_schedules(conn: Connection) -> list[dict[str, Any]]:
    rows = conn.execute(select(light_schedule).order_by(light_schedule.c.source_host, light_schedule.c.dest_host))
    return [_schedule_dict(row) for row in rows.mappings()]


def is_due(conn: Connection, source_host: str, dest_host: str, now: datetime) -> bool:
    due = conn.execute(
        select(light_schedule.c.next_due_at).where(
            light_schedule.c.source_host == source_host, light_schedule.c.dest_host == dest_host
        )
    ).scalar_one_or_none()
    return due is None or due <= now


@dataclass(frozen=True)
class Backoff:
    """The light profiler's back-off rule (see next_state)."""

    k: int
    tolerance: float
    base_interval_s: float
    max_interval_s: float


# Timer and scheduling noise on a busy host moves a LAN-scale RTT by a fraction of a
# millisecond, which is more than 10 % of 2 ms: an RTT change smaller than this is noise.
RTT_NOISE_MS = 1.0


def _moved(old: float | None, new: float | None, tolerance: float, noise: float = 0.0) -> float | None:
    """Relative change when both values are known and it exceeds the tolerance (and the noise floor)."""
    if old is None or new is None or old <= 0:
        return None
    change = (new - old) / old
    return change if abs(change) > tolerance and abs(new - old) > noise else None


def next_state(
    previous: Mapping[str, Any] | None,
    rtt_ms: float | None,
    bandwidth_mbit: float | None,
    *,
    k: int,
    tolerance: float,
    base_interval_s: float,
    max_interval_s: float,
) -> dict[str, Any]:
    """The back-off rule, pure: a result within +-tolerance of the previous one (RTT and
    bandwidth both; RTT changes under RTT_NOISE_MS never count) is stable; after k stable results in a row the interval doubles (up
    to the maximum) and the count starts again; a result that moves resets the interval."""
    if k < 1 or not (0 < tolerance < 1) or not (0 < base_interval_s <= max_interval_s):
        raise ValueError("back-off needs k >= 1, 0 < tolerance < 1 and 0 < base interval <= max interval")
    if previous is None:
        return {
            "interval_s": base_interval_s,
            "stable_runs": 0,
            "moved": False,
            "doubled": False,
            "last_change": f"first light result: interval {base_interval_s:g} s",
        }
    moves = [
        f"{name} {old:g} -> {new:g} ({change:+.0%})"
        for name, old, new, noise in (
            ("RTT ms", previous.get("last_rtt_ms"), rtt_ms, RTT_NOISE_MS),
            ("bandwidth Mbit/s", previous.get("last_bandwidth_mbit"), bandwidth_mbit, 0.0),
        )
        for change in [_moved(old, new, tolerance, noise)]
        if change is not None
    ]
    if moves:
        return {
            "interval_s": base_interval_s,
            "stable_runs": 0,
            "moved": True,
            "doubled": False,
            "last_change": f"{'; '.join(moves)}: moved more than {tolerance:.0%}, interval reset to "
            f"{base_interval_s:g} s",
        }
    stable = int(previous.get("stable_runs") or 0) + 1
    interval = float(previous.get("interval_s") or base_interval_s)
    if stable >= k:
        doubled = min(interval * 2, max_interval_s)
        return {
            "interval_s": doubled,
            "stable_runs": 0,
            "moved": False,
            "doubled": doubled > interval,
            "last_change": f"{stable} stable results in a row (within {tolerance:.0%}): interval "
            f"{interval:g} -> {doubled:g} s" + (" (the maximum)" if doubled >= max_interval_s else ""),
        }
    return {
        "interval_s": interval,
        "stable_runs": stable,
        "moved": False,
        "doubled": False,
        "last_change": previous.get("last_change"),
    }


def record_light(
    conn: Connection,
    source_host: str,
    dest_host: str,
    rtt_ms: float | None,
    bandwidth_mbit: float | None,
    rule: Backoff,
    now: datetime | None,
) -> dict[str, Any]:
    _check_host(source_host, "source host")
    _check_host(dest_host, "destination host")
    now = now or utcnow()
    # two light runs of one pair at once must not both read the old state
    lock_key(conn, f"light:{source_host} -> {dest_host}")
    key = and_(light_schedule.c.source_host == source_host, light_schedule.c.dest_host == dest_host)
    row = conn.execute(select(light_schedule).where(key)).mappings().first()
    previous = dict(row) if row is not None else None
    state = next_state(
        previous,
        rtt_ms,
        bandwidth_mbit,
        k=rule.k,
        tolerance=rule.tolerance,
        base_interval_s=rule.base_interval_s,
        max_interval_s=rule.max_interval_s,
    )
    values = dict(
        interval_s=state["interval_s"],
        base_interval_s=rule.base_interval_s,
        max_interval_s=rule.max_interval_s,
        stable_runs=state["stable_runs"],
        last_run_at=now,
        next_due_at=now + timedelta(seconds=state["interval_s"]),
        last_rtt_ms=rtt_ms,
        last_bandwidth_mbit=bandwidth_mbit,
        last_change=(state["last_change"] or "")[:300] or None,
        updated_at=now,
    )
    if previous is None:
        conn.execute(insert(light_schedule).values(source_host=source_host, dest_host=dest_host, **values))
    else:
        conn.execute(update(light_schedule).where(key).values(**values))
    out = get_schedule(conn, source_host, dest_host)
    if out is None:  # written just above in this transaction: only a broken database loses it
        raise StoreError(f"the light schedule of {source_host} -> {dest_host} was not stored")
    out.update(moved=state["moved"], doubled=state["doubled"])
    return out
