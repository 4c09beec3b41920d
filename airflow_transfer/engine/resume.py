"""What a file's temporary copy is known to hold, and where its next attempt starts.

A resume trusts only acknowledged byte ranges of this very source version:
the journal's from an earlier run (given only when the listing is unchanged),
then every acknowledged write or read of this run. It starts from their
contiguous prefix, never from the temporary file's size, since a server
answering reads short or writing out of order leaves holes below that size.
"""

from __future__ import annotations

from typing import Any

from ..store.ranges import coalesce
from .sftp_jobs import FileTask

RANGE_MIN = 4 * 1024 * 1024  # smallest byte range worth its own connection


def plan(tasks: list[FileTask], resume: dict[str, list] | None, p: int) -> None:
    """Mark the files an earlier attempt left ranges of; a big file under p > 1 sends only
    the ranges still missing."""
    if resume is None:
        return
    for t in tasks:
        if t.rel not in resume:
            continue
        done = resume[t.rel]
        t.resumable = True
        t.done, t.journaled = coalesce(done), True
        if done and p > 1 and t.size >= 2 * RANGE_MIN:
            t.todo_ranges = subtract([(0, t.size)], [tuple(r) for r in done]) or None


def keep(task: FileTask, ranges: list) -> None:
    """Remember ranges an attempt put in the temporary file, for a later attempt's resume."""
    if ranges:
        task.done = coalesce((task.done or []) + ranges)
        task.journaled = True


def restart(task: FileTask, journal: Any) -> None:
    """The temporary file is created afresh: nothing in it is known any more, in memory or in
    the journal (a crash now must not resume from ranges of the truncated file)."""
    task.done = None
    if task.journaled and journal is not None:
        journal.mark_restart(task.rel)
    task.journaled = False


def subtract(ranges: list[tuple[int, int]], done: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of `ranges` not covered by `done`."""
    out = []
    for lo, hi in ranges:
        cur = lo
        for dlo, dhi in sorted(done):
            if dhi <= cur or dlo >= hi:
                continue
            if dlo > cur:
                out.append((cur, dlo))
            cur = max(cur, dhi)
        if cur < hi:
            out.append((cur, hi))
    return out
