"""The transfer summary's shapes (`copy --json`, a chunk's XCom, the overall record) from one builder."""

from __future__ import annotations

import json

import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.engine.result import ChunkResult, FileOutcome
from airflow_transfer.summary import SHAPES, TransferSummary, throughput_mbit

# The `copy --json` object (docs/summary.md, docs/durability.md "Summary fields"), in output order.
COPY_KEYS = [
    "files",
    "bytes",
    "seconds",
    "throughput_mbit",
    "algorithm",
    "src",
    "dst",
    "direction",
    "files_skipped",
    "bytes_moved",
    "skipped_entries",
    "verify",
    "chunks",
    "protocol_switches",
    "ssh_client",
    "tuning",
    "failed",
    "files_resumed",
    "files_retried",
    "bytes_resent",
    "transfer_key",
    "transfer_id",
    "store",
    "manifest_digest",
    "connections_lost",
]
CHUNK_KEYS = [
    "files",
    "bytes",
    "seconds",
    "throughput_mbit",
    "algorithm",
    "src",
    "dst",
    "direction",
    "files_skipped",
    "bytes_moved",
    "verify",
    "chunks",
    "protocol_switches",
    "failed",
    "files_resumed",
    "files_retried",
    "bytes_resent",
    "transfer_key",
    "transfer_id",
    "host",
    "pid",
    "connections_lost",
]
TRANSFER_KEYS = [
    "files",
    "bytes",
    "seconds",
    "throughput_mbit",
    "algorithm",
    "src",
    "dst",
    "files_skipped",
    "bytes_moved",
    "verify",
    "chunks",
    "protocol_switches",
    "tuning",
    "failed",
    "journal",
    "transfer_key",
    "transfer_id",
    "store",
    "manifest_digest",
]


def _result(chunk_id: str, outcomes: list[FileOutcome], **kw) -> ChunkResult:
    return ChunkResult(
        chunk_id,
        TransferParams(pp=4, p=1, cc=2),
        files=len(outcomes),
        bytes=sum(o.size for o in outcomes),
        outcomes=outcomes,
        **kw,
    )


def test_shapes_keep_their_keys_in_order():
    assert list(SHAPES["copy"]) == COPY_KEYS
    assert list(SHAPES["chunk"]) == CHUNK_KEYS
    assert list(SHAPES["transfer"]) == TRANSFER_KEYS


def test_copy_summary_from_engine_results():
    a = _result(
        "chunk-0",
        [
            FileOutcome("a", 10, 10, ok=True),
            FileOutcome("b", 5, ok=True, skipped=True),
            FileOutcome("c", 7, error="permission denied"),
        ],
        bytes_moved=1_000_000,
        seconds=0.5,
        resumed=1,
        retried=2,
        bytes_resent=3,
        started=101.0,
    )
    b = _result("chunk-1", [FileOutcome("d", 1, 1, ok=True)], bytes_moved=250_000, seconds=0.25, retried=1)
    out = TransferSummary.from_results(
        "copy",
        [a, b],
        origin=100.0,
        files=4,
        bytes=23,
        seconds=2.0,
        algorithm="fixed",
        src="s",
        dst="d",
        direction="upload",
        skipped_entries={"symlinks": 0},
        verify={"verified": 3},
        ssh_client=None,
        tuning={"source": "given"},
        transfer_key="k",
        transfer_id=None,
        store=None,
        server={"version": 3},
        extra={"replicas": []},
    ).as_dict()
    assert list(out) == COPY_KEYS + ["server", "replicas"]
    assert out["seconds"] == 2.0 and out["throughput_mbit"] == 5.0  # 1.25 MB in 2 s
    assert out["bytes_moved"] == 1_250_000 and out["files_skipped"] == 1
    assert out["failed"] == [{"path": "c", "error": "permission denied"}]
    assert (out["files_resumed"], out["files_retried"], out["bytes_resent"]) == (1, 3, 3)
    assert [c["id"] for c in out["chunks"]] == ["chunk-0", "chunk-1"]
    assert out["chunks"][0]["start_s"] == 1.0 and "start_s" not in out["chunks"][1]  # b has no start time
    assert out["protocol_switches"] == [] and out["ssh_client"] is None and out["store"] is None
    json.dumps(out)


def test_chunk_and_transfer_shapes_leave_out_what_they_do_not_have():
    r = _result("chunk-001-of-002", [FileOutcome("a", 3, 3, ok=True)], bytes_moved=3, seconds=0.1)
    chunk = TransferSummary.from_results(
        "chunk",
        [r],
        files=1,
        bytes=3,
        seconds=0.0,
        algorithm="fixed",
        src="s",
        dst="d",
        direction="download",
        transfer_key="k",
        transfer_id=7,
        host="w1",
        pid=42,
    ).as_dict()
    assert list(chunk) == CHUNK_KEYS and chunk["throughput_mbit"] == 0.0 and "start_s" not in chunk["chunks"][0]
    total = TransferSummary(
        "transfer",
        files=1,
        bytes=3,
        seconds=1e-6,
        bytes_moved=0,
        algorithm="fixed",
        src="s",
        dst="d",
        journal={"done": {"files": 1, "bytes": 3}},
        transfer_key="k",
        transfer_id=7,
        store="sqlite:///x",
    ).as_dict()
    assert list(total) == TRANSFER_KEYS
    assert total["verify"] == {} and total["tuning"] == {} and total["files_skipped"] == 0


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind"):
        TransferSummary("bogus", files=0, bytes=0, seconds=0.0, algorithm="fixed", src="", dst="")


@pytest.mark.parametrize("moved, seconds, mbit", [(0, 0.0, 0.0), (10, -1.0, 0.0), (125_000, 1.0, 1.0), (1, 3.0, 0.0)])
def test_throughput_is_rounded_mbit(moved, seconds, mbit):
    assert throughput_mbit(moved, seconds) == mbit
