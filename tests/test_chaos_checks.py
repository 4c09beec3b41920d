"""The chaos suite's own checks can fail: each invariant and each 'reported' rule
flags a broken case (so a clean chaos report means something)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.chaos import invariants as inv
from benchmarks.chaos.faults import Attempt, longest_stall, parse_progress, reported, slowest_rate
from benchmarks.chaos.report import passed, totals


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_destination_checks_flag_corruption_strays_losses_and_leftovers(tmp_path):
    src = _tree(tmp_path / "src", {"a/x.bin": b"x" * 100, "b.bin": b"hello", "c.bin": b""})
    source = inv.digests(src)
    dst = _tree(
        tmp_path / "dst", {"a/x.bin": b"x" * 99 + b"y", "b.bin": b"hello", "extra": b"1", "a/.c.bin.atpart": b"partial"}
    )
    bad, good = inv.check_destination(source, dst)
    assert good == {"b.bin"}
    assert sorted((v.kind, v.path) for v in bad) == [("corrupted", "a/x.bin"), ("stray", "extra")]
    done = inv.check_complete(source, dst, good)
    assert sorted((v.kind, v.path) for v in done) == [
        ("leftover", "a/.c.bin.atpart"),
        ("lost", "a/x.bin"),
        ("lost", "c.bin"),
    ]
    assert [v.path for v in inv.check_journal({"b.bin", "a/x.bin"}, good)] == ["a/x.bin"]


def test_progress_lines_parse_and_show_stalls_and_rates():
    assert parse_progress("chaos-progress 1234.500 13107200\n") == (1234.5, 13107200)
    assert parse_progress("3/43 files, 12.5 MiB/28.2 MiB (44%), 80.1 Mbit/s, ETA 0:02") is None
    assert parse_progress("chaos: flipped the byte at 3 of /x") is None
    prog = [(0.0, 0), (0.5, 100), (1.0, 100), (1.5, 100), (2.0, 100), (2.5, 900)]
    assert longest_stall(prog, 0, 3) == 1.5
    assert longest_stall(prog, 2.2, 3) == 0.0
    assert slowest_rate(prog, 0, 3, span=1.0) == 0.0
    assert slowest_rate(prog, 1.6, 3, span=1.0) is None
    assert slowest_rate([(0.0, 0), (0.5, 10), (1.0, 20), (1.5, 100)], 0, 2, span=1.0) == 20.0


def test_a_fault_without_trace_in_the_output_is_not_reported():
    quiet = Attempt(0, 5.0, {"files_retried": 0, "failed": [], "verify": {"mismatched": 0}}, "done: 43 files\n")
    for kind in ("sshd_restart", "disk_full", "byte_flip", "permission"):
        assert reported(kind, [quiet], {})[0] is False, kind
    assert reported("sigkill", [quiet, quiet], {})[0] is False
    flowing = [(float(t) / 2, t * 10**6) for t in range(20)]
    assert reported("blackhole", [Attempt(0, 5, {}, "", flowing)], {"t_fault": 2.0, "seconds": 3.0})[0] is False
    cut = {"t_fault": 2.0, "seconds": 3.0, "cut_mbit": 5.0}
    assert reported("rate_cut", [Attempt(0, 5, {}, "", flowing)], cut)[0] is False
    slowed = [(t / 2, (t if t < 4 else 4 + (t - 4) // 4) * 10**6) for t in range(20)]  # ~0.5 MB/s from t=2
    assert reported("rate_cut", [Attempt(0, 5, {}, "", slowed)], cut)[0] is True
    loud = Attempt(1, 5.0, {"files_retried": 2, "failed": [{"path": "a", "error": "no space left on h:/d/a"}]}, "")
    assert reported("sshd_restart", [loud], {})[0] and reported("disk_full", [loud], {})[0]


def test_report_fails_on_any_violation_or_unreported_fault():
    ok = {
        "kind": "blackhole",
        "injected": True,
        "reported": True,
        "completed": True,
        "attempts": [{}],
        "violations": [],
    }
    assert passed(totals([ok]))
    assert not passed(totals([ok, {**ok, "reported": False}]))
    assert not passed(totals([{**ok, "violations": [{"kind": "lost", "path": "a", "detail": ""}]}]))
    assert passed(totals([ok, {**ok, "injected": False, "reported": False}]))
