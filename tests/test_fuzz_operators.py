"""Operator arguments (property-based): a DAG author's mistake fails when the DAG is
parsed, with ValueError (or our UsageError) naming the argument - never a TypeError or
AttributeError from deep inside, and never a half-built operator."""

from __future__ import annotations

import airflow  # noqa: F401 - installed with the project; a missing Airflow must fail, not skip
import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_transfer.errors import TransferError
from tests.support.fuzz import ODD_TEXT, fuzz, urls

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    ODD_TEXT,
    urls(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(ODD_TEXT, st.integers(), max_size=2),
)
CLEAR = (ValueError, TransferError)


def _construct(cls, kwargs):
    from airflow.sdk import DAG

    with DAG("fuzz_operator_args", schedule=None):
        try:
            return cls(task_id="t", **kwargs)
        except CLEAR as exc:
            assert str(exc).strip(), (cls.__name__, kwargs)
            return None


def _ops():
    from airflow_transfer.operators.chunked import (
        ChunkPlanOperator,
        ChunkTransferOperator,
        DatasetManifestOperator,
        VerifyTransferOperator,
    )
    from airflow_transfer.operators.query import AttributeQueryTransferOperator
    from airflow_transfer.operators.transfer import TunedTransferOperator
    from airflow_transfer.sensors.protocols import ProtocolAvailableSensor
    from airflow_transfer.sensors.stable import DatasetStableSensor

    return {
        TunedTransferOperator: dict(src="/tmp/a", dst="/tmp/b"),
        ChunkPlanOperator: dict(manifest="file:///tmp/m.parquet"),
        ChunkTransferOperator: dict(chunk={}, src="/tmp/a", dst="/tmp/b"),
        DatasetManifestOperator: dict(src="/tmp/a"),
        VerifyTransferOperator: dict(src="/tmp/a", dst="/tmp/b", manifest="file:///tmp/m.parquet"),
        AttributeQueryTransferOperator: dict(src="/tmp/a.parquet", dst="/tmp/b.parquet"),
        ProtocolAvailableSensor: dict(protocols=["sftp"], host="host.invalid"),
        DatasetStableSensor: dict(src="/tmp/a"),
    }


PARAMS = {
    "TunedTransferOperator": [
        "src",
        "dst",
        "pairs",
        "pp",
        "parallelism",
        "concurrency",
        "algorithm",
        "verify",
        "verify_mode",
        "rtt_ms",
        "bandwidth_mbit",
        "progress_interval",
        "retries_per_file",
        "deadline",
        "alt_protocols",
        "switch_after",
        "probe_interval",
    ],
    "ChunkPlanOperator": [
        "algorithm",
        "pp",
        "parallelism",
        "concurrency",
        "chunk_bytes",
        "min_chunks",
        "rtt_ms",
        "bandwidth_mbit",
        "algorithm_options",
    ],
    "ChunkTransferOperator": ["chunk", "max_cc", "verify", "progress_interval", "retries_per_file", "deadline"],
    "DatasetManifestOperator": ["src", "staging_dir", "manifest_name"],
    "VerifyTransferOperator": ["algorithm", "repair", "fail_on_mismatch"],
    "AttributeQueryTransferOperator": ["select", "where", "format", "progress_interval"],
    "ProtocolAvailableSensor": ["protocols", "conn_id", "host", "ports", "mode"],
    "DatasetStableSensor": ["src", "stable_for"],
}


@st.composite
def operator_calls(draw):
    ops = _ops()
    cls = draw(st.sampled_from(sorted(ops, key=lambda c: c.__name__)))
    kwargs = dict(ops[cls])
    for name in draw(st.lists(st.sampled_from(PARAMS[cls.__name__]), min_size=1, max_size=3, unique=True)):
        kwargs[name] = draw(VALUES)
    return cls, kwargs


@fuzz(250)
@given(call=operator_calls())
def test_operator_arguments(call):
    cls, kwargs = call
    _construct(cls, kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(pp="8"),
        dict(pp=2.5),
        dict(parallelism=None),
        dict(concurrency=[4]),
        dict(algorithm=None),
        dict(algorithm=3),
        dict(verify_mode=None),
        dict(rtt_ms="x", bandwidth_mbit=1),
        dict(rtt_ms=float("nan"), bandwidth_mbit=1.0),
        dict(retries_per_file=0),
        dict(deadline=-1),
        dict(progress_interval=-1),
        dict(alt_protocols=[1]),
        dict(transfer_key=""),
        dict(switch_after="3"),
    ],
)
def test_transfer_operator_rejects_at_parse_time(kwargs):
    """Each of these fails the DAG import with a clear error instead of the task at run time."""
    from airflow.sdk import DAG

    from airflow_transfer.operators.transfer import TunedTransferOperator

    with DAG("fuzz_operator_args", schedule=None), pytest.raises(CLEAR) as info:
        TunedTransferOperator(task_id="t", src="/tmp/a", dst="/tmp/b", **kwargs)
    assert str(info.value).strip()
