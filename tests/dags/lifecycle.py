"""Test DAGs for how a transfer ends (tests/test_lifecycle.py).

``test_lifecycle_fail_fast``: two copies that cannot succeed, each allowed three retries
with no delay. ``unknown_host_key`` meets a host key its connection does not know (a retry
cannot fix that: the task must fail on its first try); ``refused`` meets a port where
nothing listens (the server may be up on the next try: Airflow must retry it).

``test_lifecycle_killed``: one copy long enough to be stopped by SIGTERM while it runs.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import DAG

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
