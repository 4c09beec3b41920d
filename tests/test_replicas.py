"""Replicas that do not hold the whole tree: another replica serves the file, or a clear error."""

from __future__ import annotations

import pytest

from airflow_transfer.errors import TransferError
from airflow_transfer.protocols import backends
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.replicas import ReplicaSet, ReplicaSource
from tests.support.cli import run_cli
from tests.support.data import tree_digest


def _tree(root, names):
    root.mkdir(parents=True)
    for n in names:
        (root / n).write_bytes(n.encode() * 20_000)


def test_a_replica_lacking_files_is_dropped_and_the_others_serve_them(tmp_path):
    names = [f"f{i}" for i in range(8)]
    _tree(tmp_path / "a", names)
    _tree(tmp_path / "b", names[:1])  # a stale replica
    res = run_cli(
        "copy",
        str(tmp_path / "a"),
        str(tmp_path / "dst"),
        "--replica",
        str(tmp_path / "b"),
        "--json",
        "--store",
        f"sqlite:///{tmp_path / 's.db'}",
    )
    assert res.code == 0, res.err
    assert tree_digest(tmp_path / "dst") == tree_digest(tmp_path / "a")
    primary, stale = res.summary["replicas"]
    assert primary["files"] + stale["files"] == 8 and not res.summary["failed"]
    assert stale["files"] <= 1, stale  # it holds only f0
    if stale["dropped"]:  # after --switch-after misses in a row, if it was asked that often
        assert str(tmp_path / "b") in stale["reason"], stale  # names the replica's own path


def test_a_file_no_replica_has_fails_with_what_where_and_what_to_do(tmp_path):
    _tree(tmp_path / "a", ["x"])
    _tree(tmp_path / "b", ["y"])
    source = ReplicaSource(
        ReplicaSet([Endpoint("file", str(tmp_path / "a")), Endpoint("file", str(tmp_path / "b"))]), backends.connect
    )
    try:
        with source.open_read(str(tmp_path / "a" / "x")) as f:  # a has it, b may be asked first: either way it reads
            assert f.read() == b"x" * 20_000
        with pytest.raises(TransferError) as err:
            source.open_read(str(tmp_path / "a" / "gone"))
    finally:
        source.close()
    msg = err.value.message
    assert "cannot be read from any replica" in msg and str(tmp_path / "b") in msg, msg
    assert "same tree" in err.value.todo
