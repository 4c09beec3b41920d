"""benchmarks/create_cost.py: each way of making a file leaves what it says, and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import create_cost


@pytest.mark.parametrize("way", sorted(create_cost.WAYS))
def test_each_way_makes_the_file_under_its_final_name_only(tmp_path: Path, way: str) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    create_cost.WAYS[way](str(folder), str(folder / "f"), b"abc")
    assert [p.name for p in folder.iterdir()] == ["f"]  # no temporary left beside it
    assert (folder / "f").read_bytes() == b"abc" and os.stat(folder / "f").st_mtime == 1.0


def test_a_round_counts_per_file_and_removes_its_files(tmp_path: Path) -> None:
    row = create_cost.one_round("renamed", str(tmp_path), 250, 10)
    assert set(row) == {"user_us", "sys_us", "wall_us"} and row["wall_us"] > 0
    assert list(tmp_path.iterdir()) == []  # the round's directory went with its files
