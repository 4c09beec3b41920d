"""The tuning library in the store: profiles, tuned parameters, light-profiler back-off (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_transfer.store import Store
from airflow_transfer.store.tuning_library import next_state
from airflow_transfer.tuning.stork_tuner import DiskFacts, HostFacts, PathFacts, tune_direction
from tests.support.postgres import postgres_server, store_url  # noqa: F401  (fixtures)

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(store_url: str) -> Store:
    with Store.open(store_url) as opened:
        yield opened


def _tuned(src: str, dst: str, rtt_ms: float, mbit: float, protocol: str = "sftp") -> dict:
    disk = DiskFacts(1 << 20, 512 << 10)
    return tune_direction(
        HostFacts(src, disk, disk),
        HostFacts(dst, disk, disk),
        PathFacts(rtt_ms, mbit),
        protocol=protocol,
        mean_file_size=1 << 20,
    ).to_dict()


def test_profiles_are_stored_per_host_and_pair_and_read_back_newest_first(store: Store) -> None:
    old = store.add_profile("h1", "disk", {"ok": True, "read": {"best_block": 4096}}, measured_at=T0)
    new = store.add_profile(
        "h1", "disk", {"ok": True, "read": {"best_block": 8192}}, measured_at=T0 + timedelta(minutes=5)
    )
    failed = store.add_profile("h1", "disk", {"ok": False, "error": "no space"}, measured_at=T0 + timedelta(minutes=9))
    net = store.add_profile("localhost", "network", {"ok": True, "summary": {"rtt_ms": 50}}, peer="h1", measured_at=T0)
    assert len({old, new, failed, net}) == 4

    latest = store.latest_profile("h1", "disk")
    assert latest["id"] == new and latest["payload"]["read"]["best_block"] == 8192  # failed ones skipped
    assert latest["measured_at"] == (T0 + timedelta(minutes=5)).isoformat()
    assert store.latest_profile("h1", "disk", ok_only=False)["id"] == failed
    assert store.latest_profile("h1", "network") is None  # a pair profile is not the host's
    pair = store.latest_profile("localhost", ("network", "network-light"), peer="h1")
    assert pair["id"] == net and pair["peer"] == "h1"
    assert [p["id"] for p in store.profiles(host="h1")] == [failed, new, old]
    with pytest.raises(ValueError, match="kind"):
        store.add_profile("h1", "gpu", {"ok": True})


def test_tuned_parameters_per_direction_and_protocol_with_their_provenance(store: Store) -> None:
    p1 = store.add_profile("localhost", "network", {"ok": True}, peer="far", measured_at=T0)
    first = store.save_tuned(_tuned("localhost", "far", 50, 500), measured_at=T0, profile_ids=[p1])
    back = store.save_tuned(_tuned("far", "localhost", 50, 400), measured_at=T0, profile_ids=[p1])
    generic = store.save_tuned(_tuned("localhost", "far", 50, 500, "generic"), measured_at=T0, profile_ids=[p1])
    later = T0 + timedelta(hours=1)
    second = store.save_tuned(_tuned("localhost", "far", 100, 500), measured_at=later, profile_ids=[p1])

    row = store.tuned_for("localhost", "far", "sftp")
    assert row["id"] == second and row["rtt_ms"] == 100 and row["bandwidth_mbit"] == 500
    assert row["bdp_bytes"] == 6_250_000 and row["measured_at"] == later.isoformat()
    assert row["profile_ids"] == [p1] and row["reasons"] and row["params"]["destination"] == "far"
    assert store.tuned_for("far", "localhost")["id"] == back
    assert store.tuned_for("localhost", "nowhere") is None
    assert [r["id"] for r in store.tuned_history("localhost", "far")] == [second, first]

    library = store.tuning_library()
    assert [(r["source_host"], r["dest_host"], r["protocol"], r["id"]) for r in library] == [
        ("far", "localhost", "sftp", back),
        ("localhost", "far", "generic", generic),
        ("localhost", "far", "sftp", second),
    ]
    assert [r["id"] for r in store.tuning_library(protocol="generic")] == [generic]
    import json

    json.dumps(library)  # plain values only: the UI serves them as they are


def test_back_off_doubles_after_k_stable_results_and_resets_when_a_result_moves(store: Store) -> None:
    kw = dict(k=2, base_interval_s=60, max_interval_s=200)
    assert store.light_due("localhost", "far", now=T0)
    state = store.record_light_result("localhost", "far", 50.0, 500.0, now=T0, **kw)
    assert state["interval_s"] == 60 and state["stable_runs"] == 0
    assert state["next_due_at"] == (T0 + timedelta(seconds=60)).isoformat()
    assert not store.light_due("localhost", "far", now=T0 + timedelta(seconds=59))
    assert store.light_due("localhost", "far", now=T0 + timedelta(seconds=60))

    intervals = []
    for i, mbit in enumerate([520.0, 480.0, 505.0, 495.0, 500.0, 510.0], start=1):  # all within 10 %
        state = store.record_light_result("localhost", "far", 51.0, mbit, now=T0 + timedelta(minutes=i), **kw)
        intervals.append(state["interval_s"])
    assert intervals == [60, 120, 120, 200, 200, 200]  # doubles every k=2 stable results, capped at the maximum

    moved = store.record_light_result("localhost", "far", 51.0, 250.0, now=T0 + timedelta(minutes=9), **kw)
    assert moved["moved"] and moved["interval_s"] == 60 and moved["stable_runs"] == 0
    assert "bandwidth" in moved["last_change"] and "-51%" in moved["last_change"]
    assert store.light_schedule("localhost", "far")["last_bandwidth_mbit"] == 250.0
    assert store.light_schedule("far", "localhost") is None
    assert [s["dest_host"] for s in store.light_schedules()] == ["far"]


def test_back_off_rule_edges() -> None:
    kw = dict(k=3, tolerance=0.1, base_interval_s=10, max_interval_s=1000)
    prev = {"interval_s": 10, "stable_runs": 2, "last_rtt_ms": 50.0, "last_bandwidth_mbit": 100.0}
    assert next_state(prev, 54.9, 109.9, **kw)["interval_s"] == 20  # third stable result
    assert next_state(prev, 55.1, 100.0, **kw)["moved"]  # RTT alone moving resets too
    assert not next_state(prev, None, 100.0, **kw)["moved"]  # an unmeasured figure neither moves nor counts against
    lan = {**prev, "last_rtt_ms": 0.5}
    assert not next_state(lan, 1.2, 100.0, **kw)["moved"]  # +140 % but 0.7 ms: timer noise on a LAN
    assert next_state(lan, 1.6, 100.0, **kw)["moved"]
    with pytest.raises(ValueError):
        next_state(None, 1, 1, k=0, tolerance=0.1, base_interval_s=1, max_interval_s=2)
