"""Example: a scientific pipeline that runs whenever the instrument archive receives data.

Scheduled on the archive Asset (its URI) that example_instrument_replication's
verify task emits after a verified replication, so it starts as soon as new data
has arrived, not at a guessed time. The event's extra says what arrived (files,
bytes, manifest digest); the index task logs it. It indexes the archive (per-file
size and sha256, a size summary) into a products directory and publishes the
products to a results host with TunedTransferOperator.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, Param, task

from airflow_transfer.operators.transfer import TunedTransferOperator

ARCHIVE_DIR = os.environ.get("AT_INSTRUMENT_ARCHIVE", "/srv/archive/instrument")
# The URI the replication's verify task gives the archive: file:// + its absolute path (name = URI).
INSTRUMENT_ARCHIVE = Asset(f"file://{os.path.abspath(ARCHIVE_DIR)}")

with DAG(
    dag_id="example_science_pipeline",
    schedule=[INSTRUMENT_ARCHIVE],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["airflow-transfer", "example"],
    params={
        "archive": Param(ARCHIVE_DIR, type="string"),
        "products": Param(os.environ.get("AT_PIPELINE_PRODUCTS", "/srv/products/instrument"), type="string"),
        "results_conn_id": Param(os.environ.get("AT_PIPELINE_CONN", "results_sftp"), type="string"),
        "results_dst": Param(os.environ.get("AT_PIPELINE_RESULTS", "/data/results/instrument"), type="string"),
    },
) as dag:

    @task
    def index_archive(archive: str, products: str, triggering_asset_events=None) -> dict:
        """Per-file size and sha256 of the archive, plus a size summary, as the run's products."""
        import csv
        import hashlib
        import json

        for asset, events in (triggering_asset_events or {}).items():
            for event in events:
                print(f"triggered by {asset} at {event.timestamp} from {event.source_dag_id}: {event.extra}")
        entries = []
        for dirpath, _, names in os.walk(archive):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                entries.append(
                    {"path": os.path.relpath(path, archive), "size": os.path.getsize(path), "sha256": h.hexdigest()}
                )
        entries.sort(key=lambda e: e["path"])
        os.makedirs(products, exist_ok=True)
        with open(os.path.join(products, "index.json"), "w") as f:
            json.dump(entries, f, indent=1)
        with open(os.path.join(products, "sizes.csv"), "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["directory", "files", "bytes"])
            per_dir: dict[str, list[int]] = {}
            for e in entries:
                acc = per_dir.setdefault(os.path.dirname(e["path"]) or ".", [0, 0])
                acc[0] += 1
                acc[1] += e["size"]
            for d, (n, b) in sorted(per_dir.items()):
                out.writerow([d, n, b])
        return {"files": len(entries), "bytes": sum(e["size"] for e in entries)}

    indexed = index_archive("{{ params.archive }}", "{{ params.products }}")
    publish = TunedTransferOperator(
        task_id="publish_products",
        src="{{ params.products }}",
        dst="{{ params.results_dst }}",
        dst_conn_id="{{ params.results_conn_id }}",
        algorithm="fixed",
        pp=8,
        parallelism=1,
        concurrency=2,
    )
    indexed >> publish
