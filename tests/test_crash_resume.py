"""kill -9 mid-copy: nothing partial under a final name; the re-run completes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from airflow_transfer.paths import TEMP_SUFFIX
from tests.support.cli import run_cli, ssh_args
from tests.support.data import temp_files, tree_digest, write_random


def _final_files_match_source(src: Path, dst: Path) -> int:
    """Every file under its final name equals the source; returns how many exist."""
    count = 0
    want = tree_digest(src)
    for rel, digest in tree_digest(dst).items():
        if digest == "dir" or rel.endswith(TEMP_SUFFIX):
            continue
        assert want.get(rel) == digest, f"{rel} under its final name differs from the source"
        count += 1
    return count


def _kill_when(proc, predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    proc.kill()
    return False


def test_kill_9_leaves_no_partial_file_and_rerun_completes(sshd, remote_dir, local_dir):
    src = local_dir / "crash"
    for i in range(150):
        write_random(src / "small" / f"s{i:03d}.bin", 256 * 1024, seed=i)
    write_random(src / "zlarge" / "big.bin", 160 * 1024 * 1024, seed=99)
    dst = remote_dir / "crash"
    cmd = [
        sys.executable,
        "-m",
        "airflow_transfer.cli",
        "copy",
        str(src),
        sshd.url(str(dst)),
        "--pp",
        "2",
        "-c",
        "1",
        *ssh_args(sshd),
    ]

    # Kill 1: while small files are moving.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _kill_when(
        proc, lambda: len(list((dst / "small").glob("s*.bin"))) >= 30 if (dst / "small").exists() else False
    )
    assert _final_files_match_source(src, dst) >= 30

    # Kill 2: while the large file is half written under its temporary name.
    big_tmp = dst / "zlarge" / f".big.bin{TEMP_SUFFIX}"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _kill_when(proc, lambda: big_tmp.exists() and big_tmp.stat().st_size > 20 * 1024 * 1024)
    assert not (dst / "zlarge" / "big.bin").exists()
    # Small files may still be in flight next to the large one (pp 2): count what is final now.
    finished = _final_files_match_source(src, dst)
    assert finished >= 30

    res = run_cli("copy", str(src), sshd.url(str(dst)), "--json", *ssh_args(sshd))
    assert res.code == 0, res.err
    assert res.summary["files_skipped"] >= finished  # no file complete under its final name was sent again
    assert tree_digest(dst) == tree_digest(src)
    assert temp_files(dst) == []
