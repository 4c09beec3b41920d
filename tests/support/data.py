"""Deterministic test datasets and tree hashing."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

from airflow_transfer.paths import TEMP_SUFFIX


def write_random(path: Path, size: int, seed: int) -> None:
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 22)
            f.write(rng.randbytes(n))
            left -= n


def make_tree(root: Path, small: int = 500, big_mib: int = 0, seed: int = 1) -> Path:
    """Nested directories, empty files, an empty directory, `small` small files, one big file."""
    rng = random.Random(seed)
    for i in range(small):
        d = root / f"d{i % 7}" / f"e{i % 3}"
        write_random(d / f"f{i:04d}.dat", rng.randint(1, 96 * 1024), seed * 100000 + i)
    (root / "empties").mkdir(parents=True, exist_ok=True)
    (root / "empties" / "zero1").write_bytes(b"")
    (root / "d0" / "zero2").write_bytes(b"")
    (root / "an_empty_dir").mkdir(exist_ok=True)
    (root / "deep" / "a" / "b" / "c").mkdir(parents=True, exist_ok=True)
    if big_mib:
        write_random(root / "big" / "huge.bin", big_mib * 1024 * 1024 + 12345, seed)
    return root


def tree_digest(root: Path) -> dict[str, str]:
    """relative path -> sha256 for files, 'dir' for directories (empty ones included)."""
    out: dict[str, str] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir != ".":
            out[rel_dir] = "dir"
        for name in filenames:
            p = os.path.join(dirpath, name)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[os.path.relpath(p, root)] = h.hexdigest()
    return out


def temp_files(root: Path) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.endswith(TEMP_SUFFIX)]
