"""ProtocolAvailableSensor defers under dag.test() and resumes when the last protocol comes up."""

from __future__ import annotations

import os

import pytest

from airflow_transfer.store import Store
from tests.support.airflow_env import REPO, start_dag
from tests.support.servers import FTPServer
from tests.support.sshd import free_port

pytestmark = pytest.mark.airflow


def test_sensor_defers_until_all_protocols_answer(airflow_home, sshd, test_base):
    ftp_port = free_port()
    env = {
        "AT_SFTP_PORT": str(sshd.port),
        "AT_FTP_PORT": str(ftp_port),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "tests" / "dags"),
    }  # dag.test() needs the file in the bundle
    run = start_dag(
        airflow_home, REPO / "tests" / "dags" / "protocol_sensor.py", "test_protocol_sensor", {}, extra_env=env
    )
    ftp = None
    try:
        # Deferred: the trigger probes while ftp is still down.
        assert run.wait_for("running trigger in line", timeout=240), "".join(run.lines)[-4000:]
        assert run.wait_for("ftp:", timeout=60), "".join(run.lines)[-4000:]
        ftp = FTPServer(root="/", port=ftp_port).start()
        result, log = run.result(timeout=300)
    finally:
        if ftp is not None:
            ftp.stop()
    assert result["state"].endswith("success"), log[-4000:]
    value = result["xcom"]["wait_for_protocols.return_value"]
    assert value["host"] == "127.0.0.1" and value["available"] == ["sftp", "ftp"]
    assert "ftp" in log and "connect failed" in log  # it saw ftp down first
    with Store.open(os.environ["AIRFLOW__AIRFLOW_TRANSFER__STORE_URL"]) as store:
        rows = {(r["protocol"], r["port"]): r["available"] for r in store.host_protocols("127.0.0.1")}
    assert rows[("sftp", sshd.port)] and rows[("ftp", ftp_port)]
