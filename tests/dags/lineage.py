"""Test DAG: every transfer operator once, for the OpenLineage and Asset tests (tests/test_lineage.py).

copy (local -> SFTP through a connection: an AssetAlias), the chunked steps (local -> local with
literal paths from the environment: fixed Assets), and a query (Parquet -> Parquet).
"""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_transfer.operators.chunked import (
    ChunkPlanOperator,
    ChunkTransferOperator,
    DatasetManifestOperator,
    VerifyTransferOperator,
)
from airflow_transfer.operators.query import AttributeQueryTransferOperator
from airflow_transfer.operators.transfer import TunedTransferOperator

# literal paths (not templated): the chunked destination and the query output are fixed Assets
CHUNKED_SRC = os.environ.get("AT_LINEAGE_CHUNKED_SRC", "/tmp/at-lineage/src")
CHUNKED_DST = os.environ.get("AT_LINEAGE_CHUNKED_DST", "/tmp/at-lineage/dst")
QUERY_SRC = os.environ.get("AT_LINEAGE_QUERY_SRC", "/tmp/at-lineage/table.parquet")
QUERY_DST = os.environ.get("AT_LINEAGE_QUERY_DST", "/tmp/at-lineage/selected.parquet")

with DAG(dag_id="test_lineage", schedule=None, catchup=False) as dag:
    TunedTransferOperator(
        task_id="copy",
        src="{{ dag_run.conf['src'] }}",
        dst="{{ dag_run.conf['dst'] }}",
        dst_conn_id="{{ dag_run.conf['conn_id'] }}",
        algorithm="fixed",
        pp=4,
        parallelism=1,
        concurrency=2,
    )
    manifest = DatasetManifestOperator(task_id="manifest", src=CHUNKED_SRC)
    plan = ChunkPlanOperator(task_id="plan", manifest=manifest.output, min_chunks=2)
    move = ChunkTransferOperator.partial(task_id="move", src=CHUNKED_SRC, dst=CHUNKED_DST).expand(chunk=plan.output)
    check = VerifyTransferOperator(
        task_id="verify",
        src=CHUNKED_SRC,
        dst=CHUNKED_DST,
        manifest=manifest.output,
        transfer_key=plan.output["transfer_key"],
    )
    manifest >> plan >> move >> check
    AttributeQueryTransferOperator(
        task_id="query", src=QUERY_SRC, dst=QUERY_DST, select=["station", "humidity"], where="humidity > 50"
    )
