"""pp, p and cc observed from the server's side (sftp-server's own log)."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree, write_random
from tests.support.sshd import max_concurrent


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("knobs") / "small", small=120, seed=3)


def test_p_writes_one_file_over_that_many_connections(sshd, remote_dir, local_dir):
    write_random(local_dir / "p" / "large.bin", 64 * 1024 * 1024, seed=5)
    mark = sshd.log_mark()
    res = run_cli("copy", str(local_dir / "p"), sshd.url(f"{remote_dir}/p"), "-p", "4", "-c", "1", *ssh_args(sshd))
    assert res.code == 0, res.err
    events = [e for e in sshd.sftp_events(mark) if e[2].endswith("large.bin.atpart")]
    at_once = max_concurrent(events, "open", "close", lambda pid, path: pid)
    assert at_once >= 4, events


def test_pp_keeps_that_many_file_operations_outstanding(small_tree, sshd, remote_dir):
    mark = sshd.log_mark()
    # pp is the SFTP path's knob: small files would otherwise go in bundles (--no-bundle).
    res = run_cli(
        "copy", str(small_tree), sshd.url(f"{remote_dir}/pp"), "--pp", "8", "-c", "1", "--no-bundle", *ssh_args(sshd)
    )
    assert res.code == 0, res.err
    events = [e for e in sshd.sftp_events(mark) if e[2].endswith(".atpart")]
    assert len({pid for pid, _, _ in events}) == 1  # one connection did all the files
    outstanding = max_concurrent(events, "open", "close", lambda pid, path: path)
    assert outstanding == 8
    # and with pp=1 the same connection never has two files open
    mark = sshd.log_mark()
    res = run_cli(
        "copy", str(small_tree), sshd.url(f"{remote_dir}/pp1"), "--pp", "1", "-c", "1", "--no-bundle", *ssh_args(sshd)
    )
    assert res.code == 0, res.err
    events = [e for e in sshd.sftp_events(mark) if e[2].endswith(".atpart")]
    assert max_concurrent(events, "open", "close", lambda pid, path: path) == 1


def test_few_large_files_spread_over_the_connections_not_one_pipeline(sshd, remote_dir, local_dir):
    # Two files, cc=2, pp=4: one worker's pipeline could hold both while the other connection
    # idles (a window-bound single connection on a WAN). Each file must get its own session.
    for n in range(2):
        write_random(local_dir / "two" / f"big{n}.bin", 24 * 1024 * 1024, seed=40 + n)
    for attempt in range(3):
        mark = sshd.log_mark()
        res = run_cli(
            "copy",
            str(local_dir / "two"),
            sshd.url(f"{remote_dir}/two{attempt}"),
            "--pp",
            "4",
            "-p",
            "1",
            "-c",
            "2",
            "--json",
            *ssh_args(sshd),
        )
        assert res.code == 0, res.err
        events = [e for e in sshd.sftp_events(mark) if e[2].endswith(".atpart") and e[1] == "open"]
        assert len({pid for pid, _, _ in events}) == 2, events  # two sessions wrote, one file each
