"""Multi-Chunk on the real engine: chunks at once over one pool of channels (engine/chunk_session.py).

Link given as 1 ms / 1 Gbit/s (BDP 125 kB), so the mixed tree below falls into all four MC
classes: small < 12.5 kB, middle < 125 kB, large < 2.5 MB, huge >= 2.5 MB; 8 channels, 2 each.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_transfer.engine.chunk_session import EngineChunkSession
from airflow_transfer.engine.params import TransferParams
from airflow_transfer.engine.transfer import TransferSession
from airflow_transfer.job import CopyRequest, EngineSessionExecutor, run_copy
from airflow_transfer.manifest import list_local
from airflow_transfer.paths import TEMP_SUFFIX
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.tuning import LinkInfo
from airflow_transfer.tuning.chunks import make_spec
from airflow_transfer.tuning.dataset import SortedSizes
from airflow_transfer.tuning.multichunk import MultiChunk
from tests.support.cli import run_cli, ssh_args
from tests.support.data import temp_files, tree_digest, write_random

MIB = 1024 * 1024
LINK = ["--rtt-ms", "1", "--bandwidth-mbit", "1000"]
CLASSES = ("small", "middle", "large", "huge")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mc") / "mixed"
    for i in range(60):
        write_random(root / "small" / f"s{i:03d}.dat", 1000 + 150 * i, seed=i)
    for i in range(30):
        write_random(root / "middle" / f"m{i:02d}.dat", 20_000 + 2500 * i, seed=100 + i)
    for i in range(6):
        write_random(root / "large" / f"l{i}.bin", 600_000 + 200_000 * i, seed=200 + i)
    for i in range(20):
        write_random(root / "huge" / f"h{i:02d}.bin", 3 * MIB + 1000 * i, seed=300 + i)
    return root


def _chunk_of(path: str) -> str | None:
    """The MC class of a destination path of the mixed tree (its top directory)."""
    for name in CLASSES:
        if f"/{name}/" in path:
            return name
    return None


def _writers_at_once(events, keep) -> int:
    """Most sftp sessions (pids) with a temporary file open at the same time, among files `keep` accepts."""
    open_: dict[str, int] = {}
    best = 0
    for pid, op, path in events:
        if not path.endswith(TEMP_SUFFIX) or not keep(path):
            continue
        if op == "open":
            open_[path] = pid
        elif op == "close":
            open_.pop(path, None)
        best = max(best, len(set(open_.values())))
    return best


def _files_open_at_once(events) -> int:
    """Most temporary files open at the same time on the server, whatever session opened them."""
    open_: set[str] = set()
    best = 0
    for _pid, op, path in events:
        if not path.endswith(TEMP_SUFFIX):
            continue
        if op == "open":
            open_.add(path)
        elif op == "close":
            open_.discard(path)
        best = max(best, len(open_))
    return best


@pytest.fixture
def spy(monkeypatch):
    """Records what the real MC scheduler did: its moves and the events it received."""
    seen: dict = {"moves": [], "events": [], "set_channels": [], "mark": None, "started": 0}
    run, wait_any, init = MultiChunk.run, EngineChunkSession.wait_any, EngineChunkSession.__init__
    set_channels, start = EngineChunkSession.set_channels, EngineChunkSession.start

    def start_spy(self, spec, channels):
        seen["started"] += 1
        return start(self, spec, channels)

    def init_spy(self, executor, manifest_sorted, interval=0.05):
        # Progress ticks every 50 ms: on loopback the whole copy can finish within the default 1 s.
        init(self, executor, manifest_sorted, interval)

    def run_spy(self, *args, **kwargs):
        try:
            return run(self, *args, **kwargs)
        finally:
            seen["moves"] = list(self.last_moves)

    def wait_spy(self):
        event = wait_any(self)
        seen.setdefault("started_before_first_event", seen["started"])
        seen["events"].append(event)
        return event

    def set_channels_spy(self, chunk_id, channels):
        # Where the server log stood when the rebalance asked, so a test can tell how much of the
        # chunk was still unsent (seen["mark"]: a test's SSHServer.log_mark, if it set one).
        at_mark = seen["mark"]() if seen["mark"] else None
        seen["set_channels"].append((chunk_id, channels, at_mark))
        return set_channels(self, chunk_id, channels)

    monkeypatch.setattr(MultiChunk, "run", run_spy)
    monkeypatch.setattr(EngineChunkSession, "set_channels", set_channels_spy)
    monkeypatch.setattr(EngineChunkSession, "__init__", init_spy)
    monkeypatch.setattr(EngineChunkSession, "wait_any", wait_spy)
    monkeypatch.setattr(EngineChunkSession, "start", start_spy)
    return seen


def test_mc_runs_chunks_at_once_and_moves_channels(mixed, sshd, remote_dir, spy):
    mark = sshd.log_mark()
    spy["mark"] = sshd.log_mark
    dst = remote_dir / "mc"
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(mixed)),
            Endpoint("sftp", str(dst), sshd.target()),
            # A 32 KiB protocol window against a 125 kB BDP: Large and Huge chunks may
            # use up to 5 channels (multichunk.useful_channels), so they can grow here.
            algorithm="mc",
            link=LinkInfo(rtt_s=0.001, bandwidth_bps=1e9, source="given", channel_window_bytes=32 * 1024),
            # Chunks are seen running at once in sftp-server's log: every class over SFTP.
            bundle=False,
            use_store=False,
        )
    )
    assert summary["failed"] == [] and summary["verify"]["verified"] == 116
    assert tree_digest(dst) == tree_digest(mixed) and temp_files(dst) == []
    assert sorted(c["id"] for c in summary["chunks"]) == [f"mc.{n}" for n in sorted(CLASSES)]

    done = {e.chunk_id: e for e in spy["events"] if e.done}
    assert len(done) == 4 and sum(1 for e in spy["events"] if e.done) == 4  # one done event per chunk
    # At once, by mechanism: all four chunks were started on the session before any of them
    # reported done (overlap in time would depend on how loaded the machine is).
    assert spy["started_before_first_event"] == 4, spy["moves"]
    # The summary places chunks on one timeline (reports draw them from it).
    told = {c["id"]: (c["start_s"], c["start_s"] + c["seconds"]) for c in summary["chunks"]}
    assert all(0 <= lo <= hi <= summary["seconds"] + 0.01 for lo, hi in told.values()), told

    events = sshd.sftp_events(mark)
    # every class's files went through the server (over its own sessions)
    assert {_chunk_of(p) for _, op, p in events if op == "open" and p.endswith(TEMP_SUFFIX)} == set(CLASSES)

    # Channels moved: a chunk's channels went to a running one when it finished, and the
    # engine really ran that chunk with more connections than it started with.
    initial = {cid: n for at, cid, n in spy["moves"] if at == 0.0}
    grown = [(at, cid, n) for at, cid, n in spy["moves"] if at > 0 and n > initial.get(cid, 0)]
    assert initial == {f"mc.{n}": 2 for n in CLASSES} and grown, spy["moves"]
    final = {c["id"]: c["cc"] for c in summary["chunks"]}
    for cid in {c for _, c, _ in grown}:
        levels = [n for _, c, n in spy["moves"] if c == cid]
        # The summary gives the chunk's channels at its end: a level the scheduler set. Not
        # necessarily the highest: a loaded machine can let a grown chunk give one back first.
        assert max(levels) > 2 and final[cid] in levels, (cid, final[cid], levels)
    assert all(n <= 5 for _, cid, n in spy["moves"] if cid in ("mc.large", "mc.huge")), spy["moves"]
    # More writers can only show if the chunk still had files to hand out when it grew: under
    # load the rebalance can come when `huge` is down to its last files (CI: it grew at 2.7 s
    # and never had a third writer). So the check applies when at least 6 of huge's files were
    # still unopened on the server at its first growth; set_channels itself is proven without
    # this race by test_set_channels_grows_and_shrinks_a_running_chunk.
    growth_marks = [at_mark for cid, n, at_mark in spy["set_channels"] if cid == "mc.huge" and n > 2]
    if growth_marks:
        opened = {
            p
            for _, op, p in sshd.sftp_events(mark, growth_marks[0])
            if op == "open" and p.endswith(TEMP_SUFFIX) and _chunk_of(p) == "huge"
        }
        unsent = sum(1 for _ in (mixed / "huge").iterdir()) - len(opened)
        if unsent >= 6:
            writers = _writers_at_once(events, lambda p: _chunk_of(p) == "huge")
            assert writers > 2, (unsent, writers, spy["moves"])
    progress = [e for e in spy["events"] if not e.done]
    assert progress and all(0 <= e.bytes_done <= 63104560 for e in progress)


def test_set_channels_grows_and_shrinks_a_running_chunk(sshd, remote_dir, local_dir):
    src = local_dir / "many"
    for i in range(400):
        write_random(src / f"f{i:03d}.bin", 64 * 1024, seed=1000 + i)
    table = list_local(str(src)).sorted_by_size().table
    dst = remote_dir / "many"
    # The SFTP mover takes one file at a time: workers come and go between files (a bundle
    # would finish this small tree before a change could be seen).
    with TransferSession(
        Endpoint("file", str(src)), Endpoint("sftp", str(dst), sshd.target()), verify=None, bundle=False
    ) as s:
        ex = EngineSessionExecutor(s, str(src), str(dst), None, None)
        cs = ex.open_session(table)
        spec = make_spec(SortedSizes.of(table), "c", 0, table.num_rows, TransferParams(pp=1, p=1, cc=1))
        cs.start(spec, 1)
        chunk = cs._chunks["c"]

        def until(cond, what):
            deadline = time.monotonic() + 60
            while not cond():
                assert time.monotonic() < deadline, what
                time.sleep(0.01)

        until(lambda: chunk.runner is not None and chunk.stats.files_done >= 20, "first files")
        grow_mark = sshd.log_mark()
        cs.set_channels("c", 4)
        # New connections take a connect and a handshake (about 0.2 s over OpenSSH on loopback):
        # wait until they are open, then until they have carried files.
        until(lambda: chunk.runner.live == 4 and s.pool.opened >= 4, "growth")
        grown_at = chunk.stats.files_done
        until(lambda: chunk.stats.files_done >= min(grown_at + 60, 330), "files after growth")
        cs.set_channels("c", 1)
        until(lambda: chunk.runner.live == 1, "shrink")
        shrink_mark = sshd.log_mark()
        events = []
        while True:
            e = cs.wait_any()
            events.append(e)
            if e.done:
                break
        with pytest.raises(RuntimeError, match="no chunk running"):
            cs.wait_any()
        cs.close()
    result = events[-1].result
    assert result.params.cc == 1 and result.failed == [] and len(result.outcomes) == 400
    assert all(not e.done for e in events[:-1])
    # After growing, files went over at least 3 connections (sftp-server processes). Counting
    # sessions, not overlap in time, keeps this true on a loaded machine.
    grown_pids = {pid for pid, op, p in sshd.sftp_events(grow_mark, shrink_mark) if op == "open"}
    assert len(grown_pids) >= 3, grown_pids
    # After shrinking, one writer: never more than one file open at a time, plus the last file of a
    # retired worker (pp=1) whose log lines may land after the mark. A surviving worker may move to
    # another pooled connection between files, so sessions are not what is counted here.
    after = sshd.sftp_events(shrink_mark)
    opened = sum(1 for _, op, p in after if op == "open" and p.endswith(TEMP_SUFFIX))
    assert opened >= 10 and _files_open_at_once(after) <= 2, (opened, _files_open_at_once(after))
    assert tree_digest(dst) == tree_digest(src)


@pytest.mark.parametrize("verify", [None, "sequential"])
def test_close_stops_running_chunks_at_a_file_boundary(verify, sshd, remote_dir, local_dir):
    src = local_dir / "stop"
    for i in range(300):
        write_random(src / f"f{i:03d}.bin", 64 * 1024, seed=2000 + i)
    table = list_local(str(src)).sorted_by_size().table
    dst = remote_dir / "stop"
    # sequential: checksums wait for every transfer of the chunk; a stop must still let them run.
    options = {"verify": "sha256", "verify_mode": "sequential"} if verify else {}
    # One file at a time over SFTP, so a stop lands between files mid-chunk (not after a bundle).
    with TransferSession(
        Endpoint("file", str(src)), Endpoint("sftp", str(dst), sshd.target()), bundle=False, **options
    ) as s:
        cs = EngineSessionExecutor(s, str(src), str(dst), None, None).open_session(table)
        sizes = SortedSizes.of(table)
        cs.start(make_spec(sizes, "a", 0, 150, TransferParams(pp=1, cc=1)), 1)
        cs.start(make_spec(sizes, "b", 150, 300, TransferParams(pp=1, cc=1)), 1)
        deadline = time.monotonic() + 60
        while s.stats.files_done < 20 and not verify:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        if verify:
            assert s.stats.files_done == 0  # nothing verified yet: the gate waits for the transfers
            while s.stats.bytes_done < 20 * 64 * 1024:
                assert time.monotonic() < deadline
                time.sleep(0.01)
        closing = threading.Thread(target=cs.close, daemon=True)
        closing.start()
        closing.join(60)
        assert not closing.is_alive(), "close() hung"
        assert all(not c.thread.is_alive() for c in cs._chunks.values())
        assert 20 <= s.stats.files_done < 300
    got = tree_digest(dst)
    want = tree_digest(src)
    assert got and all(want[rel] == digest for rel, digest in got.items())  # whatever is there is whole
    assert temp_files(dst) == []  # files in flight were finished, none was cut


@pytest.mark.parametrize("mode", ["block"])  # file mode: test_mc_runs_chunks_at_once_and_moves_channels
def test_mc_cli_verified_byte_identical(mode, mixed, sshd, remote_dir):
    dst = remote_dir / f"cli-{mode}"
    res = run_cli(
        "copy",
        str(mixed),
        sshd.url(str(dst)),
        "--algorithm",
        "mc",
        *LINK,
        "--verify-mode",
        mode,
        "--verify-block-size",
        str(1 * MIB),
        "--json",
        *ssh_args(sshd),
        timeout=300,
    )
    assert res.code == 0, res.err
    s = res.summary
    assert s["failed"] == [] and s["files"] == 116 and len(s["chunks"]) == 4
    v = s["verify"]
    assert v["mode"] == mode and v["verified"] == 116 and v["mismatched"] == 0
    if mode == "block":
        assert v["blocks"]["verified"] >= 20 * 3  # each huge file is 4 blocks of 1 MiB (the last short)
    assert tree_digest(dst) == tree_digest(mixed) and temp_files(dst) == []


def test_mc_resumes_after_sigkill(mixed, sshd, remote_dir, tmp_path):
    dst = remote_dir / "killed"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    cmd = [
        sys.executable,
        "-m",
        "airflow_transfer.cli",
        "copy",
        str(mixed),
        sshd.url(str(dst)),
        "--algorithm",
        "mc",
        *LINK,
        "--verify-mode",
        "block",
        "--verify-block-size",
        str(1 * MIB),
        "--store",
        store,
        *ssh_args(sshd),
    ]
    huge = dst / "huge"
    # A starved poll can see the last files land before the kill: then the run is repeated from
    # scratch (at most three times) until the kill leaves work to resume.
    for _ in range(3):
        shutil.rmtree(dst, ignore_errors=True)
        Path(store.removeprefix("sqlite:///")).unlink(missing_ok=True)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if huge.exists() and len(list(huge.glob("h*.bin"))) >= 3:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the copy finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if len(list(huge.glob("h*.bin"))) < 20:
            break
    assert 3 <= len(list(huge.glob("h*.bin"))) < 20
    res = run_cli(
        "copy",
        str(mixed),
        sshd.url(str(dst)),
        "--algorithm",
        "mc",
        *LINK,
        "--verify-mode",
        "block",
        "--verify-block-size",
        str(1 * MIB),
        "--store",
        store,
        "--json",
        *ssh_args(sshd),
        timeout=300,
    )
    assert res.code == 0, res.err
    assert res.summary["failed"] == [] and res.summary["files_skipped"] >= 3
    assert tree_digest(dst) == tree_digest(mixed) and temp_files(dst) == []


def test_a_failing_file_in_one_chunk_does_not_stop_the_others(mixed, sshd, remote_dir, tmp_path):
    src = tmp_path / "src"
    subprocess.run(["cp", "-a", str(mixed), str(src)], check=True)
    manifest = tmp_path / "m.parquet"
    assert run_cli("list", str(src), "--out", str(manifest)).code == 0
    (src / "small" / "s007.dat").unlink()  # listed, then gone: that file fails, nothing else
    dst = remote_dir / "partial"
    res = run_cli(
        "copy",
        str(src),
        sshd.url(str(dst)),
        "--manifest",
        str(manifest),
        "--algorithm",
        "mc",
        *LINK,
        "--json",
        *ssh_args(sshd),
        timeout=120,
    )
    assert res.code != 0 and "Traceback" not in res.err
    s = res.summary
    assert [f["path"] for f in s["failed"]] == ["small/s007.dat"]
    assert len(s["chunks"]) == 4
    want = tree_digest(src)
    assert tree_digest(dst) == want and temp_files(dst) == []


def test_a_chunk_that_cannot_start_fails_the_copy_without_hanging(mixed, sshd, remote_dir):
    from tests.support.sshd import chown_to_user

    dst = remote_dir / "blocked"
    dst.mkdir()
    chown_to_user(dst, sshd.user)  # the other chunks can create theirs: only huge fails
    (dst / "huge").write_bytes(b"not a directory")  # the huge chunk cannot create its directory
    res = run_cli("copy", str(mixed), sshd.url(str(dst)), "--algorithm", "mc", *LINK, *ssh_args(sshd), timeout=120)
    assert res.code != 0 and "Traceback" not in res.err
    assert "cannot create destination directory" in res.err and "huge" in res.err
    assert temp_files(dst) == []


@pytest.mark.parametrize("direction", ["download", "local"])
def test_mc_other_directions_run_chunks_at_once(direction, mixed, sshd, remote_dir, local_dir, spy):
    link = LinkInfo(rtt_s=0.001, bandwidth_bps=1e9, source="given")
    if direction == "download":
        subprocess.run(["cp", "-a", str(mixed), str(remote_dir / "src")], check=True)
        src = Endpoint("sftp", str(remote_dir / "src"), sshd.target())
    else:
        src = Endpoint("file", str(mixed))
    dst = local_dir / direction
    # Bundles off: with them, every chunk of this tree fills a channel by itself on this LAN link
    # and MC runs on two channels in all (tests/test_mc_lan_budget.py); over SFTP each chunk's
    # channels hide per-file round trips, so all eight are handed out.
    summary = run_copy(
        CopyRequest(src, Endpoint("file", str(dst)), algorithm="mc", link=link, bundle=False, use_store=False)
    )
    assert summary["failed"] == [] and summary["verify"]["verified"] == 116 and len(summary["chunks"]) == 4
    assert tree_digest(dst) == tree_digest(mixed) and temp_files(dst) == []
    done = [e for e in spy["events"] if e.done]
    assert len(done) == 4 and all(e.result.params.cc >= 2 for e in done)
