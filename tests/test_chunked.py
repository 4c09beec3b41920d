"""Chunked transfers in the core: staged manifest, row-range specs, chunks, verify and repair."""

from __future__ import annotations

import json

import pytest

from airflow_transfer.chunked import (
    plan_chunks,
    run_chunk,
    size_histogram,
    stage_manifest,
    transfer_summary,
    verify_tree,
)
from airflow_transfer.engine.params import TransferParams
from airflow_transfer.errors import TransferError
from airflow_transfer.protocols.endpoint import Endpoint
from tests.support.data import make_tree, temp_files, tree_digest


def test_histogram_classes():
    h = size_histogram([0, 4095, 4096, 70_000, 5 << 30])
    assert [x["files"] for x in h] == [2, 1, 1, 0, 0, 0, 1]
    assert h[-1]["bytes"] == 5 << 30 and sum(x["bytes"] for x in h) == 4095 + 4096 + 70_000 + (5 << 30)


def test_download_in_chunks_then_verify_and_repair(sshd, remote_dir, local_dir, isolated_store):
    src_tree = make_tree(remote_dir / "instrument", small=60, seed=31)
    src = Endpoint("sftp", str(src_tree), sshd.target())
    dst = Endpoint("file", str(local_dir / "archive"))
    info = stage_manifest(src, str(local_dir / "staging"), "run1/manifest")
    assert info["files"] == 62 and info["manifest"].startswith("file://")
    assert (
        sum(h["files"] for h in info["histogram"]) == 62 and sum(h["bytes"] for h in info["histogram"]) == info["bytes"]
    )

    specs = plan_chunks(
        info, algorithm="fixed", params=TransferParams(pp=4, p=1, cc=2), transfer_key="test:chunked/run1", min_chunks=3
    )
    assert len(specs) == 3
    assert [s["start"] for s in specs] == [0, specs[0]["stop"], specs[1]["stop"]] and specs[-1]["stop"] == 62
    assert all(len(json.dumps(s)) < 600 and "path" not in s for s in specs)  # row ranges, no file lists
    assert all((s["params"]["pp"], s["params"]["cc"]) == (4, 2) for s in specs)

    summaries = [run_chunk(s, src, dst, progress_interval=0.2) for s in specs]
    assert all(s["failed"] == [] for s in summaries)
    assert len({s["transfer_id"] for s in summaries}) == 1  # the chunks share one transfer record
    assert sum(s["files"] for s in summaries) == 62
    assert tree_digest(dst.path) == tree_digest(src_tree)
    assert temp_files(local_dir / "archive") == []
    again = run_chunk(specs[1], src, dst)  # an Airflow retry of a chunk: same transfer, nothing re-sent
    assert again["transfer_id"] == summaries[0]["transfer_id"]
    assert again["files_skipped"] == specs[1]["files"] and again["bytes_moved"] == 0

    clean = verify_tree(src, dst, info)
    assert clean["ok"] and clean["verified"] == 62 and clean["where"]["source"] == "helper"

    victim = local_dir / "archive" / "d1" / "e1" / "f0001.dat"
    data = bytearray(victim.read_bytes())
    data[0] ^= 0xFF
    victim.write_bytes(bytes(data))
    (local_dir / "archive" / "d2" / "e2" / "f0002.dat").unlink()
    report = verify_tree(src, dst, info)
    assert not report["ok"] and report["mismatched"] == 2
    assert {p["problem"] for p in report["problems"]} == {"digest differs", "missing"}
    fixed = verify_tree(src, dst, info, repair=True)
    assert fixed["ok"] and fixed["repaired"] == 2
    assert tree_digest(dst.path) == tree_digest(src_tree)

    final = transfer_summary(None, "test:chunked/run1", verify=fixed)
    assert final["files"] == 62 and len(final["chunks"]) == 4  # the re-run chunk has its own row
    from airflow_transfer.store import Store

    with Store.open() as store:
        rows = store.chunks(summaries[0]["transfer_id"])
    assert len(rows) == 4 and all(r.started_at and r.ended_at and r.ended_at >= r.started_at for r in rows)


def test_changed_manifest_is_refused(sshd, remote_dir, local_dir):
    src_tree = make_tree(remote_dir / "inst2", small=5, seed=32)
    src = Endpoint("sftp", str(src_tree), sshd.target())
    info = stage_manifest(src, str(local_dir / "staging"), "m")
    specs = plan_chunks(info, transfer_key="test:chunked/run2")
    spec = dict(specs[0], bytes=specs[0]["bytes"] + 1)
    with pytest.raises(TransferError, match="does not match its manifest"):
        run_chunk(spec, src, Endpoint("file", str(local_dir / "out")), use_store=False)


def test_min_chunks_splits_by_bytes_and_never_beyond_one_file_per_chunk(local_dir):
    from tests.support.data import write_random

    src = local_dir / "split"
    for i in range(5):
        write_random(src / f"f{i}.bin", 1000 * (i + 1), i)
    info = stage_manifest(Endpoint("file", str(src)), str(local_dir / "staging"), "split")
    specs = plan_chunks(info, transfer_key="k", min_chunks=3)
    assert len(specs) == 3 and sum(s["files"] for s in specs) == 5
    assert specs[-1]["files"] >= 1 and all(s["stop"] == n["start"] for s, n in zip(specs, specs[1:]))
    assert len(plan_chunks(info, transfer_key="k", min_chunks=50)) == 5  # one file per chunk at most


def test_plan_starts_from_the_tuning_library(sshd, remote_dir, local_dir, tmp_path):
    from airflow_transfer.chunked import starting_point
    from airflow_transfer.store import Store
    from tests.support.cli import run_cli, ssh_args

    url = f"sqlite:///{tmp_path / 'library.db'}"
    res = run_cli(
        "profile",
        sshd.url(str(remote_dir)),
        "--quick",
        "--json",
        *ssh_args(sshd),
        env={"AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": url},
    )
    assert res.code == 0, res.err
    with Store.open(url) as store:
        row = store.tuned_for(f"{sshd.host}:{sshd.port}", "localhost", "sftp")
    src_tree = make_tree(remote_dir / "lib", small=20, seed=35)
    src = Endpoint("sftp", str(src_tree), sshd.target())
    dst = Endpoint("file", str(local_dir / "lib-out"))
    link, start = starting_point(src, dst, None, store_url=url, algorithm="globus")
    assert start.source == f"library (measured {row['measured_at']})" and start.summary()["library_id"] == row["id"]
    assert link.rtt_s * 1000 == pytest.approx(row["rtt_ms"], abs=1e-3)
    info = stage_manifest(src, str(local_dir / "staging"), "lib")
    specs = plan_chunks(info, algorithm="globus", link=link, start=start, transfer_key="k-lib")
    assert specs and all(s["params"]["block_size"] == (row["block_size"] or 0) for s in specs)
    given, start2 = starting_point(
        src, dst, link.__class__(rtt_s=0.08, bandwidth_bps=1e8, source="given"), store_url=url, algorithm="globus"
    )
    assert start2.source == "given"  # given figures win over the library
