"""Test DAG: ProtocolAvailableSensor, deferred, waiting for every listed protocol of a host."""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_transfer.sensors.protocols import ProtocolAvailableSensor

with DAG(dag_id="test_protocol_sensor", schedule=None, catchup=False) as dag:
    ProtocolAvailableSensor(
        task_id="wait_for_protocols",
        host="127.0.0.1",
        protocols=["sftp", "ftp"],
        ports={"sftp": int(os.environ["AT_SFTP_PORT"]), "ftp": int(os.environ["AT_FTP_PORT"])},
        mode="all",
        poke_interval=0.5,
        timeout=180,
        deferrable=True,
    )
