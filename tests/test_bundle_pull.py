"""Small files downloaded in bundles (engine/bundle_groups.py), against a real sshd."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from airflow_transfer.cli import main as cli_main
from airflow_transfer.engine import bundle, bundle_sizes
from airflow_transfer.engine.bundle_channel import CARRIER_ENV, prestart_upload_sinks, start_download_helpers
from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.pool import SFTPPool
from tests.support.cli import kill_cli_when, run_cli, ssh_args
from tests.support.data import temp_files, tree_digest, write_random
from tests.support.sshd import chown_to_user, restricted_sshd
from tests.test_bundle import _tree, flip_in_transit


def _pull(sshd, src: Path, dst: Path, **kw):
    return run_copy(
        CopyRequest(
            Endpoint("sftp", str(src), sshd.target(look_for_keys=False)),
            Endpoint("file", str(dst)),
            TransferParams(pp=8, cc=2),
            **kw,
        )
    )


def _push(sshd, src: Path, dst: Path):
    return run_copy(
        CopyRequest(
            Endpoint("file", str(src)),
            Endpoint("sftp", str(dst), sshd.target(look_for_keys=False)),
            TransferParams(pp=8, cc=2),
            use_store=False,
        )
    )


def _pull_with_helpers_ahead(sshd, src: Path, dst: Path, cc: int):
    """As the CLI pulls: the pool warming and the bundle helpers starting before the copy runs."""
    target = sshd.target(look_for_keys=False)
    pool = SFTPPool(target)  # the session adopts a pool made for its own target object
    pool.warm(cc)
    assert start_download_helpers(pool, cc) == cc
    req = CopyRequest(
        Endpoint("sftp", str(src), target), Endpoint("file", str(dst)), TransferParams(pp=8, cc=cc), use_store=False
    )
    req.pool = pool
    return run_copy(req)


def _push_with_sinks_ahead(target, src: Path, dst: Path, cc: int, verify: str | None, spare: int = 0):
    """As the CLI pushes: the pool warming (`spare` connections more than the sinks, as for the
    verifier), each of the first cc connections starting its sink when it is open."""
    pool = SFTPPool(target)
    assert prestart_upload_sinks(pool, cc) == cc
    pool.warm(cc + spare)
    req = CopyRequest(
        Endpoint("file", str(src)),
        Endpoint("sftp", str(dst), target),
        TransferParams(pp=8, cc=cc),
        use_store=False,
        verify=verify,
    )
    req.pool = pool
    return run_copy(req)


def _record_sinks(monkeypatch, starter: str = "over_paramiko") -> tuple[list[str], list[str]]:
    """(threads that started a helper through SinkChannel.`starter`, carriers of the helpers
    closed), as they happen; the helpers themselves run as usual."""
    started: list[str] = []
    closed: list[str] = []
    real_open, real_close = getattr(bundle.SinkChannel, starter).__func__, bundle.SinkChannel.close

    def opened(cls, where):
        started.append(threading.current_thread().name)
        return real_open(cls, where)

    seen: set[int] = set()

    def close(self):
        if id(self) not in seen:  # closing twice is harmless (a pair closes its partner too)
            seen.add(id(self))
            closed.append(self.carrier)
        return real_close(self)

    monkeypatch.setattr(bundle.SinkChannel, starter, classmethod(opened))
    monkeypatch.setattr(bundle.SinkChannel, "close", close)
    return started, closed


def test_upload_sinks_started_with_their_connections_are_the_ones_the_chunk_uses(
    sshd, local_dir, remote_dir, monkeypatch
):
    """prestart_upload_sinks: each warm connection starts its sink as soon as it is open; the
    chunk's two workers use those two and start none of their own; both close at the end."""
    monkeypatch.setenv(CARRIER_ENV, "paramiko")  # sinks started on their connections: the paramiko carrier
    src = _tree(local_dir / "up-ahead", 80, seed=33)
    started, closed = _record_sinks(monkeypatch)
    dst = remote_dir / "up-ahead"
    s = _push_with_sinks_ahead(sshd.target(look_for_keys=False), src, dst, 2, None)  # no verifier connection
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert any("bundle: " in c["transport"] and "over paramiko" in c["transport"] for c in s["chunks"]), s["chunks"]
    assert started == ["bundle-warm", "bundle-warm"], started
    assert sorted(closed) == ["local", "local", "paramiko", "paramiko"], closed  # each sink with its feeder


def test_verified_upload_workers_take_the_connections_whose_sinks_started_ahead(
    sshd, local_dir, remote_dir, monkeypatch
):
    """cc + 1 connections warmed for a verified upload, a sink started on the first cc only.
    The workers take those two and start none of their own (they used to take the connection
    released last, often the one without a sink, and start a third sink while one sat idle),
    and each sink is closed exactly once."""
    monkeypatch.setenv(CARRIER_ENV, "paramiko")  # sinks started on their connections: the paramiko carrier
    src = _tree(local_dir / "up-ahead-cli", 300, seed=36)
    started, closed = _record_sinks(monkeypatch)
    dst = remote_dir / "up-ahead-cli"
    s = _push_with_sinks_ahead(sshd.target(look_for_keys=False), src, dst, 2, "sha256", spare=1)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert s["verify"]["verified"] == 300 and s["verify"]["bundled_files"] == 300, s["verify"]
    assert started == ["bundle-warm", "bundle-warm"], started
    assert sorted(closed) == ["local", "local", "paramiko", "paramiko"], closed  # each sink and feeder once


def test_an_upload_sink_that_cannot_start_ahead_leaves_its_reason_for_the_summary(test_base, local_dir, monkeypatch):
    """On an SFTP-only server the sink started with the connection fails; the chunk takes its
    reason and goes over SFTP saying why."""
    monkeypatch.setenv(CARRIER_ENV, "paramiko")  # sinks started on their connections: the paramiko carrier
    base = test_base / "sshd-bundle-up-ahead-no-exec"
    server = restricted_sshd(base, "no-exec")
    try:
        src = _tree(local_dir / "up-no-exec", 20, seed=35)
        dst = base / "dst"
        dst.mkdir()
        chown_to_user(dst, server.user)
        s = _push_with_sinks_ahead(server.target(look_for_keys=False), src, dst, 1, "sha256")
        assert s["failed"] == [] and tree_digest(dst) == tree_digest(src)
        why = [c.get("transport", "") for c in s["chunks"]]
        assert any(w.startswith("sftp (") and "exec" in w for w in why), why
    finally:
        server.stop()


def _sftp_opens(sshd, mark: int) -> list[str]:
    return [os.path.basename(p) for _, op, p in sshd.sftp_events(mark) if op == "open"]


def test_small_files_download_in_bundles_verified_and_big_ones_over_sftp(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "tree", 300, seed=11, big=2)
    dst = local_dir / "tree"
    mark = sshd.log_mark()
    s = _pull(sshd, src, dst, use_store=False)
    assert s["failed"] == [] and s["direction"] == "download"
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    v = s["verify"]
    assert v["verified"] == 302 and v["mismatched"] == 0 and v["bundled_files"] == 300
    assert "bundle helper digests at the source" in v["where"], v["where"]
    assert any("bundle: 300 files" in c.get("transport", "") for c in s["chunks"]), s["chunks"]
    # Over SFTP only the two big files were opened; no small one.
    opened = _sftp_opens(sshd, mark)
    assert sorted(n for n in opened if n.startswith("b")) == ["b0.bin", "b1.bin"]
    assert not any(n.startswith("s") for n in opened), opened[:5]
    for rel in ("d1/s0001.bin", "d3/s0010.bin"):
        a, b = (src / rel).stat(), (dst / rel).stat()
        assert int(a.st_mtime) == int(b.st_mtime) and a.st_mode & 0o7777 == b.st_mode & 0o7777


def test_a_byte_flipped_on_the_way_down_is_caught_and_only_that_file_fetched_again(
    sshd, local_dir, remote_dir, monkeypatch
):
    src = _tree(remote_dir / "flip", 80, seed=12)
    dst = local_dir / "flip"
    flipped = flip_in_transit(monkeypatch, lambda head: True)
    s = _pull(sshd, src, dst, use_store=False)
    assert len(flipped) == 1 and s["failed"] == []
    v = s["verify"]
    assert v["mismatched"] == 1 and v["repaired"] == 1 and v["verified"] == 80
    assert s["files_retried"] == 1
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []


def test_kill_mid_group_then_resume_fetches_only_the_unfinished(sshd, local_dir, remote_dir, tmp_path):
    src = _tree(remote_dir / "killed", 2000, seed=13)
    dst = local_dir / "killed"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["copy", sshd.url(str(src)), str(dst), "--store", store, "-c", "2", *ssh_args(sshd)]
    kill_cli_when(args, lambda: dst.exists() and sum(1 for _ in dst.rglob("s*.bin")) >= 300)
    # A file under its final name is complete and verified; a re-fetch would give it a new inode.
    before = {p: p.stat().st_ino for p in dst.rglob("s*.bin")}
    assert 0 < len(before) < 2000
    res = subprocess.run(
        [sys.executable, "-m", "airflow_transfer.cli", *args, "--json"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads(res.stdout)
    assert s["failed"] == []
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert s["files_skipped"] >= len(before)
    assert all(p.stat().st_ino == ino for p, ino in before.items())


def test_verify_none_download_lands_whole_files_under_their_final_names(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "noverify", 120, seed=14)
    dst = local_dir / "noverify"
    s = _pull(sshd, src, dst, use_store=False, verify=None)
    assert s["failed"] == [] and s["verify"]["verified"] == 0
    assert any("bundle:" in c.get("transport", "") for c in s["chunks"])
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []


def test_sftp_only_source_downloads_over_sftp_and_says_why(test_base, local_dir):
    base = test_base / "sshd-bundle-pull-no-exec"
    server = restricted_sshd(base, "no-exec")
    try:
        src = _tree(base / "src", 40, seed=15)
        chown_to_user(src, server.user)
        s = _pull(server, src, local_dir / "x", use_store=False)
        assert s["failed"] == [] and tree_digest(local_dir / "x") == tree_digest(src)
        assert s["verify"]["verified"] == 40 and "bundled_files" not in s["verify"]
        why = [c.get("transport", "") for c in s["chunks"]]
        assert any(w.startswith("sftp (") and "exec" in w for w in why), why
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_both_directions_ride_openssh_and_the_summary_says_so(sshd, local_dir, remote_dir):
    src = _tree(remote_dir / "carrier", 60, seed=21)
    s = _pull(sshd, src, local_dir / "carrier", use_store=False)
    assert s["failed"] == [] and tree_digest(local_dir / "carrier") == tree_digest(src)
    assert any("bundle: 60 files" in c["transport"] and "over openssh" in c["transport"] for c in s["chunks"])
    up = _push(sshd, src, remote_dir / "carrier-up")
    assert up["failed"] == [] and tree_digest(remote_dir / "carrier-up") == tree_digest(src)
    assert any("bundle: 60 files" in c["transport"] and "over openssh" in c["transport"] for c in up["chunks"])


def test_download_helpers_started_with_the_first_handshakes_are_the_ones_the_chunk_uses(
    sshd, local_dir, remote_dir, monkeypatch
):
    """The CLI starts a download's helpers while its libraries load (start_download_helpers):
    the chunk takes those, starting none of its own, and none is left over or lost."""
    src = _tree(remote_dir / "ahead", 80, seed=31)
    started, closed = _record_sinks(monkeypatch, "over_openssh")
    s = _pull_with_helpers_ahead(sshd, src, local_dir / "ahead", 2)
    assert s["failed"] == [] and tree_digest(local_dir / "ahead") == tree_digest(src)
    assert temp_files(local_dir / "ahead") == []
    assert any("bundle: " in c["transport"] and "over openssh" in c["transport"] for c in s["chunks"]), s["chunks"]
    assert started == ["bundle-warm", "bundle-warm"]  # the chunk's two channels opened none of their own
    # Both pairs closed with their connections at the end, none before: each was used, not replaced.
    assert sorted(closed) == ["local", "local", "openssh", "openssh"], closed


def test_a_download_helper_that_cannot_start_ahead_leaves_its_reason_for_the_summary(test_base, local_dir):
    """On an SFTP-only server the helper started ahead fails; the chunk takes its reason, tries
    paramiko's exec channel as it would have anyway, and goes over SFTP saying why."""
    base = test_base / "sshd-bundle-ahead-no-exec"
    server = restricted_sshd(base, "no-exec")
    try:
        src = _tree(base / "src", 20, seed=32)
        chown_to_user(src, server.user)
        s = _pull_with_helpers_ahead(server, src, local_dir / "y", 1)
        assert s["failed"] == [] and tree_digest(local_dir / "y") == tree_digest(src)
        why = [c.get("transport", "") for c in s["chunks"]]
        assert any(w.startswith("sftp (") and "exec" in w for w in why), why
    finally:
        server.stop()


def test_the_carrier_can_be_forced_either_way(sshd, local_dir, remote_dir, monkeypatch):
    src = _tree(remote_dir / "forced", 30, seed=24)
    monkeypatch.setenv("AIRFLOW_TRANSFER_BUNDLE_CARRIER", "paramiko")
    s = _pull(sshd, src, local_dir / "forced", use_store=False)
    assert s["failed"] == [] and tree_digest(local_dir / "forced") == tree_digest(src)
    assert any("over paramiko" in c["transport"] for c in s["chunks"]), s["chunks"]
    up = _push(sshd, src, remote_dir / "forced-up")
    assert up["failed"] == [] and tree_digest(remote_dir / "forced-up") == tree_digest(src)
    assert any("over paramiko" in c["transport"] for c in up["chunks"]), up["chunks"]
    monkeypatch.setenv("AIRFLOW_TRANSFER_BUNDLE_CARRIER", "openssh")
    down = _pull(sshd, src, local_dir / "forced-down", use_store=False)
    assert down["failed"] == [] and any("over openssh" in c["transport"] for c in down["chunks"]), down["chunks"]


def test_without_an_ssh_client_downloads_bundle_over_paramiko_and_say_why(sshd, local_dir, remote_dir, monkeypatch):
    empty = local_dir / "no-ssh-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no `ssh` to find: a host without OpenSSH's client
    src = _tree(remote_dir / "no-ssh", 40, seed=22)
    s = _pull(sshd, src, local_dir / "no-ssh", use_store=False)
    assert s["failed"] == [] and tree_digest(local_dir / "no-ssh") == tree_digest(src)
    transports = [c["transport"] for c in s["chunks"]]
    assert any("over paramiko (no `ssh` client on PATH)" in t for t in transports), transports


def test_a_lander_killed_mid_copy_loses_nothing(sshd, local_dir, remote_dir, monkeypatch):
    # The local helper that lands downloaded groups dies (SIGKILL) before its first commit is
    # answered: those files go again over a new connection, with a new helper.
    src = _tree(remote_dir / "lander", 200, seed=23)
    dst = local_dir / "lander"
    killed: list[int] = []
    real_result = bundle.SinkChannel.result

    def killing_result(self, commit_id, count):
        if self.carrier == "local" and not killed:
            proc = self.chan._proc.proc
            killed.append(proc.pid)
            proc.kill()
            proc.wait()
        return real_result(self, commit_id, count)

    monkeypatch.setattr(bundle.SinkChannel, "result", killing_result)
    s = _pull(sshd, src, dst, use_store=False)
    assert len(killed) == 1
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert s["files_retried"] >= 1


def test_a_download_channel_starts_with_small_groups_and_grows_them_with_its_rate(
    sshd, local_dir, remote_dir, monkeypatch
):
    """The server's congestion window is out of sight: each channel's first two groups (asked
    before any came in) hold GROUP_MIN_BYTES, later ones what the channel carried in half a
    second, so a new or slowed channel holds little of what is left (wan50 `tiny`: a third
    channel added late, in slow start, carried its 10 MiB for 1.9 s after the others were done)."""
    src = remote_dir / "growing"
    for i in range(96):
        write_random(src / f"f{i:03d}.bin", 256 * 1024, seed=700 + i)
    chown_to_user(src, sshd.user)
    asked: dict[str, list[int]] = {}
    real = bundle.BundleMover.take_group

    def recorded(self, limit, max_bytes=bundle_sizes.GROUP_BYTES):
        asked.setdefault(threading.current_thread().name, []).append(max_bytes)
        return real(self, limit, max_bytes)

    monkeypatch.setattr(bundle.BundleMover, "take_group", recorded)
    dst = local_dir / "growing"
    s = _pull(sshd, src, dst, use_store=False)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert asked and all(
        bounds[:2] == [bundle_sizes.GROUP_MIN_BYTES] * min(2, len(bounds)) for bounds in asked.values()
    )
    # loopback carries far more than 2 MiB/s: a channel that read a group takes larger ones
    assert any(max(bounds[2:], default=0) > bundle_sizes.GROUP_MIN_BYTES for bounds in asked.values()), asked


def test_the_command_line_starts_a_sink_on_every_connection_it_warms_for_an_upload(
    sshd, local_dir, remote_dir, tmp_path, monkeypatch
):
    """A verified upload warms one connection more than its data connections (the checksum
    helper's); a sink starts on each, so a plan that runs one channel more than the two warmed
    for data (first contact on wan50 `tiny` starts at three) finds its third sink ready instead
    of starting it in its worker, 0.22 s into the chunk at 50 ms RTT."""
    monkeypatch.setenv(CARRIER_ENV, "paramiko")  # sinks started on their connections: the paramiko carrier
    src = _tree(local_dir / "up-cli-three", 240, seed=37)
    started, closed = _record_sinks(monkeypatch)
    dst = remote_dir / "up-cli-three"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    code = cli_main(["copy", str(src), sshd.url(str(dst)), "-c", "3", "--store", store, *ssh_args(sshd)])
    assert code == 0 and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert started == ["bundle-warm"] * 3, started  # none started by a worker
    assert sorted(closed) == ["local"] * 3 + ["paramiko"] * 3, closed  # each sink with its feeder


def test_a_download_lander_starts_while_the_sources_helper_is_still_starting(sshd, local_dir, remote_dir, monkeypatch):
    """The lander (0.05 s) does not wait for the source's helper (an `ssh` login, most of a
    second at 50 ms RTT): each source helper here waits until a lander has started, which a
    lander started after it would never do in time."""
    src = _tree(remote_dir / "lander-beside", 60, seed=38)
    lander_started = threading.Event()
    waited: list[bool] = []
    real_openssh, real_local = bundle.SinkChannel.over_openssh.__func__, bundle.SinkChannel.local.__func__

    def over_openssh(cls, target):
        waited.append(lander_started.wait(20))
        return real_openssh(cls, target)

    def local(cls):
        lander_started.set()
        return real_local(cls)

    monkeypatch.setattr(bundle.SinkChannel, "over_openssh", classmethod(over_openssh))
    monkeypatch.setattr(bundle.SinkChannel, "local", classmethod(local))
    s = _pull_with_helpers_ahead(sshd, src, local_dir / "lander-beside", 2)
    assert s["failed"] == [] and tree_digest(local_dir / "lander-beside") == tree_digest(src)
    assert waited == [True, True], waited


def test_a_source_changed_or_gone_since_its_listing_is_fetched_again_or_reported(sshd, local_dir, remote_dir):
    """The source's helper checks each file against its listing (size and mtime) as it reads
    it: a changed file is fetched again whole, a vanished one fails alone, and the rest land."""
    src = _tree(remote_dir / "changed", 40, seed=41)
    dst = local_dir / "changed"
    manifest = local_dir / "changed.parquet"
    assert run_cli("list", sshd.url(str(src)), "--out", str(manifest), *ssh_args(sshd)).code == 0
    files = sorted(p for p in src.rglob("*") if p.is_file())
    grown, touched, gone = files[3], files[17], files[29]
    write_random(grown, grown.stat().st_size + 100, seed=901)
    os.utime(touched, (1_600_000_000, 1_600_000_000))
    gone.unlink()
    res = run_cli("copy", sshd.url(str(src)), str(dst), "--manifest", str(manifest), "--json", *ssh_args(sshd))
    s = res.summary
    assert [Path(f["path"]).name for f in s["failed"]] == [gone.name], s["failed"]
    assert "no such file" in s["failed"][0]["error"].lower()
    assert s["files_retried"] >= 2 and "bundle:" in json.dumps(s["chunks"])
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
