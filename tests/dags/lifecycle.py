"""Test DAGs for how a transfer ends (tests/test_lifecycle.py).

``test_lifecycle_fail_fast``: two copies that cannot succeed, each allowed three retries
with no delay. ``unknown_host_key`` meets a host key its connection does not know (a retry
cannot fix that: the task must fail on its first try); ``refused`` meets a port where
nothing listens (the server may be up on the next try: Airflow must retry it).

``test_lifecycle_killed``: one copy long enough to be stopped by SIGTERM while it runs.

``test_lifecycle_chunk_fails`` / ``test_lifecycle_chunk_retried``: a distributed copy
(manifest -> plan -> mapped chunks -> verify) into a destination the login may not write;
its chunks have no retry in the first, one in the second, whose retry callback prints the
shared transfer's state between the two tries.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import DAG

from airflow_transfer.operators.chunked import (
    ChunkPlanOperator,
    ChunkTransferOperator,
    DatasetManifestOperator,
    VerifyTransferOperator,
)
from airflow_transfer.operators.transfer import TunedTransferOperator

SRC = os.environ.get("AT_LIFECYCLE_SRC", "/nonexistent/src")
DST = os.environ.get("AT_LIFECYCLE_DST", "/nonexistent/dst")

with DAG(dag_id="test_lifecycle_fail_fast", schedule=None, catchup=False) as fail_fast:
    for task_id, conn_id in (("unknown_host_key", "at_unknown_key"), ("refused", "at_refused")):
        TunedTransferOperator(
            task_id=task_id,
            src=SRC,
            dst=DST,
            dst_conn_id=conn_id,
            algorithm="fixed",
            pp=1,
            parallelism=1,
            concurrency=1,
            retries_per_file=1,
            retries=3,
            retry_delay=timedelta(0),
        )

with DAG(dag_id="test_lifecycle_killed", schedule=None, catchup=False) as killed:
    TunedTransferOperator(
        task_id="copy",
        src=SRC,
        dst=DST,
        dst_conn_id="at_lifecycle_sftp",
        algorithm="fixed",
        pp=2,
        parallelism=1,
        concurrency=1,
    )


def _print_shared_state(context) -> None:
    """on_retry_callback: how the store shows the shared transfer while a retry is pending."""
    from airflow_transfer.store import Store

    with Store.open(os.environ["AIRFLOW__AIRFLOW_TRANSFER__STORE_URL"]) as store:
        for record in store.list_transfers(key_prefix="airflow:test_lifecycle_chunk_retried/"):
            print(f"@@BETWEEN-TRIES@@ {record.id} {record.state}", flush=True)


def _chunked(dag_id: str, retries: int) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, catchup=False) as dag:
        manifest = DatasetManifestOperator(task_id="manifest", src=SRC)
        plan = ChunkPlanOperator(task_id="plan", manifest=manifest.output, pp=2, concurrency=1, min_chunks=2)
        move = ChunkTransferOperator.partial(
            task_id="move",
            src=SRC,
            dst=DST,
            dst_conn_id="at_lifecycle_sftp",
            retries_per_file=1,
            retries=retries,
            retry_delay=timedelta(0),
            on_retry_callback=_print_shared_state,
        ).expand(chunk=plan.output)
        check = VerifyTransferOperator(
            task_id="verify",
            src=SRC,
            dst=DST,
            dst_conn_id="at_lifecycle_sftp",
            manifest=manifest.output,
            transfer_key=plan.output["transfer_key"],
        )
        manifest >> plan >> move >> check
    return dag


chunk_fails = _chunked("test_lifecycle_chunk_fails", retries=0)
chunk_retried = _chunked("test_lifecycle_chunk_retried", retries=1)
