"""Byte-identical upload and download over a real OpenSSH sshd."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree, temp_files, tree_digest

DESIGN_FIELDS = {
    "files",
    "bytes",
    "seconds",
    "throughput_mbit",
    "algorithm",
    "verify",
    "chunks",
    "protocol_switches",
    "tuning",
    "failed",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    # 500 small files in nested directories, empty files, empty directories, one 300 MiB file.
    return make_tree(tmp_path_factory.mktemp("src") / "tree", small=500, big_mib=300)


def test_upload_then_download_is_byte_identical(dataset, sshd, remote_dir, local_dir):
    up = run_cli(
        "copy",
        str(dataset),
        sshd.url(f"{remote_dir}/tree"),
        "--pp",
        "8",
        "-p",
        "4",
        "-c",
        "4",
        "--json",
        *ssh_args(sshd),
    )
    assert up.code == 0, up.err
    summary = up.summary
    assert DESIGN_FIELDS <= set(summary)
    assert summary["files"] == 503 and summary["failed"] == []
    assert summary["chunks"][0]["pp"] == 8 and summary["chunks"][0]["p"] == 4
    assert tree_digest(remote_dir / "tree") == tree_digest(dataset)
    assert temp_files(remote_dir) == []

    down = run_cli(
        "copy",
        sshd.url(f"{remote_dir}/tree"),
        str(local_dir / "back"),
        "--pp",
        "4",
        "-p",
        "3",
        "-c",
        "2",
        "--json",
        *ssh_args(sshd),
    )
    assert down.code == 0, down.err
    assert down.summary["direction"] == "download"
    assert tree_digest(local_dir / "back") == tree_digest(dataset)
    assert temp_files(local_dir) == []


def test_rerun_skips_complete_files_and_resends_changed_ones(dataset, sshd, remote_dir):
    small = make_tree(remote_dir.parent / "skip-src", small=40, seed=7)
    dst = sshd.url(f"{remote_dir}/t")
    first = run_cli("copy", str(small), dst, "--json", *ssh_args(sshd))
    assert first.code == 0, first.err
    victim = next(small.rglob("f0003.dat"))
    victim.write_bytes(b"changed content of a different size")
    second = run_cli("copy", str(small), dst, "--json", *ssh_args(sshd))
    assert second.code == 0, second.err
    assert second.summary["files_skipped"] == second.summary["files"] - 1
    assert tree_digest(remote_dir / "t") == tree_digest(small)


def test_mode_and_mtime_are_preserved(sshd, remote_dir, local_dir):
    src = local_dir / "m"
    src.mkdir()
    f = src / "script.sh"
    f.write_bytes(b"#!/bin/sh\necho hi\n")
    f.chmod(0o750)
    import os

    os.utime(f, (1_600_000_000, 1_600_000_000))
    res = run_cli("copy", str(src), sshd.url(f"{remote_dir}/m"), *ssh_args(sshd))
    assert res.code == 0, res.err
    st = (remote_dir / "m" / "script.sh").stat()
    assert int(st.st_mtime) == 1_600_000_000
    assert st.st_mode & 0o777 == 0o750
