"""What the kernel charges to create one small file, three ways: the floor under a copy of
many small files on this filesystem, whatever tool makes them.

    python -m benchmarks.create_cost [--files 20000] [--size 1024] [--reps 3] [--dir /var/tmp]

Each way writes `--files` files of `--size` bytes in directories of 100, sets their mtime and
gives them their final name, in one process, timed by its own CPU (user and system) and by the
clock, then `sync`:

- `unnamed`: `open(O_TMPFILE)` in the directory, write, `utime`, `linkat` to the final name
  (what the bundle helper does where the filesystem allows it, remote/bundle_sink.py);
- `renamed`: a temporary name created with `O_EXCL`, write, `utime`, `close`, `rename` (what
  the helper does elsewhere, and what rsync does);
- `direct`: the final name created at once (what a tool that does not verify before naming
  can do; airflow-transfer never does).

The ways run in turn, `--reps` rounds, each into a fresh directory under `--dir`, removed
after the round; medians go to stdout, microseconds per file.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

FILES_PER_DIR = 100


def _unnamed(folder: str, path: str, data: bytes) -> None:
    fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600)
    try:
        os.write(fd, data)
        os.utime(fd, (1.0, 1.0))
        os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=fd, follow_symlinks=True)
    finally:
        os.close(fd)


def _write_new(path: str, data: bytes) -> None:
    """A new file at `path` holding `data`, its mtime set, closed."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, data)
        os.utime(fd, (1.0, 1.0))
    finally:
        os.close(fd)


def _renamed(folder: str, path: str, data: bytes) -> None:
    head, _, name = path.rpartition("/")
    tmp = f"{head}/.{name}.part"
    _write_new(tmp, data)
    os.replace(tmp, path)


def _direct(folder: str, path: str, data: bytes) -> None:
    _write_new(path, data)


WAYS: dict[str, Callable[[str, str, bytes], None]] = {"unnamed": _unnamed, "renamed": _renamed, "direct": _direct}


def one_round(way: str, root: str, files: int, size: int) -> dict[str, float]:
    """Microseconds per file (user, system, wall) of creating `files` files the way named."""
    make = WAYS[way]
    data = os.urandom(size)
    top = tempfile.mkdtemp(prefix=f"create-{way}-", dir=root)
    try:
        before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        for i in range(files):
            folder = f"{top}/d{i // FILES_PER_DIR:05d}"
            if i % FILES_PER_DIR == 0:
                os.mkdir(folder)
            make(folder, f"{folder}/f{i:07d}", data)
        os.sync()
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    finally:
        shutil.rmtree(top, ignore_errors=True)
    per = 1e6 / files
    return {
        "user_us": (after.ru_utime - before.ru_utime) * per,
        "sys_us": (after.ru_stime - before.ru_stime) * per,
        "wall_us": wall * per,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp", help="where the files are made (the filesystem measured)")
    args = ap.parse_args()
    if args.files < 1 or args.size < 0 or args.reps < 1:
        ap.error("--files and --reps must be at least 1, --size at least 0")
    if not os.path.isdir(args.dir):
        ap.error(f"--dir {args.dir}: not a directory")
    rows: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for rep in range(args.reps):
        for way in WAYS:
            try:
                row = one_round(way, args.dir, args.files, args.size)
            except OSError as exc:  # O_TMPFILE where the filesystem has none, say
                print(f"{way}: not measured here ({exc})")
                rows.pop(way, None)
                continue
            rows[way].append(row)
            print(f"round {rep + 1} {way}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    print(f"medians, microseconds per file ({args.files} files of {args.size} bytes under {args.dir}):")
    for way, rs in rows.items():
        if rs:
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"  {way:8s} " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
