"""benchmarks/fs_settle.py: what a benchmark does between its sets (no clock involved)."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.fs_settle import discard, warm


def test_warm_reads_every_file_and_runs_every_command(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    for i in range(5):
        (tree / f"d{i}").mkdir(parents=True)
        (tree / f"d{i}" / "f").write_bytes(b"x" * (i * 700_000))
    (tree / "d3" / "gone").symlink_to(tmp_path / "nowhere")  # a dangling link is not a file to read
    marks = tmp_path / "marks"
    marks.mkdir()
    # A command that fails (a tool missing a flag) does not stop the benchmark; each one runs.
    warm([tree], [["false"], [sys.executable, "-c", f"open({str(marks / 'a')!r}, 'w').close()"]])
    assert (marks / "a").exists()


def test_discard_moves_without_deleting(tmp_path: Path) -> None:
    trash = tmp_path / "trash"
    trash.mkdir()
    done = tmp_path / "done"
    done.mkdir()
    (done / "f").write_bytes(b"1")
    discard(done, trash)
    assert not done.exists() and [p.name for p in trash.iterdir()] == ["0-done"]
    assert (trash / "0-done" / "f").read_bytes() == b"1"
