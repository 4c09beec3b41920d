"""Manifests: local and remote listings agree; Parquet round trip; exec fall-back."""

from __future__ import annotations

import io
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_transfer.engine.listing_ahead import list_ahead, listing_ahead
from airflow_transfer.errors import UnsafePathError
from airflow_transfer.manifest import Manifest, _consume, _parsed, list_local, list_remote
from airflow_transfer.manifest_schema import SCHEMA
from airflow_transfer.paths import check_relative
from airflow_transfer.protocols import openssh
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


def test_a_listing_started_ahead_is_the_one_the_copy_takes(tree, sshd):
    pool = SFTPPool(sshd.target())
    runs: list[str] = []
    run = pool.exec_command

    def counted(command: str, **kwargs):
        runs.append(command)
        return run(command, **kwargs)

    pool.exec_command = counted
    try:
        list_ahead(pool, str(tree)).join(60)
        assert len(runs) == 1  # run in the background before anyone asked
        ahead = list_remote(pool, str(tree), "remote")
        assert len(runs) == 1  # taken, not run again
        again = list_remote(pool, str(tree), "remote")
        assert len(runs) == 2  # one listing ahead serves one listing
        list_ahead(pool, str(tree / "d1")).join(60)
        other = list_remote(pool, str(tree), "remote")
        assert len(runs) == 4  # started for another root: not taken for this one
    finally:
        pool.close()
    assert _rows(ahead) == _rows(again) == _rows(other) == _rows(list_local(str(tree)))


def _ssh_commands(monkeypatch) -> list[str]:
    """The commands `ssh` processes were started for (a spy: each still runs)."""
    commands: list[str] = []
    real = openssh.OpenSSHProcess.__init__

    def spied(self, target, command=None):
        commands.append(command or "")
        real(self, target, command)

    monkeypatch.setattr(openssh.OpenSSHProcess, "__init__", spied)
    return commands


def _listed_ahead_over_ssh(sshd, tree) -> tuple[Manifest, list[str]]:
    """The listing a copy takes after listing_ahead(over_openssh=True), and the commands run
    over paramiko exec channels meanwhile."""
    pool = SFTPPool(sshd.target(look_for_keys=False))
    runs: list[str] = []
    run = pool.exec_command
    pool.exec_command = lambda command, **kw: runs.append(command) or run(command, **kw)
    try:
        listing_ahead(pool, str(tree), over_openssh=True)[1].join(60)
        return list_remote(pool, str(tree), "remote"), runs
    finally:
        pool.close()


def test_a_listing_ahead_over_ssh_is_the_same_and_needs_no_paramiko_exec(tree, sshd, monkeypatch):
    commands = _ssh_commands(monkeypatch)
    ahead, runs = _listed_ahead_over_ssh(sshd, tree)
    assert [c for c in commands if c.startswith("python3 - ")] == [f"python3 - {tree}"] and runs == []
    assert _rows(ahead) == _rows(list_local(str(tree)))
    assert ahead.empty_dirs == list_local(str(tree)).empty_dirs


def test_a_listing_ahead_lists_over_paramiko_where_ssh_cannot_start(tree, sshd, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no `ssh` client to start
    ahead, runs = _listed_ahead_over_ssh(sshd, tree)
    assert len(runs) == 1 and _rows(ahead) == _rows(list_local(str(tree)))


def test_listing_falls_back_to_sftp_when_exec_is_forced_away(tree, test_base):
    server = restricted_sshd(test_base / "sshd-noexec", "no-exec")
    try:
        pool = SFTPPool(server.target())
        try:
            m = list_remote(pool, str(tree), "noexec")
            list_ahead(pool, str(tree))  # what the forced command answered is no listing either
            ahead = list_remote(pool, str(tree), "noexec")
            listing_ahead(pool, str(tree), over_openssh=True)[1].join(60)  # nor over `ssh`
            over_ssh = list_remote(pool, str(tree), "noexec")
        finally:
            pool.close()
        assert _rows(m) == _rows(ahead) == _rows(over_ssh) == _rows(list_local(str(tree)))
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


def _every_name(longest: int) -> list[str]:
    """Every name of up to `longest` characters over those that matter to the rule: '.', '/',
    a control character and an ordinary letter."""
    names = [""]
    for _ in range(longest):
        names += [n + c for n in names if len(n) == len(names[-1]) for c in "./\na"]
    return sorted(set(names))


def _refused(name: str) -> bool:
    """check_relative's rule spelled out: one part at a time."""
    if not name or name.startswith("/") or any(ord(c) < 32 or c == "\x7f" for c in name):
        return True
    return any(part in ("", ".", "..") for part in name.split("/"))


def test_the_one_search_path_check_refuses_exactly_what_the_rule_refuses():
    # Every name of up to 6 characters over the characters that matter ('.', '/', a control
    # character, an ordinary letter): the quick search must let through no name the rule refuses.
    names = _every_name(6)
    assert len(names) > 5000
    for name in names:
        try:
            check_relative(name)
            refused = False
        except UnsafePathError:
            refused = True
        assert refused == _refused(name), repr(name)


def test_a_manifest_refuses_exactly_what_the_rule_refuses():
    # Manifest.validate checks the whole path column with Arrow's regex engine: over the same
    # names as above, one manifest each, it must refuse exactly the names the rule refuses.
    for name in _every_name(5):
        manifest = Manifest(pa.table({"path": ["ok/name", name], "size": [1, 1], "mtime": [0.0, 0.0]}, schema=SCHEMA))
        try:
            manifest.validate("here")
            refused = False
        except UnsafePathError as exc:
            refused = True
            assert repr(name) in str(exc) if name else "empty file name" in str(exc)  # check_relative's message
        assert refused == _refused(name), repr(name)


def test_lister_output_is_parsed_whole_and_line_by_line_alike(tree):
    buf = io.StringIO()
    lister.run(str(tree), buf)
    out = buf.getvalue().encode()
    expected = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert _parsed(out) == expected
    # A blank line (never written by the lister) makes the one-document parse fail: the
    # records are still read, line by line.
    lines = out.splitlines(keepends=True)
    assert _parsed(b"".join(lines[:3]) + b"\n" + b"".join(lines[3:])) == expected


def test_the_local_listing_is_the_lister_stream_without_the_json(tree):
    # The client walks its own trees with the records the remote lister would send as JSON lines.
    buf = io.StringIO()
    lister.run(str(tree), buf)
    parsed = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert parsed == [list(rec) for rec in lister.records(str(tree))]
    assert _rows(_consume(parsed, "x")) == _rows(list_local(str(tree)))
