"""Manifests: local and remote listings agree; Parquet round trip; exec fall-back."""

from __future__ import annotations

import os

import pyarrow.compute as pc
import pytest

from airflow_transfer.errors import UnsafePathError
from airflow_transfer.manifest import Manifest, _consume, list_local, list_remote
from airflow_transfer.protocols.pool import SFTPPool
from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree
from tests.support.sshd import restricted_sshd


@pytest.fixture(scope="module")
def tree(test_base):
    # Under test_base: the sshd's unprivileged user must be able to read it.
    root = make_tree(test_base / "manifest-src" / "tree", small=60, seed=11)
    os.symlink("/etc/passwd", root / "link-out")  # symlinks are not followed
    (root / "d1" / ".half.bin.atpart").write_bytes(b"x")  # our own temporaries are never listed
    return root


def _rows(m: Manifest):
    return sorted(
        zip(m.table["path"].to_pylist(), m.table["size"].to_pylist(), [int(x) for x in m.table["mtime"].to_pylist()])
    )


def test_local_listing(tree):
    m = list_local(str(tree))
    assert m.files == 62
    assert m.skipped["symlinks"] == 1
    assert "an_empty_dir" in m.empty_dirs and "deep/a/b/c" in m.empty_dirs
    assert not any(p.endswith(".atpart") for p in m.table["path"].to_pylist())
    s = m.sorted_by_size()
    sizes = s.table["size"].to_pylist()
    assert sizes == sorted(sizes)


def test_remote_exec_listing_matches_local(tree, sshd):
    pool = SFTPPool(sshd.target())
    try:
        remote = list_remote(pool, str(tree), "remote")
        fallback = list_remote(pool, str(tree), "remote", allow_exec=False)
    finally:
        pool.close()
    local = list_local(str(tree))
    assert _rows(remote) == _rows(local) == _rows(fallback)
    assert remote.empty_dirs == local.empty_dirs == fallback.empty_dirs


def test_listing_falls_back_to_sftp_when_exec_is_forced_away(tree, test_base):
    server = restricted_sshd(test_base / "sshd-noexec", "no-exec")
    try:
        pool = SFTPPool(server.target())
        try:
            m = list_remote(pool, str(tree), "noexec")
        finally:
            pool.close()
        assert _rows(m) == _rows(list_local(str(tree)))
    finally:
        server.stop()


def test_parquet_round_trip_and_cli_list(tree, sshd, tmp_path):
    out = tmp_path / "m.parquet"
    res = run_cli("list", sshd.url(str(tree)), "--out", str(out), "--json", *ssh_args(sshd))
    assert res.code == 0, res.err
    assert res.summary["files"] == 62
    m = Manifest.read(out)
    assert _rows(m) == _rows(list_local(str(tree)))
    assert "an_empty_dir" in m.empty_dirs
    assert pc.sum(m.table["size"]).as_py() == res.summary["bytes"]


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/abs", "a//b", "ctl\x01x", "nl\nx"])
def test_hostile_listing_names_are_rejected(name):
    import json

    lines = ['["r", "dir"]', json.dumps(["f", name, 1, 0.0, 0o644])]
    with pytest.raises(UnsafePathError):
        _consume(lines, "hostile")
