"""Small files in bundles over SSH exec (engine/bundle.py, remote/bundle_sink.py), against a real sshd."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_transfer.engine import bundle, bundle_channel, bundle_sizes, transfer
from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from tests.support.cli import kill_cli_when, ssh_args
from tests.support.data import temp_files, tree_digest, write_random
from tests.support.sshd import chown_to_user, restricted_sshd


def _tree(root: Path, n: int, seed: int, big: int = 0) -> Path:
    rng = random.Random(seed)
    for i in range(n):
        write_random(root / f"d{i % 7}" / f"s{i:04d}.bin", rng.choice([0, 1, 700, 4096, 65536, 200_000]), seed=i)
    for i in range(big):
        write_random(root / "big" / f"b{i}.bin", 3 * 1024 * 1024 + i, seed=1000 + i)
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        os.chmod(d, 0o755)
    return root


def _copy(sshd, src: Path, dst: Path, **kw):
    return run_copy(
        CopyRequest(
            Endpoint("file", str(src)),
            Endpoint("sftp", str(dst), sshd.target(look_for_keys=False)),
            TransferParams(pp=8, cc=2),
            **kw,
        )
    )


def _sftp_opens(sshd, mark: int) -> int:
    return sum(1 for e in sshd.sftp_events(mark) if e[1] == "open")


def test_small_files_travel_in_bundles_verified_and_big_ones_over_sftp(sshd, local_dir, remote_dir):
    src = _tree(local_dir / "mixed", 300, seed=1, big=2)
    dst = remote_dir / "mixed"
    mark = sshd.log_mark()
    s = _copy(sshd, src, dst, use_store=False)
    assert s["failed"] == []
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    v = s["verify"]
    assert v["verified"] == 302 and v["mismatched"] == 0
    assert v["bundled_files"] == 300 and "bundle sink" in v["where"]
    assert any("bundle: 300 files" in c.get("transport", "") for c in s["chunks"]), s["chunks"]
    # Only the two big files were opened over SFTP (their temporary names), never a small one.
    assert _sftp_opens(sshd, mark) >= 2
    opened = {os.path.basename(p) for _, op, p in sshd.sftp_events(mark) if op == "open"}
    assert not any(n.startswith(".s") for n in opened), sorted(opened)[:5]
    # Mode and mtime as the source's.
    a, b = src / "d1" / "s0001.bin", dst / "d1" / "s0001.bin"
    assert int(a.stat().st_mtime) == int(b.stat().st_mtime)
    assert (a.stat().st_mode & 0o777) == (b.stat().st_mode & 0o777)


def flip_in_transit(monkeypatch, wanted) -> list[str]:
    """Flip one byte of the first file whose put header `wanted(header)` picks, in the stream
    between the two helpers (after the reading one took its digest: a flip in transit). Its
    header and bytes must come in one piece of the stream; the paths flipped, as it happens.

    The pump then copies through this process even between two pipes (it splices them
    otherwise, and spliced bytes never pass where a test could flip one)."""
    flipped: list[str] = []
    monkeypatch.setattr(bundle_channel, "_pipes", lambda source, dest: None)
    real_forward = bundle_channel.Pump.forward

    def corrupting_forward(self, data):
        at = data.find(b'{"op":"put"') if not flipped else -1
        while at >= 0 and not flipped:
            end = data.find(b"\n", at)
            if end < 0:
                break
            head = json.loads(data[at:end])
            last = end + head["size"]
            if head["size"] and last < len(data) and wanted(head):
                data = data[:last] + bytes([data[last] ^ 0xFF]) + data[last + 1 :]
                flipped.append(head["path"])
            at = data.find(b'{"op":"put"', end)
        real_forward(self, data)

    monkeypatch.setattr(bundle_channel.Pump, "forward", corrupting_forward)
    return flipped


def test_a_byte_flipped_on_the_way_is_caught_and_only_that_file_sent_again(sshd, local_dir, remote_dir, monkeypatch):
    src = _tree(local_dir / "flip", 60, seed=2)
    dst = remote_dir / "flip"
    flipped = flip_in_transit(monkeypatch, lambda head: head["path"].endswith("s0013.bin"))
    s = _copy(sshd, src, dst, use_store=False)
    assert flipped == [str(dst / "d6" / "s0013.bin")]
    assert s["failed"] == []
    v = s["verify"]
    assert v["mismatched"] == 1 and v["repaired"] == 1 and v["verified"] == 60
    assert s["files_retried"] == 1  # that file alone went again
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []


def test_a_fault_in_our_own_code_fails_the_chunk_instead_of_reconnecting_forever(
    sshd, local_dir, remote_dir, monkeypatch
):
    # A TypeError is the same on every connection: the worker must not reconnect and try again
    # until the deadline (a changed signature once hung a copy this way).
    src = _tree(local_dir / "bug", 40, seed=4)
    dst = remote_dir / "bug"
    calls = []

    def broken_relay(self, *args):
        calls.append(1)
        raise TypeError("relay() takes 4 positional arguments")

    monkeypatch.setattr(bundle.SinkChannel, "relay", broken_relay)
    s = _copy(sshd, src, dst, use_store=False)
    assert s["failed"] and all("relay() takes 4 positional arguments" in f["error"] for f in s["failed"]), s["failed"]
    assert len(calls) <= 2  # one per worker (cc 2), not one per reconnect
    assert temp_files(dst) == []


def test_kill_mid_group_then_resume_sends_only_the_unfinished(sshd, local_dir, remote_dir, tmp_path):
    src = _tree(local_dir / "killed", 2000, seed=3)
    dst = remote_dir / "killed"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    args = ["copy", str(src), sshd.url(str(dst)), "--store", store, "-c", "2", *ssh_args(sshd)]
    kill_cli_when(args, lambda: dst.exists() and sum(1 for _ in dst.rglob("s*.bin")) >= 300)
    before = {p: p.stat().st_mtime_ns for p in dst.rglob("s*.bin")}
    assert 0 < len(before) < 2000
    res = subprocess.run(
        [sys.executable, "-m", "airflow_transfer.cli", *args, "--json"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    s = json.loads(res.stdout)
    assert s["failed"] == []
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    # Files complete before the kill were skipped, not sent again.
    assert s["files_skipped"] >= len(before) - 256  # at most the group in flight was not yet journaled
    unchanged = sum(1 for p, m in before.items() if p.stat().st_mtime_ns == m)
    assert unchanged == len(before)


def test_sftp_only_server_runs_the_same_copy_over_sftp_and_says_why(test_base, local_dir):
    base = test_base / "sshd-bundle-no-exec"
    server = restricted_sshd(base, "no-exec")
    try:
        dst = base / "dst"
        dst.mkdir()
        chown_to_user(dst, server.user)
        src = _tree(local_dir / "noexec", 50, seed=4)
        s = _copy(server, src, dst / "x", use_store=False)
        assert s["failed"] == []
        assert tree_digest(dst / "x") == tree_digest(src)
        assert s["verify"]["verified"] == 50 and "bundled_files" not in s["verify"]
        why = [c.get("transport", "") for c in s["chunks"]]
        assert any(w.startswith("sftp (") and "exec" in w for w in why), why
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_verify_none_still_lands_every_file_under_its_final_name_only_whole(sshd, local_dir, remote_dir):
    src = _tree(local_dir / "noverify", 120, seed=5)
    dst = remote_dir / "noverify"
    s = _copy(sshd, src, dst, use_store=False, verify=None)
    assert s["failed"] == [] and s["verify"]["verified"] == 0
    assert any("bundle:" in c.get("transport", "") for c in s["chunks"])
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []


@pytest.mark.parametrize("size", [bundle.BUNDLE_MAX_FILE, bundle.BUNDLE_MAX_FILE + 1])
def test_the_size_limit_decides_the_path(sshd, local_dir, remote_dir, size):
    src = local_dir / f"limit-{size}"
    write_random(src / "one.bin", size, seed=size)
    write_random(src / "tiny.bin", 10, seed=1)
    dst = remote_dir / f"limit-{size}"
    s = _copy(sshd, src, dst, use_store=False)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src)
    assert s["verify"]["bundled_files"] == (2 if size == bundle.BUNDLE_MAX_FILE else 1)


def test_a_sink_serves_every_chunk_of_its_connection(sshd, local_dir, remote_dir, monkeypatch):
    # Eight chunks of small files (adaptive-cc) over at most four connections: python3 and the
    # sink's hello are paid once per connection, not once per chunk.
    started = []
    real_init = bundle.SinkChannel.__init__

    feeders = []

    def counting_init(self, chan, carrier="paramiko"):
        (feeders if carrier == "local" else started).append(chan)  # the helper on this host feeding it
        real_init(self, chan, carrier)

    monkeypatch.setattr(bundle.SinkChannel, "__init__", counting_init)
    src = local_dir / "many"
    for i in range(400):
        write_random(src / f"d{i % 4}" / f"f{i:04d}", 512 + i, seed=i)
    dst = remote_dir / "many"
    s = run_copy(
        CopyRequest(
            Endpoint("file", str(src)),
            Endpoint("sftp", str(dst), sshd.target(look_for_keys=False)),
            TransferParams(pp=8, cc=2),
            algorithm="adaptive-cc",
            use_store=False,
        )
    )
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src)
    assert len(s["chunks"]) >= 4 and all("bundle:" in c["transport"] for c in s["chunks"]), s["chunks"]
    # One sink per connection (the most any chunk held, and the checksum helper's): a sink per
    # chunk would start one for each connection of each chunk. How far adaptive-cc ramps
    # depends on the machine's speed; the bound holds at any ramp.
    opened = max(c["cc"] for c in s["chunks"])
    per_chunk = sum(c["cc"] for c in s["chunks"])
    assert 1 <= len(started) <= opened + 1 < per_chunk, (len(started), opened, per_chunk)
    assert len(feeders) == len(started)  # one each, kept with the connection as its sink is


def test_every_channel_gets_its_share_of_the_groups(sshd, local_dir, remote_dir):
    # 300 small files fit one group (1024 files, 16 MiB): without a per-worker share the first
    # channel took them all while the second had nothing, and a channel opened late (slow start
    # on a long path) could take the last big group alone.
    src = _tree(local_dir / "share", 300, seed=5)
    dst = remote_dir / "share"
    s = _copy(sshd, src, dst, use_store=False)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src)
    (chunk,) = s["chunks"]
    groups = int(chunk["transport"].split(" in ")[1].split()[0])
    # cc 2: each group at most half of what was waiting (150, 75, 38, ...), never under 16 files
    assert 4 <= groups <= 300 // bundle_sizes.TAIL_GROUP_FILES + 8, chunk["transport"]


def test_a_group_whose_commit_reply_was_lost_is_found_in_place_not_sent_again(sshd, local_dir, remote_dir, monkeypatch):
    """The connection falls between a group's commit and its reply: the files are in place,
    verified and renamed, but the copy never heard so. The retry on a new connection finds them
    at their final names and sends none of them again. (The fault's timing cannot be produced
    for real: the reply is read and dropped here.)"""
    src = _tree(local_dir / "unheard", 200, seed=5)
    dst = remote_dir / "unheard"
    landed: dict[str, int] = {}  # file -> inode when its reply was dropped
    settle = bundle.BundleMover.settle

    def lose_first_reply(mover, group, results):
        if landed:
            return settle(mover, group, results)
        assert results and all(r.get("ok") for r in results), results
        for _, t in group.items:
            landed[t.rel] = os.stat(t.dst).st_ino
        raise ConnectionError("connection lost before the commit's reply was read (test)")

    monkeypatch.setattr(bundle.BundleMover, "settle", lose_first_reply)
    s = _copy(sshd, src, dst, use_store=False)
    assert landed, "no group was committed"
    assert s["failed"] == [], s["failed"][:5]
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    # A file sent again would land under a new inode (a new temporary file, renamed over it).
    again = [rel for rel, ino in landed.items() if os.stat(dst / rel).st_ino != ino]
    assert again == [], f"{len(again)} of {len(landed)} landed files were sent again"
    assert s["connections_lost"] >= 1


def test_a_copy_into_new_directories_looks_for_none_of_its_files_there_and_a_rerun_finds_them_all(
    sshd, local_dir, remote_dir, monkeypatch
):
    """Directories the chunk's own MKDIRs created hold nothing yet: the chunk sends no LSTAT
    for their files (one per file before: 100,000 for a new tree of as many files). A re-run
    into the same tree looks each one up and skips them all; so does a download into a new
    local tree and its re-run."""
    src = _tree(local_dir / "fresh-src", 120, seed=41)  # every file in a subdirectory
    looked: list[int] = []
    real_remote = transfer.same_size_and_mtime
    monkeypatch.setattr(
        transfer, "same_size_and_mtime", lambda pool, tasks: looked.append(len(tasks)) or real_remote(pool, tasks)
    )
    dst = remote_dir / "fresh-dst"
    first = _copy(sshd, src, dst, use_store=False)
    assert first["failed"] == [] and tree_digest(dst) == tree_digest(src)
    assert sum(looked) == 0, looked
    again = _copy(sshd, src, dst, use_store=False)
    assert again["failed"] == [] and again["files_skipped"] == 120
    assert sum(looked) == 120, looked
    # Downloads: the local directories made for the chunk are fresh too.
    stats: list[str] = []
    real_stat = os.stat

    def counting_stat(path, *args, **kwargs):
        if str(path).startswith(str(local_dir / "fresh-down")) and str(path).endswith(".bin"):
            stats.append(str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(transfer.os, "stat", counting_stat)
    down = local_dir / "fresh-down"

    def pull() -> dict:
        remote = Endpoint("sftp", str(dst), sshd.target(look_for_keys=False))
        return run_copy(CopyRequest(remote, Endpoint("file", str(down)), TransferParams(pp=8, cc=2), use_store=False))

    pulled = pull()
    assert pulled["failed"] == [] and tree_digest(down) == tree_digest(src)
    assert stats == []
    pulled_again = pull()
    assert pulled_again["files_skipped"] == 120 and len(stats) >= 120


def test_a_bundled_file_that_grew_since_its_listing_is_sent_again_whole(sshd, local_dir, remote_dir):
    """The mover reads each small file checked against its listed size and mtime: one that grew
    after the listing is not placed as listed; the engine takes its new size and sends it again,
    so the destination holds what the source holds now."""
    from airflow_transfer.manifest import list_local

    src = _tree(local_dir / "changed", 30, seed=41)
    listed = list_local(str(src))
    grown = src / "d3" / "s0003.bin"
    with open(grown, "ab") as f:
        f.write(b"more")
    dst = remote_dir / "changed"
    s = _copy(sshd, src, dst, use_store=False, manifest=listed)
    assert s["failed"] == [] and s["files_retried"] >= 1, s
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert (dst / "d3" / "s0003.bin").read_bytes().endswith(b"more")


def test_a_group_holds_what_its_connection_window_carries_in_half_a_second():
    assert bundle_sizes.group_bytes(None) == bundle_sizes.GROUP_BYTES  # unknown (an OpenSSH carrier): the usual bound
    assert bundle_sizes.group_bytes(1e12) == bundle_sizes.GROUP_BYTES
    assert bundle_sizes.group_bytes(10.0) == bundle_sizes.GROUP_MIN_BYTES
    assert bundle_sizes.group_bytes(8e6) == int(8e6 * bundle_sizes.GROUP_SECONDS)


def test_a_connection_with_a_small_window_sends_small_groups(sshd, local_dir, remote_dir, monkeypatch):
    """A connection whose congestion window was cut (a loss on a long path: not something loopback
    produces, hence the stand-in figure) takes groups of GROUP_MIN_BYTES, not GROUP_BYTES; every
    file still lands verified."""
    src = local_dir / "narrow"
    for i in range(64):
        write_random(src / f"f{i:03d}.bin", 256 * 1024, seed=500 + i)
    os.chmod(src, 0o755)
    monkeypatch.setenv(bundle_channel.CARRIER_ENV, "paramiko")  # its socket's window is seen only then
    monkeypatch.setattr(bundle, "tcp_send_rate", lambda sock: 1.0)
    dst = remote_dir / "narrow"
    s = _copy(sshd, src, dst, use_store=False)
    assert s["failed"] == [] and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    # 16 MiB at 1 MiB a group: at least 16 groups (with GROUP_BYTES it takes 2, one per channel).
    groups = [
        int(c["transport"].split(" groups")[0].rsplit(" ", 1)[1]) for c in s["chunks"] if "bundle: " in c["transport"]
    ]
    assert sum(groups) >= 16, s["chunks"]


def test_the_group_bound_reads_the_window_of_the_socket_the_sink_rides(sshd, local_dir, remote_dir, monkeypatch):
    monkeypatch.setenv(bundle_channel.CARRIER_ENV, "paramiko")  # the socket is this process's only then
    src = _tree(local_dir / "window", 40, seed=42)
    rates: list[float | None] = []
    real = bundle.tcp_send_rate

    def recorded(sock):
        rates.append(real(sock))
        return rates[-1]

    monkeypatch.setattr(bundle, "tcp_send_rate", recorded)
    s = _copy(sshd, src, remote_dir / "window", use_store=False)
    assert s["failed"] == [] and tree_digest(remote_dir / "window") == tree_digest(src)
    assert rates and all(r is not None and r > 0 for r in rates), rates


@pytest.mark.parametrize(
    ("tmp", "path", "mtime", "algo", "digest"),
    [
        ("/d/.a.atpart", "/d/a", 1795861320.123456, "sha256", "ab" * 32),
        ("/d/.caf\udce9.atpart", "/d/caf\udce9", -1.5, None, None),  # an undecodable byte, kept as a surrogate
        ('/d/."q\\u.atpart', '/d/"q\\u', 1e16, "md5", "00"),  # quote and backslash
        ("/d/.é\u2603.atpart", "/d/é\u2603", 0.0, "sha1", "ff"),
        ("/d/.x.atpart", "/d/x", 7, "sha256", "aa"),  # a whole-second mtime
    ],
)
def test_a_send_line_is_the_json_the_encoder_writes(tmp, path, mtime, algo, digest):
    # Send requests are formatted directly (once per file); the helper parses them with
    # json.loads, so they must be exactly what encoding the request object gives.
    from types import SimpleNamespace

    from airflow_transfer.engine.bundle_channel import _json, put_mac, send_line

    task = SimpleNamespace(size=3, mtime=mtime, mode=0o100644)
    dst = path + (digest or "")  # another name in the same directory
    line = send_line(5, path, task, _json(algo), tmp, dst)  # type: ignore[arg-type]
    request = {"op": "send", "id": 5, "path": path, "size": 3, "mtime": float(mtime), "mode": 0o644}
    request.update(algo=algo, tmp=tmp, dst=dst)
    assert line == _json(request).encode("ascii") + b"\n"
    # With a key (a download's lander is confined), the mac of the id and names comes last.
    key = b"k" * 32
    keyed = send_line(5, path, task, _json(algo), tmp, dst, key)  # type: ignore[arg-type]
    assert keyed == _json(dict(request, mac=put_mac(key, 5, tmp, dst))).encode("ascii") + b"\n"


def test_local_paths_are_made_absolute_as_abspath_makes_them(tmp_path, monkeypatch):
    # A group's send lines name local files by absolute path; the directories are made
    # absolute once each (absolute_in). Every shape abspath would fold must come out the same.
    import itertools

    from airflow_transfer.engine.bundle_channel import absolute_in

    monkeypatch.chdir(tmp_path)
    dirs: dict[str, str] = {}
    absolute = absolute_in(dirs)
    parts = ["", "a", ".", "..", "b"]
    shapes = [
        lead + "/".join(combo)
        for k in range(1, 5)
        for combo in itertools.product(parts, repeat=k)
        for lead in ("", "/", "//", "///")
    ]
    for path in filter(None, shapes):
        assert absolute(path) == os.path.abspath(path), path
    assert dirs, "no directory was remembered"
    assert absolute("d0001/f000100") == f"{tmp_path}/d0001/f000100"
