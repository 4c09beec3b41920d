"""Profile hosts and links, run the Stork tuner, write both to the tuning library.

The steps of paper 003 Fig. 4.1, each callable on its own (the profiling DAG
maps them over hosts and pairs) or all together (`airflow-transfer profile`):

    profile_host(store, runner)            disk, memory, kernel limits -> at_profiles
    profile_link(store, src, dst)          network profile of src -> dst -> at_profiles
    tune_link(store, src_key, dst_key)     latest profiles -> tuner -> at_tuned_params
    light_run(store, src, dst)             light network profile + tuner + back-off state
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import TransferError
from ..tuning.stork_tuner import PathFacts, host_facts, path_facts, tune_direction
from .hosts import LOCALHOST
from .links import measure_path
from .remote import HostRunner

if TYPE_CHECKING:
    from ..store import Store

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Budget:
    """How long the profilers may take: their arguments, and the network probe's length."""

    disk: tuple[str, ...]  # disk profiler arguments
    memory: tuple[str, ...]  # memory profiler arguments
    seconds: float  # full network probe
    light_seconds: float  # light network probe


FULL = Budget(
    disk=("--file-size", "64M", "--total", "512M", "--max-seconds", "20"),
    memory=(),
    # The probe leaves out its first second (slow start: ~0.7 s at 100 ms, 500 Mbit/s) and
    # rates the rest. The light probe is as long as the full one needs to be comparable: its
    # figure replaces the full one in the library.
    seconds=4.0,
    light_seconds=3.0,
)
QUICK = Budget(
    disk=("--file-size", "4M", "--total", "32M", "--rounds", "1", "--max-seconds", "5"),
    memory=("--region", "16M", "--per-trial", "32M", "--rounds", "1", "--max-seconds", "3"),
    # 2 s, not 1: a 1 s probe keeps only 0.67 s after slow start, and one stall of the
    # machine in that window (seen once in CI: 78 of 200 Mbit/s) is then the whole figure.
    seconds=2.0,
    light_seconds=1.0,
)


def _quiet(_: str) -> None:
    pass


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def profile_host(
    store: Store,
    runner: HostRunner,
    *,
    kinds: Sequence[str] = ("disk", "memory", "kernel"),
    quick: bool = False,
    progress: Progress = _quiet,
) -> dict[str, dict[str, Any]]:
    """Run the host profilers on one host and store each result; returns {kind: {"id", "ok", "summary"}}."""
    budget = QUICK if quick else FULL
    host = runner.host
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        if kind == "disk":
            args = ["--path", host.path or ("." if not host.is_local else tempfile.gettempdir()), *budget.disk]
            name = "disk"
        elif kind == "memory":
            args, name = list(budget.memory), "memory"
        elif kind == "kernel":
            args, name = [], "network"  # with no peer the network profiler reads this host's /proc limits
        else:
            raise ValueError(f"unknown host profile {kind!r}")
        progress(f"{host.key}: {kind} profile ...")
        payload = runner.run(name, args)
        profile_id = store.add_profile(host.key, kind, payload)
        out[kind] = {"id": profile_id, "ok": bool(payload.get("ok")), "summary": _summary(kind, payload)}
        progress(f"{host.key}: {kind} {_describe(kind, payload)}")
    return out


def profile_link(
    store: Store,
    source: HostRunner,
    dest: HostRunner,
    *,
    light: bool = False,
    via: str = "direct",
    quick: bool = False,
    progress: Progress = _quiet,
) -> dict[str, Any]:
    """Network-profile source -> destination and store it; returns {"id", "rtt_ms", "bandwidth_mbit", ...}."""
    kind = "network-light" if light else "network"
    progress(f"{source.host.key} -> {dest.host.key}: {'light ' if light else ''}network profile ...")
    budget = QUICK if quick else FULL
    measured = measure_path(
        source, dest, light=light, via=via, seconds=budget.light_seconds if light else budget.seconds
    )
    payload = dict(measured["payload"])
    payload["link"] = {
        "source": source.host.key,
        "destination": dest.host.key,
        "direction": measured["direction"],
        "client": measured["client"],
        "via": measured["via"],
    }
    profile_id = store.add_profile(source.host.key, kind, payload, peer=dest.host.key)
    facts = path_facts(payload, measured["direction"])
    if facts.bandwidth_mbit is None:  # stored above for the record, but no BDP can come of it
        if payload.get("tunnel_lost"):
            hint = f"{payload['tunnel_lost']}; run the profile again"
        elif measured["via"] == "direct":
            hint = (
                "the sink's port may be firewalled: try --via ssh (DAG param via=ssh), which goes through "
                "the SSH connection"
            )
        else:
            hint = "check that the hosts reach each other"
        raise TransferError(
            f"the network profile of {source.host.key} -> {dest.host.key} measured no bandwidth: "
            f"{_why_unmeasured(payload, measured['direction'])}",
            dest.host.key,
            hint,
        )
    progress(
        f"{source.host.key} -> {dest.host.key}: RTT {_fmt(facts.rtt_ms, 'ms')}, "
        f"bandwidth {_fmt(facts.bandwidth_mbit, 'Mbit/s')} ({measured['via']})"
    )
    return {
        "id": profile_id,
        "kind": kind,
        "rtt_ms": facts.rtt_ms,
        "bandwidth_mbit": facts.bandwidth_mbit,
        "direction": measured["direction"],
        "via": measured["via"],
    }


def _why_unmeasured(payload: dict, direction: str) -> str:
    rtt = payload.get("rtt") or {}
    bw = (payload.get("bandwidth") or {}).get(direction) or {}
    return "; ".join(str(x) for x in (rtt.get("reason"), bw.get("reason")) if x) or "no figures"


def tune_link(
    store: Store,
    source_key: str,
    dest_key: str,
    *,
    protocols: Sequence[str] = ("sftp",),
    client: str | None = LOCALHOST,
) -> list[dict[str, Any]]:
    """Run the tuner on the newest stored profiles of source -> destination; store and return the results."""
    network = store.latest_profile(source_key, ("network", "network-light"), peer=dest_key)
    if network is None:
        raise TransferError(
            f"no network profile of {source_key} -> {dest_key} in the library",
            source_key,
            f"run: airflow-transfer profile {source_key} {dest_key}",
        )
    used = [network["id"]]
    direction = network["payload"].get("link", {}).get("direction", "send")
    path = path_facts(network["payload"], direction)
    if network["kind"] == "network-light":  # the light profile traces no route: keep the full one's hops
        full = store.latest_profile(source_key, "network", peer=dest_key)
        if full is not None:
            hops = path_facts(full["payload"], full["payload"].get("link", {}).get("direction", "send"))
            path = PathFacts(path.rtt_ms, path.bandwidth_mbit, hops.hop_latencies_ms, hops.hops_reason)
            used.append(full["id"])

    def facts(key: str):
        disk = store.latest_profile(key, "disk")
        kernel = store.latest_profile(key, "kernel")
        used.extend(p["id"] for p in (disk, kernel) if p is not None)
        return host_facts(key, disk=disk["payload"] if disk else None, network=kernel["payload"] if kernel else None)

    src, dst = facts(source_key), facts(dest_key)
    client_key = client if client in (source_key, dest_key) else None
    measured_at = _parse_time(network["measured_at"])
    rows = []
    for protocol in protocols:
        tuned = tune_direction(src, dst, path, protocol=protocol, client=client_key)
        row_id = store.save_tuned(tuned.to_dict(), measured_at=measured_at, profile_ids=sorted(set(used)))
        rows.append({"id": row_id, "measured_at": network["measured_at"], **tuned.to_dict()})
    return rows


def light_run(
    store: Store,
    source: HostRunner,
    dest: HostRunner,
    *,
    protocols: Sequence[str] = ("sftp",),
    via: str = "direct",
    quick: bool = False,
    k: int = 3,
    base_interval_s: float = 3600.0,
    max_interval_s: float = 7 * 86400.0,
    tolerance: float = 0.10,
    now: datetime | None = None,
    progress: Progress = _quiet,
) -> dict[str, Any]:
    """The periodic step: light network profile, tuner, back-off state. Returns the new state and tuned rows."""
    link = profile_link(store, source, dest, light=True, via=via, quick=quick, progress=progress)
    tuned = tune_link(store, source.host.key, dest.host.key, protocols=protocols)
    state = store.record_light_result(
        source.host.key,
        dest.host.key,
        link["rtt_ms"],
        link["bandwidth_mbit"],
        k=k,
        tolerance=tolerance,
        base_interval_s=base_interval_s,
        max_interval_s=max_interval_s,
        now=now,
    )
    progress(
        f"{source.host.key} -> {dest.host.key}: next light run in {state['interval_s']:g} s"
        + (f" ({state['last_change']})" if state.get("moved") or state.get("doubled") else "")
    )
    return {"profile": link, "tuned": tuned, "schedule": state}


def _fmt(value: float | None, unit: str) -> str:
    return "unmeasured" if value is None else f"{value:.4g} {unit}"


def _summary(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    if not payload.get("ok"):
        return {"error": payload.get("error")}
    if kind == "disk":
        return {
            side: {
                "best_block": (payload.get(side) or {}).get("best_block"),
                "best_mib_s": (payload.get(side) or {}).get("best_mib_s"),
                "increment": (payload.get(side) or {}).get("increment"),
            }
            for side in ("read", "write")
        }
    if kind == "memory":
        return {k: payload.get(k) for k in ("best_block", "best_mib_s") if k in payload}
    kernel = payload.get("kernel") or {}
    return {k: kernel.get(k) for k in ("tcp_rmem", "tcp_wmem", "rmem_max", "wmem_max", "congestion_control")}


def _describe(kind: str, payload: dict[str, Any]) -> str:
    if not payload.get("ok"):
        return f"FAILED: {payload.get('error')}"
    summary = _summary(kind, payload)
    if kind == "disk":
        return ", ".join(
            f"{side} best block {summary[side]['best_block']} ({summary[side]['best_mib_s']} MiB/s)"
            for side in ("write", "read")
        )
    if kind == "memory":
        return f"best block {summary.get('best_block')} ({summary.get('best_mib_s')} MiB/s)"
    return f"tcp_rmem {summary['tcp_rmem']}, tcp_wmem {summary['tcp_wmem']}, {summary['congestion_control']}"
