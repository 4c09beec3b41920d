"""A task that fails on a core error keeps that error as its cause (operators/failures.py)."""

from __future__ import annotations

import airflow  # noqa: F401 - installed with the project; a missing Airflow must fail, not skip
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_transfer.errors import TransferError, UsageError
from airflow_transfer.operators.failures import task_error
from airflow_transfer.query.expr import QueryError


def test_transfer_error_becomes_runtime_error_with_the_same_message():
    exc = TransferError("source does not exist", "/x", "check the source path")
    err = task_error(exc)
    assert type(err) is RuntimeError and str(err) == exc.message == "source does not exist (/x): check the source path"


def test_usage_error_fails_without_retry_with_the_same_message():
    exc = UsageError("no such file", "/x", "check the path")
    err = task_error(exc)
    assert type(err) is AirflowFailException and str(err) == exc.message == "no such file (/x): check the path"


def test_query_error_fails_without_retry_with_a_caret():
    exc = QueryError("unknown column 'z'", "z > 1", 0)
    err = task_error(exc)
    assert type(err) is AirflowFailException
    assert str(err) == f"{exc.message}\n  z > 1\n  ^"


def test_sensor_keeps_the_core_error_as_cause(local_dir):
    from airflow_transfer.sensors.stable import DatasetStableSensor

    sensor = DatasetStableSensor(task_id="wait", src=str(local_dir / "missing"), deferrable=False, stable_for=0)
    with pytest.raises(RuntimeError, match="source does not exist") as info:
        sensor.poke({})
    assert isinstance(info.value.__cause__, TransferError)
    assert info.value.__cause__.message == str(info.value)


def test_manifest_operator_keeps_the_core_error_as_cause(local_dir):
    from airflow_transfer.operators.chunked import DatasetManifestOperator

    class TI:
        dag_id, run_id, task_id = "d", "r", "manifest"

    op = DatasetManifestOperator(task_id="manifest", src=str(local_dir / "missing"), staging_dir=str(local_dir))
    with pytest.raises(RuntimeError, match="source does not exist") as info:
        op.execute({"ti": TI()})
    assert isinstance(info.value.__cause__, TransferError)
