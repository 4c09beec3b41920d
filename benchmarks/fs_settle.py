"""Keep a benchmark's creates clear of recent deletions.

On an ext4 without a journal (this VM's root filesystem) the kernel will not reuse an inode
freed less than 60 s ago, or less than 360 s ago while its inode table block is dirty (as
creating files next to it makes it), and checks every such inode it passes while looking for
a free one (RECENTCY_MIN and RECENTCY_DIRTY in fs/ext4/ialloc.c). After a mass deletion every
create pays for that scan: rsync took 42 s instead of 4.5 s for 100,000 x 1 KiB right after
100,000 files were deleted, and 2000 creates after deleting 2000 files cost about 0.8 s of
system time, whichever tool ran. A journaled ext4, the usual setup, makes no such check.

So a benchmark that creates many files moves finished destinations into a trash directory
instead of deleting them, and empties it only in `settle`, which then waits the six minutes
out before the next timed run (this also covers whatever was deleted before it started).

The wait has a cost of its own on this VM: the kernel pages out memory nobody touched for a
minute (DAMON's `pageout` scheme, /sys/kernel/mm/damon/admin), page cache included. After the
six minutes the source files and the tools' libraries are on disk only, and the first timed
run read them back alone: reading 100,000 files of 1 KiB took 6.0 s cold against 0.5 s warm,
and the small-file benchmarks' first run (always ours) paid it while rsync, right after, did
not. `warm` reads them back, untimed, before the first run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SETTLE_S = 361.0


def settle(trash: Path) -> None:
    """Empty `trash`, then wait until the inodes it freed (and any freed before) are reused at full speed."""
    shutil.rmtree(trash, ignore_errors=True)
    os.sync()
    print(f"settle: waiting {SETTLE_S:.0f} s before the next timed run (benchmarks/fs_settle.py)", file=sys.stderr)
    time.sleep(SETTLE_S)
    trash.mkdir()


def warm(trees: list[Path], commands: list[list[str]]) -> None:
    """Read every file under `trees` once and run each of `commands` (each tool's own start, so
    that its program and libraries are read back too), untimed, output discarded."""
    for tree in trees:
        for folder, _, files in os.walk(tree):
            for name in files:
                path = os.path.join(folder, name)
                if os.path.islink(path):
                    continue  # not a file a copy reads (and maybe pointing nowhere)
                with open(path, "rb") as f:
                    while f.read(1 << 20):
                        pass
    for argv in commands:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def discard(path: Path, trash: Path) -> None:
    """Move `path` into `trash` (same filesystem): nothing is freed until the next `settle`."""
    path.rename(trash / f"{len(list(trash.iterdir()))}-{path.name}")
