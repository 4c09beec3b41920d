"""End-to-end verification: corruption found and repaired; where digests are computed is reported."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from tests.support.data import temp_files, tree_digest, write_random
from tests.support.sshd import chown_to_user, restricted_sshd


@pytest.fixture(scope="module")
def files(test_base):
    src = test_base / "verify-src"
    for i in range(200):
        write_random(src / f"v{i % 5}" / f"f{i:03d}.bin", 40_000 + 997 * i, seed=500 + i)
    return src


def _flip_first_time(victims: set[str]):
    """Flip one byte of a destination temporary file after it was written, before it is verified."""
    done: set[str] = set()
    lock = threading.Lock()

    def hook(tmp: str) -> None:
        name = os.path.basename(tmp)
        with lock:
            if name not in victims or name in done:
                return
            done.add(name)
        with open(tmp, "r+b") as f:
            f.seek(1234)
            b = f.read(1)
            f.seek(1234)
            f.write(bytes([b[0] ^ 0xFF]))

    return hook, done


def test_corrupted_files_are_detected_and_repaired(files, sshd, remote_dir):
    victims = {".f007.bin.atpart", ".f100.bin.atpart", ".f199.bin.atpart"}
    hook, done = _flip_first_time(victims)
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(files)),
            Endpoint("sftp", str(remote_dir / "v"), sshd.target()),
            TransferParams(pp=8, cc=4),
            before_verify=hook,
            use_store=False,
        )
    )
    assert done == victims  # the faults were really injected
    v = summary["verify"]
    assert v["where"] == "helper" and v["algorithm"] == "sha256"
    assert (v["mismatched"], v["repaired"]) == (3, 3)
    assert v["verified"] == 200 and summary["failed"] == []
    assert tree_digest(remote_dir / "v") == tree_digest(files)
    assert temp_files(remote_dir) == []


def test_persistent_corruption_fails_the_file_with_both_digests(files, sshd, remote_dir):
    def always(tmp: str) -> None:
        if tmp.endswith(".f003.bin.atpart"):
            with open(tmp, "r+b") as f:
                f.write(b"\0\0\0\0")

    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(files)),
            Endpoint("sftp", str(remote_dir / "p"), sshd.target()),
            TransferParams(pp=8, cc=2),
            before_verify=always,
            use_store=False,
        )
    )
    failed = {f["path"]: f["error"] for f in summary["failed"]}
    assert list(failed) == ["v3/f003.bin"]
    assert "checksum mismatch" in failed["v3/f003.bin"] and "source" in failed["v3/f003.bin"]
    assert not (remote_dir / "p" / "v3" / "f003.bin").exists()  # never under its final name


def test_download_and_local_copies_are_verified(files, sshd, remote_dir, local_dir):
    up = run_copy(
        CopyRequest(
            Endpoint("file", str(files)), Endpoint("sftp", str(remote_dir / "d"), sshd.target()), use_store=False
        )
    )
    assert up["failed"] == []
    down = run_copy(
        CopyRequest(
            Endpoint("sftp", str(remote_dir / "d"), sshd.target()),
            Endpoint("file", str(local_dir / "down")),
            TransferParams(pp=4, p=2, cc=2),
            use_store=False,
            bundle=False,  # the SFTP path's own helper; bundled downloads: tests/test_bundle_pull.py
        )
    )
    assert down["verify"]["where"] == "source helper, destination local" and down["verify"]["verified"] == 200
    assert tree_digest(local_dir / "down") == tree_digest(files)
    loc = run_copy(CopyRequest(Endpoint("file", str(files)), Endpoint("file", str(local_dir / "loc")), use_store=False))
    assert loc["verify"]["where"] == "local" and loc["verify"]["verified"] == 200


@pytest.mark.parametrize("case", ["no-python", "no-exec"])
def test_fallbacks_are_reported(case, files, test_base):
    base = test_base / f"sshd-{case}"
    server = restricted_sshd(base, case)
    try:
        dst = base / "dst"
        dst.mkdir()
        chown_to_user(dst, server.user)
        summary = run_copy(
            CopyRequest(
                Endpoint("file", str(files)),
                Endpoint("sftp", str(dst / "x"), server.target()),
                TransferParams(pp=8, cc=2),
                use_store=False,
            )
        )
        v = summary["verify"]
        assert v["verified"] == 200 and summary["failed"] == []
        assert v["where"] == ("coreutils" if case == "no-python" else "read-back")
        if case == "no-python":
            assert "helper unavailable" in v["why"]
        else:  # ForceCommand: the one true cause is that exec runs nothing of ours
            assert "runs no command of ours over SSH exec" in v["why"]
            assert "coreutils" not in v["why"] and "python3 helper unavailable" not in v["why"]
        assert tree_digest(dst / "x") == tree_digest(files)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_local_digests_of_a_batch_run_on_threads_in_order_with_per_file_errors(tmp_path: Path) -> None:
    # A local destination fsyncs and reads back a batch's files on several threads; each
    # answer must still land on its own file, and a missing file fails alone.
    import hashlib

    from airflow_transfer.engine import verify

    items, expected = [], []
    for i in range(3 * verify.LOCAL_THREADS + 1):
        path = tmp_path / f"f{i}"
        data = os.urandom(1000 + i)
        path.write_bytes(data)
        items.append(
            verify.VerifyItem(i, str(path), [verify.Piece(0, 500, ""), verify.Piece(500, len(data) - 500, "")])
        )
        expected.append([hashlib.sha256(data[:500]).hexdigest(), hashlib.sha256(data[500:]).hexdigest()])
    items[5].tmp = str(tmp_path / "gone")
    dest = verify.DestinationDigests("sha256", None)
    try:
        out = dest.digests(items)
        workers = {t.name for t in threading.enumerate() if t.name.startswith("verify-local")}
    finally:
        dest.close()
    assert isinstance(out[5], FileNotFoundError)
    assert [o for k, o in enumerate(out) if k != 5] == [e for k, e in enumerate(expected) if k != 5]
    assert workers  # the batch went through the thread pool
    assert not any(t.name.startswith("verify-local") for t in threading.enumerate())  # close() ends them
