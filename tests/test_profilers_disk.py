"""The disk profiler, run as `python3 -m profilers.disk` and as a file piped to `python3 -`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
SMALL = ["--file-size", "1M", "--total", "8M", "--rounds", "1", "--max-seconds", "8"]


def profiler_cmd(name: str, how: str, args: list[str]) -> tuple[list[str], dict]:
    """Command and Popen kwargs. "piped" runs with -I -S: no site-packages, no
    cwd on sys.path, so only the standard library can be imported - as on a
    bare remote host."""
    if how == "module":
        return [sys.executable, "-m", f"profilers.{name}", *args], {"cwd": REPO, "stdin": subprocess.DEVNULL}
    source = open(REPO / "profilers" / f"{name}.py", "rb")
    return [sys.executable, "-I", "-S", "-", *args], {"cwd": "/", "stdin": source}


def run_profiler(name: str, how: str, args: list[str], timeout: float = 30) -> tuple[int, dict, str]:
    cmd, kwargs = profiler_cmd(name, how, args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected exactly one JSON line on stdout, got {proc.stdout!r} / {proc.stderr!r}"
    return proc.returncode, json.loads(lines[0]), proc.stderr


def check_direction(side: dict, blocks: list[int]) -> None:
    assert side["best_block"] in blocks
    assert side["best_mib_s"] > 0
    assert [t["block"] for t in side["trials"]] == blocks
    assert all(t["mib_s"] > 0 for t in side["trials"])
    assert side["best_mib_s"] == max(t["mib_s"] for t in side["trials"])
    assert side["best_block"] in side["within_5pct"]
    assert side["increment"] >= 0 and side["increment"] % 4096 == 0
    assert side["increment"] <= side["best_block"]
    assert side["increment_note"]


@pytest.mark.parametrize("how", ["module", "piped"])
def test_disk_profile_is_sane_and_leaves_nothing_behind(tmp_path, how):
    code, out, _err = run_profiler("disk", how, ["--path", str(tmp_path), *SMALL])
    assert code == 0, out
    assert out["ok"] is True and out["profiler"] == "disk"
    assert out["path"] == str(tmp_path.resolve())
    blocks = out["block_sizes"]
    assert blocks[0] == 4096 and all(b2 == 2 * b1 for b1, b2 in zip(blocks, blocks[1:]))
    assert blocks[-1] <= out["file_bytes"] <= 1 * MIB
    check_direction(out["write"], blocks)
    check_direction(out["read"], blocks)
    assert out["cache_eviction"]["method"] == "fadvise"  # Linux has posix_fadvise
    assert out["seconds"] < 10
    assert list(tmp_path.iterdir()) == []


def test_disk_dummy_file_fallback_is_stated_and_cleaned(tmp_path):
    code, out, _err = run_profiler(
        "disk", "module", ["--path", str(tmp_path), *SMALL, "--evict", "dummy-file", "--dummy-size", "2M"]
    )
    assert code == 0, out
    assert out["cache_eviction"]["method"] == "dummy-file"
    assert "smaller than the page cache" in out["cache_eviction"]["detail"]
    assert list(tmp_path.iterdir()) == []


def run_without_fadvise(args: list[str]) -> dict:
    """The disk profiler on a platform without os.posix_fadvise (macOS, for one)."""
    script = str(REPO / "profilers" / "disk.py")
    code = (
        "import os, runpy, sys; del os.posix_fadvise; sys.argv[0] = 'disk.py'; "
        f"runpy.run_path({script!r}, run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *args], capture_output=True, text=True, timeout=30, cwd="/"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_without_fadvise_the_dummy_file_is_the_fallback(tmp_path):
    out = run_without_fadvise(["--path", str(tmp_path), *SMALL, "--dummy-size", "4M"])
    assert out["cache_eviction"]["method"] == "dummy-file"
    assert out["cache_eviction"]["detail"].startswith("posix_fadvise is unavailable")
    assert out["read"]["best_mib_s"] > 0
    assert list(tmp_path.iterdir()) == []


def test_without_fadvise_a_memory_sized_dummy_over_budget_is_refused_and_said(tmp_path):
    # the default dummy is the machine's memory size: far too slow for a 2 s budget
    out = run_without_fadvise(["--path", str(tmp_path), *SMALL[:-2], "--max-seconds", "2"])
    assert out["cache_eviction"]["method"] == "none"
    assert "dummy file" in out["cache_eviction"]["detail"] and "time budget" in out["cache_eviction"]["detail"]
    assert out["seconds"] < 10
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sig, name", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_disk_profiler_cleans_up_when_interrupted(tmp_path, sig, name):
    cmd, kwargs = profiler_cmd(
        "disk", "piped", ["--path", str(tmp_path), "--file-size", "64M", "--total", "64G", "--max-seconds", "60"]
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait until it is writing its files
            if any(any(d.iterdir()) for d in tmp_path.iterdir() if d.is_dir()):
                break
            time.sleep(0.01)
        else:
            pytest.fail("the disk profiler never started writing")
        proc.send_signal(sig)
        stdout, _stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    out = json.loads(stdout)
    assert out["ok"] is False and name in out["error"]
    assert list(tmp_path.iterdir()) == []


def test_disk_profiler_reports_a_bad_path_in_one_line(tmp_path):
    missing = tmp_path / "no-such-dir"
    code, out, err = run_profiler("disk", "module", ["--path", str(missing), *SMALL])
    assert code == 1
    assert out["ok"] is False and str(missing) in out["error"]
    assert len(err.strip().splitlines()) == 1 and "--path" in err


def test_disk_run_python_entry(tmp_path):
    from profilers import disk

    out = disk.run(path=str(tmp_path), file_size=256 * 1024, total=2 * MIB, rounds=1, max_seconds=5)
    assert out["ok"] is True
    assert out["write"]["best_block"] in out["block_sizes"]
    assert out["read"]["best_mib_s"] > 0
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="rounds"):
        disk.run(path=str(tmp_path), rounds=0)


def test_disk_sizes_accept_units():
    from profilers.disk import parse_size

    assert parse_size("4096") == 4096
    assert parse_size("64K") == 64 * 1024
    assert parse_size("16MiB") == 16 * MIB
    assert parse_size("1g") == 1024 * MIB
    with pytest.raises(Exception, match="not a size"):
        parse_size("lots")
