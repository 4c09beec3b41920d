"""Regressions for three defects third-party SFTP servers exposed, replayed on the hostile server.

1. Download resume after kill -9 against a server that answers READs short (rclone answers a
   255 KiB READ with 32 KiB): the temporary file had holes before its end, the re-run resumed
   from its size minus an overlap and kept them; with --verify none the copy "succeeded".
2. A read-back that fails with a plain SSH_FX_FAILURE (EIO) on a healthy connection was taken
   for a dead channel: reconnect, read, fail, reconnect... until --deadline.
3. A server that accepts WRITEs only at its handle's write position (rclone without a VFS
   cache): --parallelism 4 and upload resume failed after every retry instead of sending the
   file as one stream from its start.

The CLI runs as a subprocess against tests/support/hostile_sftp.py (no exec there: listing and
verification go over SFTP). A run that is killed on purpose stalls at the server first (its
reads or writes are never answered), so what it left behind does not depend on timing.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.support.cli import Run, run_cli
from tests.support.hostile_sftp import Behaviour, HostileSFTPServer

MIB = 1024 * 1024
RESUME_OVERLAP = 256 * 1024  # what a resume re-sends before its starting point (engine/sftp_mover.py)
HANG_GUARD = 300  # seconds: only catches a hang; the runs below take far less
READ_BACK_BOUND = 120  # defect 2: the copy must end well within this, its --deadline is 600
DEFAULT_ATTEMPTS = 5  # --retries


def _dataset(root: Path, sizes: dict[str, int], seed: int) -> dict[str, bytes]:
    """Files of random content (seeded: a failure replays the same bytes)."""
    rng = random.Random(seed)
    out = {}
    for rel, size in sizes.items():
        body = rng.randbytes(size)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        out[rel] = body
    return out


def _same(root: Path, expected: dict[str, bytes]) -> None:
    for rel, body in expected.items():
        path = root / rel
        assert path.is_file(), f"{rel} is missing at the destination"
        got = path.read_bytes()
        if got != body:
            first = next((i for i, (a, b) in enumerate(zip(got, body)) if a != b), min(len(got), len(body)))
            pytest.fail(
                f"{rel} differs from its source: {len(got)} bytes against {len(body)}, "
                f"first difference at byte {first} (sha256 {hashlib.sha256(got).hexdigest()[:16]} "
                f"against {hashlib.sha256(body).hexdigest()[:16]})"
            )


def _temporaries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.atpart"))


def _no_traceback(run: Run) -> None:
    assert "Traceback" not in run.err, run.err
    assert "Exception in thread" not in run.err, run.err


def _succeeded(run: Run) -> None:
    _no_traceback(run)
    failed = run.summary.get("failed") if run.out.strip() else None
    assert run.code == 0, f"exit {run.code}; failed: {failed}; stderr ends: {run.err.strip().splitlines()[-2:]}"


def _start(*args: str) -> subprocess.Popen:
    # stderr to a file, not a pipe: nobody reads it while the run goes on, and a full pipe
    # would stall the CLI for reasons of its own
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_transfer.cli", *args], stdout=subprocess.DEVNULL, stderr=log, text=True
    )
    proc.log = log
    return proc


def _stderr(proc: subprocess.Popen) -> str:
    proc.log.seek(0)
    return proc.log.read()


def _kill_when_stalled(proc: subprocess.Popen, stalled, snapshot, what: str) -> None:
    """SIGKILL `proc` once the server stalls (`stalled()`) and what the run left behind
    (`snapshot()`) has stopped changing: the partial state is then the server's doing, not a
    race with the kill."""
    try:
        deadline = time.monotonic() + HANG_GUARD
        while not stalled():
            if proc.poll() is not None:
                pytest.fail(
                    f"the first run ended ({proc.returncode}) before the server stalled its {what}: {_stderr(proc)}"
                )
            assert time.monotonic() < deadline, f"the server never stalled the first run's {what}"
            time.sleep(0.1)
        last, steady = None, 0
        while steady < 3:  # three identical looks 0.3 s apart
            time.sleep(0.3)
            now = snapshot()
            steady = steady + 1 if now == last else 0
            last = now
            assert time.monotonic() < deadline, "the first run's partial files never settled"
        assert proc.poll() is None, f"the first run ended on its own: {_stderr(proc)}"
    finally:
        if proc.poll() is None:
            proc.kill()  # SIGKILL: no cleanup, no journal flush, as a crash or an OOM kill
        proc.wait(timeout=30)
        proc.log.close()


def _sizes_and_digests(root: Path) -> list:
    return [(str(p), p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) for p in _temporaries(root)]


@pytest.fixture
def hostile(tmp_path):
    made = []

    def make(root: Path, behaviour: Behaviour) -> HostileSFTPServer:
        srv = HostileSFTPServer(tmp_path / "keys", root, behaviour).start()
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.stop()


# -- defect 1: download resume with short reads -------------------------------------------

DOWNLOAD_SIZES = {
    "a.bin": 2 * MIB + 123_457,
    "b.bin": 3 * MIB + 654_321,
    "sub/c.bin": 4 * MIB + 99_991,
    "sub/d.bin": 5 * MIB + 777_777,
}
SEED = 20_260_901


def _holes(partial: bytes, body: bytes) -> list[int]:
    """Offsets of 4 KiB blocks of the partial file that are zero where the source is not."""
    out = []
    for off in range(0, len(partial), 4096):
        got, want = partial[off : off + 4096], body[off : off + 4096]
        if got != want and not got.strip(b"\0"):
            out.append(off)
    return out


def test_download_resume_after_kill_with_random_short_reads_is_byte_identical(tmp_path, hostile):
    served = tmp_path / "served"
    expected = _dataset(served / "data", DOWNLOAD_SIZES, SEED)
    dst = tmp_path / "dst"
    # Every READ is answered with 1 KiB .. the asked length; after 40 answered reads none is: the
    # engine has up to 8 MiB of reads out per connection, so the remainders of short replies are
    # still unanswered behind later reads, and the temporary files have holes before their end.
    srv = hostile(served, Behaviour(short_read_seed=SEED, stall_after_reads=40))
    key = f"interop-download-{uuid.uuid4().hex[:8]}"
    args = [
        "copy",
        srv.url("/data"),
        str(dst),
        *srv.cli_args(),
        "--json",
        "--transfer-key",
        key,
        "--verify",
        "none",
        "--pp",
        "8",
        "-p",
        "1",
        "-c",
        "2",
    ]
    proc = _start(*args)
    _kill_when_stalled(proc, lambda: srv.reads > 40, lambda: _sizes_and_digests(dst), "reads")

    # Precondition: the kill left partial files with holes a resume from "size - overlap" misses.
    partial = {str(p.relative_to(dst)): p.read_bytes() for p in _temporaries(dst)}
    assert partial, "the first run left no temporary file"
    early_holes = {}
    for tmp_rel, data in partial.items():
        head, tail = os.path.split(tmp_rel)
        rel = os.path.join(head, tail[1 : -len(".atpart")])
        holes = [off for off in _holes(data, expected[rel]) if off + 4096 <= len(data) - RESUME_OVERLAP]
        if holes:
            early_holes[rel] = holes
    assert early_holes, (
        "no temporary file has a hole before its last "
        f"{RESUME_OVERLAP >> 10} KiB: {[(k, len(v)) for k, v in partial.items()]}"
    )

    # The re-run: same journal (transfer key), the server still answers short, now every read.
    srv.b.stall_after_reads = None
    run = run_cli(*args, timeout=HANG_GUARD)
    _succeeded(run)
    _same(dst, expected)
    assert _temporaries(dst) == []
    assert run.summary["failed"] == []


def test_download_reconnect_mid_file_with_random_short_reads_is_byte_identical(tmp_path, hostile):
    """The same holes within one run: the connection drops while short replies' remainders are
    still unanswered, and the file is resumed on a new connection."""
    served = tmp_path / "served"
    expected = _dataset(served / "data", DOWNLOAD_SIZES, SEED + 1)
    dst = tmp_path / "dst"
    srv = hostile(served, Behaviour(short_read_seed=SEED, drop_after_reads=30))
    run = run_cli(
        "copy",
        srv.url("/data"),
        str(dst),
        *srv.cli_args(),
        "--json",
        "--verify",
        "none",
        "--pp",
        "8",
        "-p",
        "1",
        "-c",
        "1",
        "--retries",
        "5",
        timeout=HANG_GUARD,
    )
    assert srv.reads > 31, "the connection was never dropped"
    _succeeded(run)
    assert run.summary["files_retried"] >= 1, run.summary  # the drop hit a file in flight
    _same(dst, expected)
    assert _temporaries(dst) == []


# -- defect 2: read-back EIO during verification ------------------------------------------


@pytest.mark.parametrize("mode", [[], ["--verify-mode", "file"]], ids=["default-mode", "file-mode"])
def test_read_back_eio_fails_each_file_well_before_the_deadline(tmp_path, hostile, mode):
    served = tmp_path / "served"
    (served / "up").mkdir(parents=True)
    local = tmp_path / "local"
    expected = _dataset(local, {"x.bin": 300_000, "d/y.bin": 1_200_000, "d/e/z.txt": 5_000}, SEED + 2)
    # The files arrive intact, but reading them back (the only verification without exec) fails
    # with SSH_FX_FAILURE while the connection is fine: a problem with those files, not the link.
    srv = hostile(served, Behaviour(fail_reads=["*.atpart"]))
    t0 = time.monotonic()
    try:
        run = run_cli(
            "copy",
            str(local),
            srv.url("/up/dest"),
            *srv.cli_args(),
            "--json",
            "--verify",
            "sha256",
            *mode,
            "--deadline",
            "600",
            timeout=READ_BACK_BOUND,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"still running after {READ_BACK_BOUND}s ({srv.failed_reads} failed reads so far): the "
            "read-back EIO is taken for a dead connection and retried until --deadline 600"
        )
    seconds = time.monotonic() - t0
    _no_traceback(run)
    assert srv.failed_reads >= 1, "the read-back never reached the server"
    # The failure is the file's, so it is charged to the file's attempts (--retries, 5): each
    # attempt may read it back twice at most (once more on a new connection to rule out the
    # link), never reconnect-and-read-again rounds on a connection that is fine.
    tries = Counter(path for op, path in srv.requests if op == "read-failed")
    assert max(tries.values()) <= 2 * DEFAULT_ATTEMPTS, f"read back again and again after EIO: {dict(tries)}"
    assert run.code == 1, run.err
    assert seconds < READ_BACK_BOUND, seconds
    failed = {f["path"]: f["error"] for f in run.summary["failed"]}
    assert set(failed) == set(expected), run.summary["failed"]
    for rel, error in failed.items():
        assert os.path.basename(rel) in error, f"the error for {rel} does not name it: {error}"
        assert "deadline" not in error, f"{rel} failed by the deadline, not by its own error: {error}"
    assert run.summary["verify"]["verified"] == 0, run.summary["verify"]
    for rel in expected:  # never under its final name unverified
        assert not (served / "up" / "dest" / rel).exists(), rel


# -- defect 3: a server that writes only where its handle's position is ------------------

UPLOAD_SIZES = {"big1.bin": 10 * MIB + 333_333, "sub/big2.bin": 17 * MIB + 111_111, "small.txt": 70_000}


def _tuning_notes(summary: dict) -> str:
    notes = summary.get("tuning", {}).get("notes", [])
    return (" ".join(notes) if isinstance(notes, list) else str(notes)).lower()


def test_parallel_upload_to_a_sequential_write_server_falls_back_to_one_stream(tmp_path, hostile):
    served = tmp_path / "served"
    (served / "up").mkdir(parents=True)
    local = tmp_path / "local"
    expected = _dataset(local, UPLOAD_SIZES, SEED + 3)
    srv = hostile(served, Behaviour(refuse_offset_writes=True))
    run = run_cli(
        "copy",
        str(local),
        srv.url("/up/dest"),
        *srv.cli_args(),
        "--json",
        "--parallelism",
        "4",
        "--verify",
        "none",
        timeout=HANG_GUARD,
    )
    _succeeded(run)
    dest = served / "up" / "dest"
    _same(dest, expected)
    assert _temporaries(dest) == []
    notes = _tuning_notes(run.summary)
    assert "offset" in notes and re.search(r"\bp\s*=\s*1\b", notes), (
        f"tuning.notes should say the server takes no writes at an offset and p=1 was used: {run.summary['tuning']}"
    )


@pytest.mark.parametrize("rerun_p", ["1", "4"])
def test_upload_resume_after_kill_on_a_sequential_write_server(tmp_path, hostile, rerun_p):
    served = tmp_path / "served"
    (served / "up").mkdir(parents=True)
    local = tmp_path / "local"
    expected = _dataset(local, UPLOAD_SIZES, SEED + 4)
    dest = served / "up" / "dest"
    # One stream per file (what this server can take) until 24 writes are answered, then none.
    srv = hostile(served, Behaviour(refuse_offset_writes=True, stall_after_writes=24))
    key = f"interop-upload-{uuid.uuid4().hex[:8]}"
    common = [
        "copy",
        str(local),
        srv.url("/up/dest"),
        *srv.cli_args(),
        "--json",
        "--transfer-key",
        key,
        "--verify",
        "none",
    ]
    proc = _start(*common, "--parallelism", "1")
    _kill_when_stalled(proc, lambda: srv.writes > 24, lambda: _sizes_and_digests(dest), "writes")

    # Precondition: a partial temporary file big enough that a resume starts past its beginning.
    partial = {p.name: p.stat().st_size for p in _temporaries(dest)}
    assert any(size > RESUME_OVERLAP + MIB for size in partial.values()), partial
    assert srv.refused_writes == [], srv.refused_writes  # one stream each: nothing refused so far

    srv.b.stall_after_writes = None
    run = run_cli(*common, "--parallelism", rerun_p, timeout=HANG_GUARD)
    _succeeded(run)
    _same(dest, expected)
    assert _temporaries(dest) == []
