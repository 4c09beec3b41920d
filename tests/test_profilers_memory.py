"""The memory profiler, run as `python3 -m profilers.memory` and as a file piped to `python3 -`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def run_profiler(name: str, how: str, args: list[str], timeout: float = 30) -> tuple[int, dict]:
    if how == "module":
        cmd, kwargs = [sys.executable, "-m", f"profilers.{name}", *args], {"cwd": REPO, "stdin": subprocess.DEVNULL}
    else:  # -I -S: standard library only, as on a bare remote host
        cmd = [sys.executable, "-I", "-S", "-", *args]
        kwargs = {"cwd": "/", "stdin": open(REPO / "profilers" / f"{name}.py", "rb")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected exactly one JSON line on stdout, got {proc.stdout!r} / {proc.stderr!r}"
    return proc.returncode, json.loads(lines[0])


@pytest.mark.parametrize("how", ["module", "piped"])
def test_memory_profile_is_sane(how):
    code, out = run_profiler("memory", how, ["--region", "8M", "--per-trial", "16M", "--rounds", "1"])
    assert code == 0, out
    assert out["ok"] is True and out["profiler"] == "memory"
    blocks = out["block_sizes"]
    assert blocks == [4096 * 2**i for i in range(12)]  # 4 KiB .. 8 MiB: never above the region
    assert [t["block"] for t in out["trials"]] == blocks
    assert all(t["mib_s"] > 0 for t in out["trials"])
    assert out["best_block"] in blocks
    assert out["best_mib_s"] == max(t["mib_s"] for t in out["trials"])
    assert out["best_block"] in out["within_5pct"]
    assert out["truncated"] is False
    assert out["seconds"] < 10


def test_memory_time_budget_truncates_the_sweep():
    from profilers import memory

    out = memory.run(region=4 * MIB, per_trial=64 * MIB, rounds=50, max_seconds=0.3)
    assert out["truncated"] is True
    assert out["seconds"] < 5
    assert out["best_block"] in out["block_sizes"]


def test_memory_rejects_bad_arguments():
    code, out = run_profiler("memory", "module", ["--rounds", "0"])
    assert code == 1
    assert out["ok"] is False and "rounds" in out["error"]
