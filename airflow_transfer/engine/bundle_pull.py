"""Small files downloaded in bundles: the mirror of the upload path in engine/bundle.py.

The bundle helper on the source host (remote/bundle_sink.py) answers a whole
group of `get` requests in order, each file's digest ahead of its bytes (taken
from the bytes it read, so verification stays end to end). This side lands
the group with the helper's own sink code run in-process: every file under its
temporary name, the group made durable (one syncfs), each file read back from
disk and checked against the source's digest, and only then renamed. Requests
for the next group go out before the replies of the one before are read, and a
group's flush and read-back run on a thread of their own while the next group
arrives, so the source reads, the link carries and this disk checks at once.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..remote import bundle_sink
from . import resume
from .sftp_jobs import FileTask, SourceChanged, count_progress, mtime_changed

if TYPE_CHECKING:
    from .bundle import BundleMover, SinkChannel

# File descriptors this process keeps for everything else (connections, the store, the
# verifier's pipes): a landing group holds one per file until its commit.
RESERVED_FDS = 224


class Group:
    """One bundle in flight: its files (index, task, bytes, source digest) and its commit."""

    def __init__(self) -> None:
        self.items: list[tuple[int, FileTask, bytes, str | None]] = []
        self.commit_id = 0
        self.t0 = time.monotonic()


class Pull:
    """A group asked for: the files and the ids of their get requests."""

    def __init__(self, indices: list[int], tasks: list[FileTask], ids: list[int]) -> None:
        self.indices, self.tasks, self.ids = indices, tasks, ids
        self.t0 = time.monotonic()
        self.answered: set[int] = set()  # files the runner has an outcome for, or a commit will give one
        self.local = bundle_sink.Sink()  # lands this group's files


def landing_limit(cc: int) -> int:
    """Files one group may hold open until its commit: the process's descriptors shared by the
    cc workers, each with a group arriving and one being committed."""
    return max(8, (bundle_sink.MAX_PENDING - RESERVED_FDS) // (2 * max(1, cc)))


def pull_groups(mover: BundleMover, sink: SinkChannel) -> None:
    """Download the chunk's small files group by group over this channel."""
    r = mover.r
    limit = min(sink.max_files, landing_limit(r.params.cc))
    waiting: Pull | None = None
    asked: Pull | None = None
    lander = ThreadPoolExecutor(1, thread_name_prefix="bundle-land")
    landing: list[Future] = []
    try:
        while not r.schedule.surplus():
            indices = mover.take_group(limit)
            if not indices:
                break
            tasks = [r.tasks[i] for i in indices]
            for t in tasks:
                t.attempts += 1
                resume.restart(t, mover.s.journal)  # fetched whole: earlier ranges no longer count
            asked = Pull(indices, tasks, sink.ask(tasks, r.alg))
            if waiting is not None:
                _receive(mover, sink, waiting, lander, landing)
            waiting, asked = asked, None
        if waiting is not None:
            _receive(mover, sink, waiting, lander, landing)
            waiting = None
        _committed(landing)
    except BaseException as exc:
        # Nothing of the groups in flight is known to be in place (the local sink never renamed
        # them). When the channel broke, every file goes again, whole, over a new connection; any
        # other error is each file's outcome as it is, so no file stays counted as running.
        broke = isinstance(exc, (OSError, EOFError, ValueError))
        why = ConnectionError(f"connection lost during a bundle: {exc}") if broke else exc
        for lost in (waiting, asked):
            if lost is None:
                continue
            for put in lost.local.pending:
                put.fail("EIO", "abandoned")  # closes and removes the temporary file
            lost.local.pending = []
            for i, t in zip(lost.indices, lost.tasks):
                if i not in lost.answered:
                    r.failed(i, why, 0.0, t.src)
        if not broke:
            raise
        _committed(landing)  # the group before was whole: it lands
        raise ConnectionError(f"bundle channel lost: {exc}") from exc
    finally:
        lander.shutdown(wait=True)


def _committed(landing: list[Future]) -> None:
    """Wait for the group being committed (its errors are the worker's)."""
    while landing:
        landing.pop().result()


def _receive(
    mover: BundleMover, sink: SinkChannel, pull: Pull, lander: ThreadPoolExecutor, landing: list[Future]
) -> None:
    """Receive a group's files into temporary names, then hand their commit to the lander (once
    the group before has landed)."""
    r = mover.r
    local = pull.local
    group = Group()
    group.t0 = pull.t0
    for i, t, want in zip(pull.indices, pull.tasks, pull.ids):
        head, data = sink.receive(want)
        if not head.get("ok"):
            code = str(head.get("code") or "EIO")
            error = FileNotFoundError if code == "ENOENT" else OSError
            pull.answered.add(i)
            r.failed(i, error(f"{head.get('error') or code}"), time.monotonic() - pull.t0, t.src)
            continue
        if len(data) != t.size or mtime_changed(float(head.get("mtime") or 0), t.mtime):
            pull.answered.add(i)
            r.failed(i, SourceChanged(f"source changed since it was listed: {t.src}"), 0.0, t.src)
            continue
        t.moved_total += len(data)
        count_progress(t, mover.s.stats, len(data))  # progress as bytes arrive, not at the group's commit
        digest = head.get("digest") if r.alg else None
        put = local.begin(
            {
                "id": len(group.items),
                "tmp": os.path.abspath(t.tmp),
                "path": os.path.abspath(t.dst),
                "size": len(data),
                "mode": t.mode & 0o7777,
                "mtime": t.mtime,
                "algo": r.alg if digest else None,
                "digest": digest,
            }
        )
        local.feed(put, data)
        local.end(put)
        group.items.append((i, t, data, digest))
    sink.answered()
    _committed(landing)
    if group.items:
        landing.append(lander.submit(_commit, mover, local, group))
        pull.answered.update(i for i, _, _, _ in group.items)


def _commit(mover: BundleMover, local: bundle_sink.Sink, group: Group) -> None:
    mover.settle(group, local.commit({"fsync": True, "drop_cache": True})["files"])
