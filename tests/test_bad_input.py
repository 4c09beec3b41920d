"""Bad inputs: one-line error (what, where, what to do), non-zero exit, nothing touched outside DST."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_transfer import manifest_schema as ms
from airflow_transfer.manifest import Manifest
from tests.support.cli import run_cli, ssh_args
from tests.support.sshd import free_port


def _snapshot(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in ds + fs}


def _assert_clean_error(res, *needles: str) -> None:
    assert res.code != 0
    lines = [line for line in res.err.splitlines() if line.strip()]
    assert len(lines) == 1, res.err
    assert lines[0].startswith("airflow-transfer: error: ")
    assert "Traceback" not in res.err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def src(local_dir):
    (local_dir / "src").mkdir()
    (local_dir / "src" / "a.txt").write_text("hello")
    return local_dir / "src"


@pytest.fixture
def guard(remote_dir):
    """The remote area around DST: must be unchanged after a failed run (DST itself aside)."""
    before = _snapshot(remote_dir)
    yield remote_dir
    after = {p for p in _snapshot(remote_dir) if not p.startswith("dst")}
    assert after == before


def test_missing_source(sshd, guard, local_dir):
    res = run_cli("copy", str(local_dir / "nope"), sshd.url(f"{guard}/dst"), *ssh_args(sshd))
    _assert_clean_error(res, "source does not exist", str(local_dir / "nope"))


def test_missing_remote_source(sshd, guard, local_dir):
    res = run_cli("copy", sshd.url(f"{guard}/nope"), str(local_dir / "d"), *ssh_args(sshd))
    _assert_clean_error(res, "source does not exist")
    assert not (local_dir / "d").exists()


def test_unreachable_host(src, sshd, guard):
    res = run_cli("copy", str(src), f"sftp://{sshd.user}@127.0.0.1:{free_port()}/tmp/x", *ssh_args(sshd))
    _assert_clean_error(res, "cannot connect", "check that the SSH server is running")


def test_wrong_credentials(src, sshd, guard):
    res = run_cli(
        "copy",
        str(src),
        sshd.url(f"{guard}/dst"),
        "--identity",
        str(sshd.other_key),
        "--known-hosts",
        str(sshd.known_hosts),
    )
    _assert_clean_error(res, "authentication", "failed")
    assert not (guard / "dst").exists()


def test_unknown_host_key(src, sshd, guard, local_dir):
    empty = local_dir / "known_hosts_empty"
    empty.write_text("")
    res = run_cli(
        "copy", str(src), sshd.url(f"{guard}/dst"), "--identity", str(sshd.client_key), "--known-hosts", str(empty)
    )
    _assert_clean_error(res, "host key", "not known", "SHA256:", "ssh-keyscan")
    assert not (guard / "dst").exists()


def test_changed_host_key(src, sshd, guard, local_dir):
    other_pub = Path(str(sshd.other_key) + ".pub").read_text().split()
    forged = local_dir / "known_hosts_forged"
    forged.write_text(f"[{sshd.host}]:{sshd.port} {other_pub[0]} {other_pub[1]}\n")
    res = run_cli(
        "copy", str(src), sshd.url(f"{guard}/dst"), "--identity", str(sshd.client_key), "--known-hosts", str(forged)
    )
    _assert_clean_error(res, "CHANGED", "ssh-keygen -R")
    assert not (guard / "dst").exists()


def test_unwritable_destination(src, sshd, guard, test_base):
    locked = test_base / "root-owned"
    locked.mkdir(exist_ok=True)
    os.chmod(locked, 0o755)  # owned by the test runner, not by the sshd's login user
    if os.geteuid() != 0:
        pytest.fail("this test needs root, so the sshd logs in as another user (CI runs as root)")
    res = run_cli("copy", str(src), sshd.url(f"{locked}/dst"), *ssh_args(sshd))
    _assert_clean_error(res, "permission denied", str(locked / "dst"))
    assert not (locked / "dst").exists()


@pytest.mark.parametrize("flag,value", [("--pp", "0"), ("--parallelism", "-1"), ("--concurrency", "0"), ("--pp", "-3")])
def test_knobs_must_be_positive(src, sshd, guard, flag, value):
    res = run_cli("copy", str(src), sshd.url(f"{guard}/dst"), flag, value, *ssh_args(sshd))
    _assert_clean_error(res, "must be a whole number >= 1")
    assert res.code == 2
    assert not (guard / "dst").exists()


@pytest.mark.parametrize("name", ["../escape.txt", "a/../../escape.txt", "/etc/escape.txt", "a/./b", "bad\nname"])
def test_listed_name_escaping_the_root(src, sshd, guard, local_dir, name):
    table = pa.table({ms.PATH: [name], ms.SIZE: [5], ms.MTIME: [0.0]}, schema=ms.SCHEMA)
    Manifest(table).write(local_dir / "evil.parquet")
    res = run_cli(
        "copy", str(src), sshd.url(f"{guard}/dst"), "--manifest", str(local_dir / "evil.parquet"), *ssh_args(sshd)
    )
    _assert_clean_error(res, "file name")
    assert not (guard / "escape.txt").exists() and not (guard.parent / "escape.txt").exists()
