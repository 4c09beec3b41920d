"""A copy's first small files moved while the copy path loads (engine/head_start.py), both
ways, against a real sshd: what it places is verified and adopted, what it may not touch it leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_transfer.engine.bundle_channel import CARRIER_ENV, start_download_helpers, start_upload_helpers
from airflow_transfer.engine.head_start import HeadStart
from airflow_transfer.engine.head_start_sides import start_head_start, start_upload_head_start
from airflow_transfer.engine.listing_ahead import listing_ahead
from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.pool import SFTPPool
from tests.support.cli import kill_cli_when, ssh_args
from tests.support.data import temp_files, tree_digest
from tests.support.sshd import chown_to_user
from tests.test_bundle import _tree, flip_in_transit


def _head_start(sshd, src: Path, dst: Path, verify: str | None = "sha256") -> tuple[SFTPPool, HeadStart]:
    """As the command line starts a download: connections, the listing and two helper pairs
    ahead, and the head start on them."""
    target = sshd.target(look_for_keys=False)
    pool = SFTPPool(target)
    pool.warm(2)
    listing, _ = listing_ahead(pool, str(src))
    assert start_download_helpers(pool, 2) == 2
    return pool, start_head_start(pool, listing, str(dst), verify, pairs=2)


def _wait_for(head: HeadStart, files: int) -> None:
    deadline = time.monotonic() + 120
    while len(head.landed) < files and head.thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(head.landed) >= files, (len(head.landed), head.why)


def _slow_start(tmp_path: Path) -> dict[str, str]:
    """An environment in which importing airflow_transfer.job waits 30 s (a sitecustomize on
    PYTHONPATH): a kill as the first files land then comes while only the head start moves them."""
    slow = tmp_path / "slow"
    slow.mkdir(exist_ok=True)
    (slow / "sitecustomize.py").write_text(
        "import sys, time\n"
        "class _Slow:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'airflow_transfer.job':\n"
        "            time.sleep(30)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Slow())\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(slow), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _kill_then_rerun(src: Path, dst: Path, args: list[str], env: dict[str, str]) -> None:
    """kill -9 the copy once 100 of its files have their final names; each of them must be
    whole, and the re-run must keep them (same inode) and finish the rest."""
    kill_cli_when(args, lambda: dst.exists() and sum(1 for _ in dst.rglob("s*.bin")) >= 100, env=env)
    before = {p: p.stat().st_ino for p in dst.rglob("s*.bin")}
    assert 100 <= len(before) < 1500
    for p in before:  # whole and verified, or not there
        assert p.read_bytes() == (src / p.relative_to(dst)).read_bytes(), p
    res = subprocess.run(
        [sys.executable, "-m", "airflow_transfer.cli", *args, "--json"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads(res.stdout)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert s["files_skipped"] >= len(before)
    assert all(p.stat().st_ino == ino for p, ino in before.items())


def _copy(sshd, src: Path, dst: Path, pool: SFTPPool, verify: str | None = "sha256") -> dict:
    req = CopyRequest(
        Endpoint("sftp", str(src), pool.target),
        Endpoint("file", str(dst)),
        TransferParams(pp=8, cc=2),
        use_store=False,
        verify=verify,
    )
    req.pool = pool
    return run_copy(req)


def test_files_placed_before_the_copy_began_are_adopted_as_moved_and_verified(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "ahead", 400, seed=31)
    dst = local_dir / "ahead"
    pool, head = _head_start(sshd, src, dst)
    _wait_for(head, 1)  # at least one group placed before the copy runs (it goes on meanwhile)
    s = _copy(sshd, src, dst, pool)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    adopted = len(head.landed)
    assert 0 < adopted <= 400
    # Counted as moved and verified by this copy, not as found at the destination.
    assert (
        s["files"] == 400
        and s["files_skipped"] == 0
        and s["bytes"] == sum(p.stat().st_size for p in dst.rglob("*.bin"))
    )
    assert s["verify"]["verified"] == 400 and s["verify"]["mismatched"] == 0
    said = [c["transport"] for c in s["chunks"] if "head start" in c.get("transport", "")]
    assert said and said[0].startswith(f"{adopted} files placed while the copy started"), s["chunks"]
    assert not head.thread.is_alive()


def _every_pair_carried(head: HeadStart, src: Path, dst: Path, files: int) -> None:
    """The head start ran out of files with both pairs at work; what it placed is whole."""
    head.thread.join(120)
    assert not head.thread.is_alive() and len(head.landed) == files, (len(head.landed), head.why)
    assert len(head.groups_by_pair) == 2 and min(head.groups_by_pair) >= 1, head.groups_by_pair
    assert sum(head.groups_by_pair) == head.groups
    for rel in head.landed:
        assert (dst / rel).read_bytes() == (src / rel).read_bytes(), rel


def test_a_download_head_start_puts_every_pair_started_to_work(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "two-pairs", 600, seed=33)
    dst = local_dir / "two-pairs"
    pool, head = _head_start(sshd, src, dst)
    try:
        _every_pair_carried(head, src, dst, 600)
        s = _copy(sshd, src, dst, pool)  # adopts all of it; both pairs went back to the chunk
        assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
        assert s["files"] == 600 and s["files_skipped"] == 0 and s["verify"]["verified"] == 600
    finally:
        pool.close()


def test_an_upload_head_start_puts_every_pair_started_to_work(sshd, local_dir, remote_dir, uploads_over_openssh):
    src = _tree(local_dir / "up-two-pairs", 600, seed=42)
    dst = remote_dir / "up-two-pairs"
    pool, head = _upload_head_start(sshd, src, dst)
    try:
        _every_pair_carried(head, src, dst, 600)
        s = _push(src, dst, pool)
        assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
        assert s["files"] == 600 and s["files_skipped"] == 0
    finally:
        pool.close()


def test_a_pair_that_breaks_leaves_its_files_to_the_others_and_the_copy(sshd, local_dir, remote_dir):
    """kill -9 of one pair's lander while the head start runs: that pair stops, the other goes
    on, nothing under a final name is partial, and the copy lands the files the dead pair held."""
    src = _tree(remote_dir / "one-breaks", 3000, seed=34)
    dst = local_dir / "one-breaks"
    pool, head = _head_start(sshd, src, dst)
    try:
        deadline = time.monotonic() + 120
        while not (len(head.groups_by_pair) == 2 and head.groups_by_pair[1] >= 1) and time.monotonic() < deadline:
            assert head.thread.is_alive(), (head.groups_by_pair, head.why)
            time.sleep(0.005)
        lander = head._pairs[1][1]  # (the server's helper, the lander on this host)
        lander.chan._proc.proc.kill()
        head.thread.join(120)
        assert "Error" in head.why, head.why  # the broken pair said why; the first went on to the end
        assert head.groups_by_pair[0] > head.groups_by_pair[1] >= 1
        for rel in head.landed:
            assert (dst / rel).read_bytes() == (src / rel).read_bytes(), rel
        s = _copy(sshd, src, dst, pool)
        assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
        # A file the lander named before it died, its reply unread, is whole: the copy finds it
        # complete and keeps it.
        assert s["files"] == 3000
    finally:
        pool.close()


def test_the_pair_it_used_goes_back_to_the_chunk(sshd, local_dir, remote_dir, monkeypatch):
    from airflow_transfer.engine.bundle_channel import SinkChannel

    started: list[str] = []
    real = SinkChannel.__init__

    def counting(self, start, carrier="paramiko"):
        started.append(carrier)
        real(self, start, carrier)

    monkeypatch.setattr(SinkChannel, "__init__", counting)
    src = _tree(remote_dir / "pair-back", 300, seed=32)
    pool, head = _head_start(sshd, src, local_dir / "pair-back")
    _wait_for(head, 1)
    s = _copy(sshd, src, local_dir / "pair-back", pool)
    assert s["failed"] == []
    # Two pairs started ahead (a server helper and a lander each), none more: the chunk's two
    # workers used the pairs the head start handed back.
    assert sorted(started) == ["local", "local", "openssh", "openssh"], started


def test_a_file_already_at_the_destination_is_left_to_the_copy(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "present", 200, seed=33)
    dst = local_dir / "present"
    (dst / "d0").mkdir(parents=True)
    mine = dst / "d0" / "s0000.bin"
    mine.write_bytes(b"not the source's bytes")
    inode = mine.stat().st_ino
    pool, head = _head_start(sshd, src, dst)
    head.thread.join(120)  # it ran out of files: every small file but that one
    assert "d0/s0000.bin" not in head.landed and len(head.landed) == 199, head.why
    assert mine.stat().st_ino == inode and mine.read_bytes() == b"not the source's bytes"
    s = _copy(sshd, src, dst, pool)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src)
    assert s["files"] == 200 and s["files_skipped"] == 0  # that one differed, so the copy sent it


def test_a_symlinked_directory_at_the_destination_is_never_written_through(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "linked", 70, seed=34)
    dst = local_dir / "linked"
    elsewhere = local_dir / "elsewhere"
    elsewhere.mkdir()
    dst.mkdir()
    (dst / "d3").symlink_to(elsewhere)
    pool, head = _head_start(sshd, src, dst)
    head.thread.join(120)
    assert head.landed and not any(rel.startswith("d3/") for rel in head.landed)
    assert list(elsewhere.iterdir()) == []
    head.finish()
    pool.close()


def test_a_byte_flipped_during_the_head_start_is_caught_and_that_file_sent_by_the_copy(
    sshd, local_dir, remote_dir, monkeypatch
):
    src = _tree(remote_dir / "flip-ahead", 120, seed=35)
    dst = local_dir / "flip-ahead"
    flipped = flip_in_transit(monkeypatch, lambda head: head["size"] > 0)
    pool, head = _head_start(sshd, src, dst)
    head.thread.join(120)
    assert len(flipped) == 1
    bad = os.path.relpath(flipped[0], dst)
    assert bad not in head.landed and not (dst / bad).exists()  # refused by the lander, never named
    s = _copy(sshd, src, dst, pool)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert s["files"] == 120 and s["files_skipped"] == 0
    assert s["verify"]["mismatched"] == 1 and s["verify"]["repaired"] == 1, s["verify"]  # said, and mended


def test_a_copy_without_verification_still_places_only_whole_files(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "unverified", 150, seed=36)
    dst = local_dir / "unverified"
    pool, head = _head_start(sshd, src, dst, verify=None)
    _wait_for(head, 1)
    s = _copy(sshd, src, dst, pool, verify=None)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []


def test_killed_while_the_copy_path_loads_the_rerun_keeps_what_was_placed(sshd, local_dir, remote_dir, tmp_path):
    """kill -9 while the head start runs (the copy path made slow to load, as on a loaded host):
    every file under its final name is whole, and the re-run keeps it and fetches the rest."""
    src = _tree(remote_dir / "killed-ahead", 1500, seed=37)
    dst = local_dir / "killed-ahead"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["copy", sshd.url(str(src)), str(dst), "--store", store, "-c", "2", *ssh_args(sshd)]
    _kill_then_rerun(src, dst, args, _slow_start(tmp_path))


def _upload_head_start(sshd, src: Path, dst: Path) -> tuple[SFTPPool, HeadStart]:
    """As the command line starts an upload over OpenSSH's client: two helper pairs ahead (the
    server's sink, a feeder here), connections warming, and the head start on both pairs."""
    pool = SFTPPool(sshd.target(look_for_keys=False))
    assert start_upload_helpers(pool, 2) == 2
    pool.warm(2)
    return pool, start_upload_head_start(pool, str(src), str(dst), "sha256", pairs=2)


@pytest.fixture
def uploads_over_openssh(monkeypatch):
    """The upload head start runs where an upload's sink rides OpenSSH's client."""
    monkeypatch.setenv(CARRIER_ENV, "openssh")
    return {CARRIER_ENV: "openssh"}


def _push(src: Path, dst: Path, pool: SFTPPool) -> dict:
    req = CopyRequest(
        Endpoint("file", str(src)), Endpoint("sftp", str(dst), pool.target), TransferParams(pp=8, cc=2), use_store=False
    )
    req.pool = pool
    return run_copy(req)


def test_an_upload_places_its_first_small_files_ahead_and_the_chunk_adopts_them(
    sshd, local_dir, remote_dir, uploads_over_openssh
):
    src = _tree(local_dir / "up-ahead", 400, seed=41, big=1)
    dst = remote_dir / "up-ahead"
    pool, head = _upload_head_start(sshd, src, dst)
    _wait_for(head, 1)
    s = _push(src, dst, pool)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    adopted = len(head.landed)
    assert 0 < adopted <= 400 and not any(rel.startswith("big/") for rel in head.landed)  # 1 MiB or less only
    assert s["files"] == 401 and s["files_skipped"] == 0
    assert s["verify"]["verified"] == 401 and s["verify"]["mismatched"] == 0
    said = [c["transport"] for c in s["chunks"] if "head start" in c.get("transport", "")]
    assert said and said[0].startswith(f"{adopted} files placed while the copy started"), s["chunks"]


def test_an_upload_walks_its_tree_once_for_the_head_start_and_the_manifest(
    sshd, local_dir, remote_dir, uploads_over_openssh, monkeypatch
):
    from airflow_transfer.remote import lister

    walked: list[str] = []
    real = lister.records

    def counting(root):
        walked.append(root)
        return real(root)

    monkeypatch.setattr(lister, "records", counting)
    src = _tree(local_dir / "up-once", 300, seed=43)
    (src / "late.bin").write_bytes(b"x" * 100)  # a file the head start may or may not reach
    dst = remote_dir / "up-once"
    pool, head = _upload_head_start(sshd, src, dst)
    _wait_for(head, 1)
    s = _push(src, dst, pool)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert walked == [str(src)]  # the head start's walk was the manifest's too
    assert s["files"] == 301


def test_a_walk_taken_for_another_root_is_not_used(tmp_path):
    from airflow_transfer.engine.listing_ahead import take_walk, walk_ahead

    class Pool(SFTPPool):
        def __init__(self) -> None:  # only the companions: no server behind it
            super().__init__(None)  # type: ignore[arg-type]

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"1")
    pool = Pool()
    walk = walk_ahead(pool, str(tmp_path / "a"))
    assert take_walk(pool, str(tmp_path / "b")) is None  # taken, and dropped: another root
    assert take_walk(pool, str(tmp_path / "a")) is None
    assert [r[:2] for r in walk.records()] == [["r", "dir"], ["f", "f"]]


def test_an_upload_leaves_a_file_already_on_the_server_to_the_copy(sshd, local_dir, remote_dir, uploads_over_openssh):
    src = _tree(local_dir / "up-present", 150, seed=42)
    dst = remote_dir / "up-present"
    (dst / "d1").mkdir(parents=True)
    theirs = dst / "d1" / "s0001.bin"
    theirs.write_bytes(b"the server's own bytes")
    for p in (dst, dst / "d1", theirs):
        chown_to_user(p, sshd.user)
    inode = theirs.stat().st_ino
    pool, head = _upload_head_start(sshd, src, dst)
    head.thread.join(120)
    assert "d1/s0001.bin" not in head.landed and len(head.landed) == 149, head.why
    assert theirs.stat().st_ino == inode and theirs.read_bytes() == b"the server's own bytes"
    s = _push(src, dst, pool)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src)


def test_an_upload_killed_while_the_copy_path_loads_keeps_what_was_placed(
    sshd, local_dir, remote_dir, tmp_path, uploads_over_openssh
):
    src = _tree(local_dir / "up-killed", 1500, seed=43)
    dst = remote_dir / "up-killed"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["copy", str(src), sshd.url(str(dst)), "--store", store, "-c", "2", *ssh_args(sshd)]
    _kill_then_rerun(src, dst, args, {**_slow_start(tmp_path), **uploads_over_openssh})
