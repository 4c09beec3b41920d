"""Manifests: local and remote listings agree; Parquet round trip; exec fall-back."""

from __future__ import annotations

import io
import json
import os

import pyarrow.compute as pc
import pytest

from airflow_transfer.errors import UnsafePathError
from airflow_transfer.manifest import Manifest, _consume, list_local, list_remote
from airflow_transfer.paths import check_relative
from airflow_transfer.protocols.pool import SFTPPool
from airflow_transfer.remote import lister
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
    with pytest.raises(UnsafePathError):
        _consume([["r", "dir"], ["f", name, 1, 0.0, 0o644]], "hostile")


def _refused(name: str) -> bool:
    """check_relative's rule spelled out: one part at a time."""
    if not name or name.startswith("/") or any(ord(c) < 32 or c == "\x7f" for c in name):
        return True
    return any(part in ("", ".", "..") for part in name.split("/"))


def test_the_one_search_path_check_refuses_exactly_what_the_rule_refuses():
    # Every name of up to 6 characters over the characters that matter ('.', '/', a control
    # character, an ordinary letter): the quick search must let through no name the rule refuses.
    names = [""]
    for _ in range(6):
        names += [n + c for n in names if len(n) == len(names[-1]) for c in "./\na"]
    names = sorted(set(names))
    assert len(names) > 5000
    for name in names:
        try:
            check_relative(name)
            refused = False
        except UnsafePathError:
            refused = True
        assert refused == _refused(name), repr(name)


def test_the_local_listing_is_the_lister_stream_without_the_json(tree):
    # The client walks its own trees with the records the remote lister would send as JSON lines.
    buf = io.StringIO()
    lister.run(str(tree), buf)
    parsed = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert parsed == [list(rec) for rec in lister.records(str(tree))]
    assert _rows(_consume(parsed, "x")) == _rows(list_local(str(tree)))
