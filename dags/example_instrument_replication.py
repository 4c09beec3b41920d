"""Example: nightly replication of an instrument directory into an archive, chunked over workers.

    wait_until_stable -> manifest -> plan -> transfer_chunk (mapped) -> verify  (-> Asset)

1. DatasetStableSensor waits (deferred, no worker slot held) until the instrument
   has stopped writing: the listing is unchanged for `stable_for` seconds.
2. DatasetManifestOperator lists the directory once into a Parquet manifest.
3. ChunkPlanOperator cuts it into chunk specs (row ranges + pp/p/cc each).
4. ChunkTransferOperator is mapped over the specs, so a Celery or Kubernetes
   executor spreads the chunks over its workers; each chunk is verified end to
   end and journalled into one store transfer. The pool caps how many SSH
   connections all running chunks open on the instrument's link.
5. VerifyTransferOperator compares source and archive digests, repairs what
   differs, closes the transfer record and, on success, emits the archive's Asset
   event (files, bytes and the manifest digest in its extra). The destination is
   templated, so the event goes through the task's AssetAlias
   (``airflow_transfer/example_instrument_replication/verify``) to the Asset
   ``file://<params.dst>``; example_science_pipeline is scheduled on the Asset of
   the default archive, so a run into that archive starts it (docs/lineage.md).

The instrument host is the Airflow connection `params.conn_id` (ssh/sftp: host,
login, key_file and known_hosts or host_key in its extras). Paths and the pool
can be set with AT_INSTRUMENT_* environment variables where the DAG is parsed.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_transfer.operators.chunked import (
    ChunkPlanOperator,
    ChunkTransferOperator,
    DatasetManifestOperator,
    VerifyTransferOperator,
)
from airflow_transfer.sensors.stable import DatasetStableSensor

ARCHIVE_DIR = os.environ.get("AT_INSTRUMENT_ARCHIVE", "/srv/archive/instrument")
# An Airflow pool with N slots caps the link at N connections: each chunk holds
# `max_cc` slots and opens at most that many connections (docs/operators.md).
LINK_POOL = os.environ.get("AT_INSTRUMENT_POOL", "default_pool")
CHUNK_CC = int(os.environ.get("AT_INSTRUMENT_CHUNK_CC", "2"))

with DAG(
    dag_id="example_instrument_replication",
    # nightly, after the instrument's evening runs; AT_INSTRUMENT_SCHEDULE="" leaves only manual runs
    schedule=os.environ.get("AT_INSTRUMENT_SCHEDULE", "0 2 * * *") or None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["airflow-transfer", "example"],
    params={
        "src": Param(os.environ.get("AT_INSTRUMENT_SRC", "/data/instrument/current"), type="string"),
        "conn_id": Param(os.environ.get("AT_INSTRUMENT_CONN", "instrument_sftp"), type="string"),
        "dst": Param(ARCHIVE_DIR, type="string"),
        "stable_for": Param(300, type="number", minimum=0),
        "algorithm": Param("globus", enum=["fixed", "globus", "pcp", "mc", "adaptive-cc", "auto"]),
        "min_chunks": Param(4, type="integer", minimum=1),
    },
) as dag:
    wait = DatasetStableSensor(
        task_id="wait_until_stable",
        src="{{ params.src }}",
        src_conn_id="{{ params.conn_id }}",
        stable_for="{{ params.stable_for }}",
        poke_interval=float(os.environ.get("AT_INSTRUMENT_POLL", "60")),
        timeout=6 * 3600,
        deferrable=True,  # hours of waiting belong in the triggerer, not in a worker slot
    )
    manifest = DatasetManifestOperator(
        task_id="manifest",
        src="{{ params.src }}",
        src_conn_id="{{ params.conn_id }}",
    )
    plan = ChunkPlanOperator(
        task_id="plan",
        manifest=manifest.output,
        algorithm="{{ params.algorithm }}",
        min_chunks="{{ params.min_chunks }}",
        # source and destination select the tuning library's row for this link
        src="{{ params.src }}",
        src_conn_id="{{ params.conn_id }}",
        dst="{{ params.dst }}",
    )
    move = ChunkTransferOperator.partial(
        task_id="transfer_chunk",
        src="{{ params.src }}",
        src_conn_id="{{ params.conn_id }}",
        dst="{{ params.dst }}",
        pool=LINK_POOL,
        pool_slots=CHUNK_CC,
        max_cc=CHUNK_CC,
        progress_interval=5.0,
        retries=2,
    ).expand(chunk=plan.output)
    verify = VerifyTransferOperator(
        task_id="verify",
        src="{{ params.src }}",
        src_conn_id="{{ params.conn_id }}",
        dst="{{ params.dst }}",
        manifest=manifest.output,
        transfer_key=plan.output["transfer_key"],
        repair=True,
        # emits file://<dst> through its AssetAlias; outlets=[Asset("file:///...")] would name it up front
    )
    wait >> manifest >> plan >> move >> verify
