"""Test DAG: DatasetStableSensor in poke mode (no deferral)."""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_transfer.sensors.stable import DatasetStableSensor

with DAG(dag_id="test_sensor_poke", schedule=None, catchup=False) as dag:
    DatasetStableSensor(
        task_id="stable",
        src="{{ dag_run.conf['src'] }}",
        src_conn_id="{{ dag_run.conf['conn_id'] }}",
        stable_for=1,
        poke_interval=0.5,
        deferrable=False,
        mode="poke",
        timeout=120,
    )
