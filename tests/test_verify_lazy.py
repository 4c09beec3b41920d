"""The file-level verifier opens its connection and checksum helper with its first batch, not
when the chunk starts (engine/verify.py): a chunk whose files all travel in bundles, checked by
the bundle helpers, never opens them, and a failure to open is retried as a dropped channel is.
Over a real sshd; the spies only count and fail calls into our own DestinationDigests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_transfer.engine import verify_digests
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from tests.support.data import temp_files, tree_digest, write_random


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lazy") / "small"
    for i in range(60):
        write_random(root / f"d{i % 3}" / f"f{i:02d}.dat", 3000 + 101 * i, seed=i)
    return root


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Each start() of a verifier side that has a connection pool to open from."""
    seen: list[str] = []
    start = verify_digests.DestinationDigests.start

    def spy(self) -> None:
        if self.pool is not None:
            seen.append(self.algorithm)
        return start(self)

    monkeypatch.setattr(verify_digests.DestinationDigests, "start", spy)
    return seen


def _copy(src: Path, dst: Path, sshd, *, bundle: bool, upload: bool = True) -> dict:
    remote = Endpoint("sftp", str(dst if upload else src), sshd.target())
    local = Endpoint("file", str(src if upload else dst))
    return run_copy(
        CopyRequest(
            local if upload else remote,
            remote if upload else local,
            verify_mode="file",
            bundle=bundle,
            use_store=False,
        )
    )


@pytest.mark.parametrize("upload", [True, False], ids=["upload", "download"])
def test_bundled_files_never_open_the_file_verifier(small, sshd, remote_dir, tmp_path, opened, upload):
    if upload:
        src, dst = small, remote_dir / "up"
    else:
        src, dst = remote_dir / "down-src", tmp_path / "down"
        shutil.copytree(small, src)
    summary = _copy(src, dst, sshd, bundle=True, upload=upload)
    assert summary["failed"] == [] and summary["verify"]["verified"] == 60
    assert tree_digest(dst) == tree_digest(small) and temp_files(dst) == []
    assert "bundle" in summary["verify"]["where"], summary["verify"]
    assert opened == [], "the file verifier opened a connection no file needed"


def test_files_over_sftp_open_it_with_their_first_batch(small, sshd, remote_dir, opened):
    summary = _copy(small, remote_dir / "sftp", sshd, bundle=False)
    assert summary["failed"] == [] and summary["verify"]["verified"] == 60
    assert tree_digest(remote_dir / "sftp") == tree_digest(small)
    assert opened == ["sha256"], opened  # once, for the destination's side
    assert summary["verify"]["where"] == "helper", summary["verify"]


def test_a_verifier_that_cannot_open_at_first_reconnects_and_verifies(small, sshd, remote_dir, monkeypatch):
    start = verify_digests.DestinationDigests.start
    calls: list[int] = []

    def fails_once(self) -> None:
        calls.append(1)
        if len(calls) == 1 and self.pool is not None:
            raise ConnectionError("injected: the verifier's connection could not be opened")
        return start(self)

    monkeypatch.setattr(verify_digests.DestinationDigests, "start", fails_once)
    dst = remote_dir / "retry"
    summary = _copy(small, dst, sshd, bundle=False)
    assert summary["failed"] == [] and summary["verify"]["verified"] == 60, summary["failed"]
    assert tree_digest(dst) == tree_digest(small) and temp_files(dst) == []
    assert len(calls) >= 2  # opened again after the failure
