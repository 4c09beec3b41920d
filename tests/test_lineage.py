"""OpenLineage events and Asset events of the transfer operators, in real Airflow (dag.test()).

The OpenLineage provider's own listener writes the events (its file transport) while the DAG runs;
the Asset events and the queue that schedules the downstream DAG are read back from Airflow's
metadata database, the way the scheduler reads them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_transfer.manifest import Manifest
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.naming import DatasetName, dataset_name, url_dataset_name
from airflow_transfer.protocols.ssh import SSHTarget
from tests.support.airflow_env import REPO, run_dag, sftp_conn_env
from tests.support.data import make_tree, tree_digest
from tests.support.sshd import chown_to_user

LINEAGE_DAG = REPO / "tests" / "dags" / "lineage.py"
REPLICATION = REPO / "dags" / "example_instrument_replication.py"
# Airflow 3.3's task SDK stops registering plugins at the first duplicate entry point, and the
# repository on sys.path shows this package's egg-info beside its installed copy: without the
# repository on the path the OpenLineage plugin's listener is registered in the task process.
CLEAN_PATH = {"PYTHONPATH": "", "PYTHONSAFEPATH": "1"}

_DB = r"""
import json
from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
from airflow.models.dag import DagModel
from airflow.utils.session import create_session
with create_session() as s:
    events = [{"uri": m.uri, "extra": e.extra, "dag_id": e.source_dag_id, "task_id": e.source_task_id}
              for e, m in s.query(AssetEvent, AssetModel).join(AssetModel, AssetEvent.asset_id == AssetModel.id)]
    queued = [{"dag_id": q.target_dag_id, "uri": m.uri}
              for q, m in s.query(AssetDagRunQueue, AssetModel).join(AssetModel, AssetDagRunQueue.asset_id == AssetModel.id)]
    # what the scheduler's loop asks: which DAGs are due, and which of them because of Assets
    query, by_assets = DagModel.dags_needing_dagruns(s)
    due = sorted(d.dag_id for d in query)
print("@@" + json.dumps({"events": events, "queued": queued, "due": due, "asset_triggered": sorted(by_assets)}))
"""


_UNPAUSE = r"""
from airflow.models.dag import DagModel
from airflow.utils.session import create_session
with create_session() as s:
    s.query(DagModel).filter(DagModel.dag_id == "example_science_pipeline").update({"is_paused": False})
"""


def _metadata(env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", _DB], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(next(line[2:] for line in proc.stdout.splitlines() if line.startswith("@@")))


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _complete(events: list[dict], task: str) -> list[dict]:
    return [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"test_lineage.{task}"]


def _ends(event: dict, side: str) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in event[side]]


def test_names_follow_the_openlineage_convention():
    target = SSHTarget("archive.example.org", 2222, "alice")
    assert dataset_name(Endpoint("sftp", "/data/run1/", target=target)) == DatasetName(
        "sftp://archive.example.org:2222", "/data/run1"
    )
    assert dataset_name(Endpoint("sftp", "/d", target=SSHTarget("h"))).uri == "sftp://h:22/d"
    assert url_dataset_name("sftp://bob@h/srv//x").uri == "sftp://h:22/srv/x"  # no user: same files
    assert url_dataset_name("/tmp/a/b/") == DatasetName("file", "/tmp/a/b")
    assert url_dataset_name("file:///tmp/a").uri == "file:///tmp/a"
    assert url_dataset_name("s3://bucket/prefix/key") == DatasetName("s3://bucket", "prefix/key")
    assert url_dataset_name("s3://bucket").uri == "s3://bucket/"
    assert url_dataset_name("ftp://h/pub").uri == "ftp://h:21/pub"
    assert url_dataset_name("sftp://[::1]:2022/x").namespace == "sftp://[::1]:2022"


def test_manifest_digest_ignores_listing_order_and_mtimes():
    a = Manifest(pa.table({"path": ["b", "a"], "size": [2, 1], "mtime": [1.0, 2.0]}))
    b = Manifest(pa.table({"path": ["a", "b"], "size": [1, 2], "mtime": [9.0, 9.0]}))
    c = Manifest(pa.table({"path": ["a", "b"], "size": [1, 3], "mtime": [9.0, 9.0]}))
    assert a.digest() == b.digest() != c.digest()
    assert a.digest().startswith("sha256:") and len(a.digest()) == len("sha256:") + 64


def test_operators_emit_openlineage_datasets_and_asset_events(airflow_home, sshd, remote_dir, local_dir):
    src = make_tree(local_dir / "ol-src", small=12, seed=71)
    csrc = make_tree(local_dir / "ol-csrc", small=9, seed=72)
    table = local_dir / "ol-table.parquet"
    pq.write_table(pa.table({"station": ["a", "b", "c"], "humidity": [40, 60, 70]}), table)
    dst = remote_dir / "ol-dst"
    events = local_dir / "ol-events.jsonl"
    env = {
        **sftp_conn_env("at_lineage", sshd),
        **CLEAN_PATH,
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "tests" / "dags"),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events), "append": True}),
        # the first event of a process imports the client: generous on a loaded machine
        "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "300",
        "AIRFLOW__AIRFLOW_TRANSFER__STAGING_DIR": str(local_dir / "ol-staging"),
        "AT_LINEAGE_CHUNKED_SRC": str(csrc),
        "AT_LINEAGE_CHUNKED_DST": str(local_dir / "ol-cdst"),
        "AT_LINEAGE_QUERY_SRC": str(table),
        "AT_LINEAGE_QUERY_DST": str(local_dir / "ol-selected.parquet"),
    }
    result, log = run_dag(
        airflow_home,
        LINEAGE_DAG,
        "test_lineage",
        {"src": str(src), "dst": str(dst), "conn_id": "at_lineage"},
        extra_env=env,
    )
    assert result["state"].endswith("success"), log[-4000:]
    assert tree_digest(dst) == tree_digest(src)
    got = _events(events)
    sftp_ns = f"sftp://{sshd.host}:{sshd.port}"

    # one whole copy: local source -> SFTP destination, with what it moved
    summary = result["xcom"]["copy.return_value"]
    (copy,) = _complete(got, "copy")
    assert _ends(copy, "inputs") == [("file", str(src))]
    assert _ends(copy, "outputs") == [(sftp_ns, str(dst))]
    out = copy["outputs"][0]
    assert out["outputFacets"]["outputStatistics"]["fileCount"] == summary["files"] == 14
    assert out["outputFacets"]["outputStatistics"]["size"] == summary["bytes"]
    assert out["facets"]["version"]["datasetVersion"] == summary["manifest_digest"]
    assert copy["inputs"][0]["inputFacets"]["inputStatistics"]["size"] == summary["bytes"]
    start = [e for e in got if e["eventType"] == "START" and e["job"]["name"] == "test_lineage.copy"]
    assert _ends(start[0], "outputs") == [(sftp_ns, str(dst))]  # known before the copy starts

    # the chunked steps: manifest reads the source; each chunk and the verification write the destination
    info = result["xcom"]["manifest.return_value"]
    (manifest,) = _complete(got, "manifest")
    assert _ends(manifest, "inputs") == [("file", str(csrc))] and manifest["outputs"] == []
    assert manifest["inputs"][0]["facets"]["version"]["datasetVersion"] == info["manifest_digest"]
    moves = _complete(got, "move")
    assert len(moves) == 2 and all(_ends(m, "outputs") == [("file", str(local_dir / "ol-cdst"))] for m in moves)
    assert sum(m["outputs"][0]["outputFacets"]["outputStatistics"]["fileCount"] for m in moves) == info["files"]
    (verify,) = _complete(got, "verify")
    assert _ends(verify, "inputs") == [("file", str(csrc))]
    assert verify["outputs"][0]["facets"]["version"]["datasetVersion"] == info["manifest_digest"]

    # the query: rows scanned in, rows selected out
    (query,) = _complete(got, "query")
    assert query["inputs"][0]["inputFacets"]["inputStatistics"]["rowCount"] == 3
    assert query["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 2

    # Asset events: the copy's templated destination through its alias, the literal ones directly
    db = _metadata({**airflow_home, **env})
    mine = {e["task_id"]: e for e in db["events"] if e["dag_id"] == "test_lineage"}
    assert set(mine) == {"copy", "verify", "query"}  # chunks and the manifest emit none
    assert mine["copy"]["uri"] == f"{sftp_ns}{dst}"
    assert mine["copy"]["extra"]["files"] == 14 and mine["copy"]["extra"]["bytes"] == summary["bytes"]
    assert mine["copy"]["extra"]["manifest_digest"] == summary["manifest_digest"]
    assert mine["copy"]["extra"]["source"] == [f"file://{src}"]
    assert mine["verify"]["uri"] == f"file://{local_dir / 'ol-cdst'}"
    assert mine["verify"]["extra"]["manifest_digest"] == info["manifest_digest"]
    assert mine["verify"]["extra"]["verified_ok"] is True
    assert mine["query"]["extra"]["rows"] == 2 and mine["query"]["extra"]["files"] == 1


def test_replication_asset_event_queues_the_science_pipeline(airflow_home, sshd, remote_dir, local_dir):
    src = make_tree(remote_dir / "asset-inst", small=15, seed=73)
    chown_to_user(src, sshd.user)
    archive = local_dir / "asset-archive"
    env = {
        **sftp_conn_env("at_instrument", sshd),
        "AT_INSTRUMENT_POLL": "0.2",
        # the pipeline (parsed from the same folder by dag.test()) schedules on this archive's Asset
        "AT_INSTRUMENT_ARCHIVE": str(archive),
        "AIRFLOW__AIRFLOW_TRANSFER__STAGING_DIR": str(local_dir / "asset-staging"),
        # Airflow queues runs only for unpaused DAGs: the pipeline as a user would have it, whether
        # this run creates it (dag.test() syncs the whole folder) or an earlier test did
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    }
    proc = subprocess.run([sys.executable, "-c", _UNPAUSE], env=airflow_home, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    conf = {
        "src": str(src),
        "conn_id": "at_instrument",
        "dst": str(archive),
        "stable_for": 0,
        "algorithm": "fixed",
        "min_chunks": 2,
    }
    result, log = run_dag(airflow_home, REPLICATION, "example_instrument_replication", conf, extra_env=env)
    assert result["state"].endswith("success"), log[-4000:]
    assert tree_digest(archive) == tree_digest(src)
    info = result["xcom"]["manifest.return_value"]

    db = _metadata({**airflow_home, **env})
    uri = f"file://{archive}"
    (event,) = [e for e in db["events"] if e["dag_id"] == "example_instrument_replication" and e["uri"] == uri]
    assert event["task_id"] == "verify"
    assert event["extra"]["files"] == info["files"] == 17 and event["extra"]["bytes"] == info["bytes"]
    assert event["extra"]["manifest_digest"] == info["manifest_digest"]
    assert event["extra"]["verified_ok"] is True
    # the scheduler's view: the pipeline is queued on that Asset and due for an asset-triggered run
    assert {"dag_id": "example_science_pipeline", "uri": uri} in db["queued"]
    assert "example_science_pipeline" in db["due"] and "example_science_pipeline" in db["asset_triggered"]
