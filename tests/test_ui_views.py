"""The UI's data layer and SVG charts on a real SQLite store (no Airflow needed)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from airflow_transfer.plugins import charts, views
from airflow_transfer.store import Store

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def store(tmp_path):
    with Store.open(f"sqlite:///{tmp_path / 'ui.db'}") as s:
        yield s


def _transfer(store, key, chunks, state="succeeded", failed=()):
    record = store.begin_transfer(key, "/src", "sftp://u:secret@h/dst", algorithm="pcp")
    for i, (pp, p, cc, files, secs, mbit) in enumerate(chunks):
        store.record_chunk(
            record.id,
            {
                "id": f"chunk-{i}",
                "pp": pp,
                "p": p,
                "cc": cc,
                "files": files,
                "bytes": files * 1000,
                "seconds": secs,
                "throughput_mbit": mbit,
            },
        )
    summary = {
        "files": sum(c[3] for c in chunks),
        "bytes": 1,
        "throughput_mbit": 42.0,
        "failed": [{"path": p, "error": "boom"} for p in failed],
        "protocol_switches": [],
        "verify": {"algorithm": "sha256", "repaired": 2},
        "connections_lost": 3,
    }
    return store.finish_transfer(record.id, state, summary)


def test_airflow_keys_parse_and_other_keys_do_not():
    assert views.parse_key("airflow:d/t/manual__2026-01-01T00:00:00+00:00/3") == {
        "dag_id": "d",
        "task_id": "t",
        "run_id": "manual__2026-01-01T00:00:00+00:00",
        "map_index": 3,
    }
    # a transfer split into mapped chunks is keyed by its plan task: airflow:<dag>/<run>/<plan task>
    assert views.parse_key("airflow:d/manual__2026-01-01T00:00:00+00:00/plan") == {
        "dag_id": "d",
        "task_id": "plan",
        "run_id": "manual__2026-01-01T00:00:00+00:00",
        "map_index": -1,
    }
    assert views.parse_key("airflow:d/t/r/x/-1") is None
    assert views.parse_key("cli:/a->/b") is None
    assert views.parse_key("airflow:d/t/run/notanumber") is None


def test_users_see_transfers_of_dags_they_can_read_and_cli_transfers(store):
    a = _transfer(store, "airflow:dag_a/t/r1/-1", [(1, 1, 1, 1, 1.0, 1.0)])
    b = _transfer(store, "airflow:dag_b/t/r1/-1", [(1, 1, 1, 1, 1.0, 1.0)])
    cli = _transfer(store, "cli-key", [(1, 1, 1, 1, 1.0, 1.0)])
    ids = {r["id"] for r in views.list_transfers(store, readable_dags={"dag_a"})["transfers"]}
    assert ids == {a.id, cli.id}
    page = views.list_transfers(store, readable_dags=None)
    assert {r["id"] for r in page["transfers"]} == {a.id, b.id, cli.id}
    assert page["dag_ids"] == ["dag_a", "dag_b"]
    assert views.list_transfers(store, readable_dags={"dag_a"})["dag_ids"] == ["dag_a"]
    assert [r["id"] for r in views.list_transfers(store, dag_id="dag_b")["transfers"]] == [b.id]
    with pytest.raises(ValueError, match="unknown state"):
        views.list_transfers(store, state="exploded")
    assert "secret" not in str(page)


def test_detail_lays_chunks_end_to_end_and_counts_failed_and_retried_files(store):
    record = _transfer(
        store, "airflow:d/t/r/-1", [(8, 1, 2, 10, 2.0, 80.0), (16, 2, 4, 20, 1.5, 200.0)], state="failed"
    )
    import pyarrow as pa

    store.record_listing(record.id, pa.table({"path": ["a", "b", "c"], "size": [10, 20, 30], "mtime": [1.0, 1.0, 1.0]}))
    store.mark_done(record.id, "a", 10, attempts=1)
    store.mark_done(record.id, "b", 20, attempts=3)
    store.mark_failed(record.id, "c", "permission denied", attempts=2)
    detail = views.transfer_detail(store, record.id)
    assert [(c["t0"], c["t1"]) for c in detail["chunks"]] == [(0.0, 2.0), (2.0, 3.5)]
    assert detail["failed_files"] == {
        "total": 1,
        "rows": [{"path": "c", "size": 30, "state": "failed", "attempts": 2, "last_error": "permission denied"}],
    }
    assert detail["retried_files"]["total"] == 2
    assert detail["journal"]["percent"] == pytest.approx(100 * 30 / 60, abs=0.1)
    assert detail["repaired"] == 2
    assert detail["connections_lost"] == 3
    assert views.transfer_detail(store, 999) is None
    assert views.latest_for_key(store, "airflow:d/t/r/-1").id == record.id
    assert views.latest_for_key(store, "airflow:d/t/r") is None  # a prefix is not the key


def test_chunk_timestamps_win_over_run_order():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [{"seconds": 1.0, "started_at": (start + timedelta(seconds=5)).isoformat()}]
    timeline = views.chunk_timeline(rows, start)
    assert timeline[0]["t0"] == 5.0 and timeline[0]["timed"]
    timeline[0].update(chunk_id="c", pp=1, p=1, cc=1, files=1, throughput_mbit=1.0)
    assert "seconds since the transfer started" in charts.chunk_chart(timeline)
    untimed = views.chunk_timeline([{**rows[0], "started_at": None}], start)
    untimed[0].update(chunk_id="c", pp=1, p=1, cc=1, files=1, throughput_mbit=1.0)
    assert "end to end" in charts.chunk_chart(untimed)


def test_tuning_page_data_comes_from_the_tuning_library(store):
    empty = views.tuning(store)
    assert empty["recorded"] is False and empty["tuned"] == [] and empty["profiles"] == []
    pid = store.add_profile("hostA", "disk", {"ok": True, "read": {"best_block": 65536, "blob": "x" * 500}})
    store.save_tuned(
        {
            "source": "hostA",
            "destination": "hostB",
            "protocol": "sftp",
            "streams": 2,
            "tcp_buffer": 1 << 20,
            "block_size": 1 << 18,
            "bdp_bytes": 1 << 21,
            "pp_level": 4,
            "p": 2,
            "cc": 3,
            "rtt_ms": 20.0,
            "bandwidth_mbit": 800.0,
            "reasons": ["because"],
        },
        measured_at=datetime(2026, 1, 1, tzinfo=UTC),
        profile_ids=[pid],
    )
    data = views.tuning(store)
    assert data["recorded"] is True
    assert [(t["source_host"], t["dest_host"], t["pp_level"], t["p"], t["cc"]) for t in data["tuned"]] == [
        ("hostA", "hostB", 4, 2, 3)
    ]
    assert data["profiles"][0]["kind"] == "disk"
    assert len(data["profiles"][0]["preview"]) <= views.PAYLOAD_PREVIEW + 4  # long payloads are cut


def test_protocol_page_data_comes_from_the_host_protocol_library(store):
    assert views.protocols(store) == {"library": "protocols", "entries": [], "hosts": [], "recorded": False}
    store.put_host_protocol("h1", "sftp", 22, True, detail="SSH-2.0-OpenSSH_9.2", probe_ms=12)
    store.put_host_protocol("h1", "ftp", 21, False, detail="connection refused", ttl_s=-1)
    data = views.protocols(store)
    assert data["recorded"] and data["hosts"] == ["h1"]
    by_protocol = {e["protocol"]: e for e in data["entries"]}
    assert by_protocol["sftp"]["available"] and by_protocol["sftp"]["fresh"]
    assert not by_protocol["ftp"]["available"] and not by_protocol["ftp"]["fresh"]  # its TTL ran out


def test_switches_recorded_in_the_store_show_while_the_summary_has_none(store):
    record = store.begin_transfer("k", "/a", "sftp://h/b")
    store.record_protocol_switch(
        record.id, {"at": "2026-01-01T00:00:00+00:00", "from": "sftp", "to": "ftp", "reason": "3 consecutive failures"}
    )
    detail = views.transfer_detail(store, record.id)
    assert [(s["from"], s["to"]) for s in detail["protocol_switches"]] == [("sftp", "ftp")]


def test_chunk_chart_draws_one_labelled_bar_per_chunk():
    chunks = views.chunk_timeline(
        [
            {"chunk_id": "c0", "pp": 8, "p": 1, "cc": 2, "files": 3, "seconds": 4.0, "throughput_mbit": 100.0},
            {"chunk_id": "c1", "pp": 16, "p": 2, "cc": 8, "files": 3, "seconds": 4.0, "throughput_mbit": 400.0},
        ],
        None,
    )
    svg = charts.chunk_chart(chunks, average_mbit=250.0)
    root = ET.fromstring(svg)
    bars = root.findall(f"{SVG}g/{SVG}rect")
    assert len(bars) == 2
    heights = [float(b.get("height")) for b in bars]
    assert heights[1] == pytest.approx(4 * heights[0], rel=1e-3)  # height is proportional to throughput
    assert float(bars[1].get("x")) > float(bars[0].get("x"))  # later chunk further right
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "(8,1,2)" in labels and "(16,2,8)" in labels
    assert any("average 250" in (t or "") for t in labels)
    assert "no chunks" in charts.chunk_chart([])


def test_axis_maxima_are_round_numbers():
    assert [charts.nice_ceiling(v) for v in (0, 0.7, 3, 7.5, 11, 260, 999)] == [1, 1, 5, 10, 20, 500, 1000]


def test_loading_the_plugin_stays_cheap(tmp_path):
    """Every Airflow process that loads plugins imports ours; FastAPI and Airflow's API security wait for a request."""
    import subprocess
    import sys

    from tests.support.airflow_env import airflow_env

    code = (
        "import sys; from airflow_transfer.plugins.ui import AirflowTransferPlugin as P; "
        "print(type(P.fastapi_apps[0]['app']).__name__, "
        "'airflow.api_fastapi.core_api.security' in sys.modules, 'fastapi' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=airflow_env(tmp_path / "home"), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-3:] == ["LazyApp", "False", "False"]
