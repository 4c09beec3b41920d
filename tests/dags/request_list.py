"""Test DAG: one TunedTransferOperator task with pairs= (a request list)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_transfer.operators.transfer import TunedTransferOperator

with DAG(dag_id="test_request_list", schedule=None, catchup=False) as dag:
    TunedTransferOperator(task_id="copy_pairs", pairs="{{ dag_run.conf['pairs'] | tojson }}", algorithm="globus")
