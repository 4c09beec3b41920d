"""The command line starts an upload's bundle helpers ahead only where the source may hold
small files (engine/local_peek.py): the peek itself on real trees, then the command line
over a real sshd, large files only and small ones."""

from __future__ import annotations

import os

import pytest

from airflow_transfer import cli
from airflow_transfer.cli import main as cli_main
from airflow_transfer.engine import local_peek
from airflow_transfer.engine.local_peek import BUNDLE_MAX_FILE, may_hold_small_files
from tests.support.cli import ssh_args
from tests.support.data import temp_files, tree_digest, write_random

BIG = BUNDLE_MAX_FILE + 1


def test_a_file_is_judged_by_its_size(tmp_path):
    write_random(tmp_path / "big.bin", BIG, seed=1)
    write_random(tmp_path / "edge.bin", BUNDLE_MAX_FILE, seed=2)  # travels in a bundle
    assert not may_hold_small_files(str(tmp_path / "big.bin"))
    assert may_hold_small_files(str(tmp_path / "edge.bin"))


def test_a_flat_directory_of_large_files_holds_no_small_ones(tmp_path):
    for i in range(3):
        write_random(tmp_path / "big" / f"f{i}.bin", BIG + i, seed=i)
    assert not may_hold_small_files(str(tmp_path / "big"))
    (tmp_path / "empty").mkdir()
    assert not may_hold_small_files(str(tmp_path / "empty"))


@pytest.mark.parametrize("extra", ["small file", "subdirectory", "symlink", "too many entries", "missing"])
def test_anything_it_cannot_be_sure_of_may_hold_small_files(tmp_path, extra, monkeypatch):
    root = tmp_path / "src"
    write_random(root / "f0.bin", BIG, seed=3)
    if extra == "small file":
        write_random(root / "note.txt", 10, seed=4)
    elif extra == "subdirectory":
        write_random(root / "sub" / "f1.bin", BIG, seed=5)  # large, but not looked into
    elif extra == "symlink":
        os.symlink(root / "f0.bin", root / "link.bin")
    elif extra == "too many entries":
        write_random(root / "f1.bin", BIG, seed=6)
        monkeypatch.setattr(local_peek, "PEEK_ENTRIES", 1)
    else:
        root = tmp_path / "nowhere"
    assert may_hold_small_files(str(root))


@pytest.fixture
def prestarts(monkeypatch) -> list[int]:
    """The command line's calls of start_upload_helpers, the upload helpers started ahead
    (passed on to the real one)."""
    calls: list[int] = []
    real = cli.start_upload_helpers

    def spy(pool, count):
        calls.append(count)
        return real(pool, count)

    monkeypatch.setattr(cli, "start_upload_helpers", spy)
    return calls


@pytest.mark.parametrize("small", [False, True])
def test_the_command_line_starts_helpers_ahead_only_for_small_files(
    sshd, local_dir, remote_dir, tmp_path, prestarts, small
):
    src = local_dir / f"peek-{small}"
    for i in range(2):
        write_random(src / f"big{i}.bin", BIG + 4096 * i, seed=10 + i)
    if small:
        for i in range(20):
            write_random(src / f"s{i:02d}.dat", 2000 + 50 * i, seed=20 + i)
    dst = remote_dir / f"peek-{small}"
    store = f"sqlite:///{tmp_path / 'store.db'}"
    code = cli_main(["copy", str(src), sshd.url(str(dst)), "--store", store, *ssh_args(sshd)])
    assert code == 0 and tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert (len(prestarts) == 1 and prestarts[0] >= 1) if small else prestarts == [], prestarts
