"""Small files downloaded in bundles: the mirror of the upload path in engine/bundle.py.

The bundle helper on the source host (remote/bundle_sink.py) answers a whole
group of `get` requests in order, each file's digest ahead of its bytes (taken
from the bytes it read, so verification stays end to end). This side hands
each file on to the same helper started on this host (bundle_carriers.py),
which lands the group as it lands uploads on a server: every file under its
temporary name, the group made durable (one syncfs), each file read back from
disk and checked against the source's digest, and only then renamed. Requests
for the next group go out before the replies of the one before are read, and
the local helper commits a group while the next one arrives, in a process of
its own: the source reads, the link carries and this disk checks at once, and
the landing's system calls do not wait for this process's interpreter lock.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import resume
from .bundle_carriers import SEND_PIECE
from .bundle_sizes import GROUP_MIN_BYTES, group_bytes
from .sftp_jobs import FileTask, SourceChanged, count_progress, mtime_changed

if TYPE_CHECKING:
    from .bundle import BundleMover, SinkChannel


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


def pull_groups(mover: BundleMover, sink: SinkChannel, lander: SinkChannel) -> None:
    """Download the chunk's small files group by group over `sink`, landing them through `lander`."""
    r = mover.r
    limit = min(sink.max_files, lander.max_files)
    asked: list[Pull] = []  # gets sent, replies not yet all read (at most two groups)
    landing: list[Group] = []  # handed to the lander, commit not yet answered
    rate: float | None = None  # bytes per second this channel's last group came in at
    try:
        while not r.schedule.surplus():
            # The sender's congestion window is on the server, out of sight: the rate the last
            # group came in at stands in for it (an upload reads its own window, bundle.py). A
            # channel starts with small groups and takes larger ones as it speeds up, so one
            # that is slow (new, in slow start, or cut by a loss) holds little of what is left.
            indices = mover.take_group(limit, GROUP_MIN_BYTES if rate is None else group_bytes(rate))
            if not indices:
                break
            tasks = [r.tasks[i] for i in indices]
            for t in tasks:
                t.attempts += 1
                resume.restart(t, mover.s.journal)  # fetched whole: earlier ranges no longer count
            asked.append(Pull(indices, tasks, sink.ask(tasks, r.alg)))
            if len(asked) > 1:
                rate = _forward(mover, sink, lander, asked[0], landing) or rate
                asked.pop(0)
                _settle(mover, lander, landing, keep=1)
        while asked:
            _forward(mover, sink, lander, asked[0], landing)
            asked.pop(0)
        _settle(mover, lander, landing, keep=0)
    except BaseException as exc:
        # A group the lander committed whole still lands: its reply is read if the lander is
        # sound. Every other file in flight goes again, whole, over a new connection when a
        # channel broke; any other error is each file's outcome as it is, so no file stays
        # counted as running.
        broke = isinstance(exc, (OSError, EOFError, ValueError))
        why = ConnectionError(f"connection lost during a bundle: {exc}") if broke else exc
        try:
            if not lander.open:
                _settle(mover, lander, landing, keep=0)
        except Exception:  # noqa: BLE001 - the lander is gone too: its groups go again below
            pass
        for group in landing:
            for i, t, _, _ in group.items:
                t.unheard = True  # committed to a lander that did not answer: it may have landed
                r.failed(i, why, 0.0, t.src)
        for pull in asked:
            for i, t in zip(pull.indices, pull.tasks):
                if i not in pull.answered:
                    r.failed(i, why, 0.0, t.src)
        if not broke:
            raise
        raise ConnectionError(f"bundle channel lost: {exc}") from exc


def _settle(mover: BundleMover, lander: SinkChannel, landing: list[Group], keep: int) -> None:
    """Read the lander's replies until `keep` groups are left waiting on it."""
    while len(landing) > keep:
        group = landing[0]
        results = lander.result(group.commit_id, len(group.items))
        landing.pop(0)
        mover.settle(group, results)


def _forward(
    mover: BundleMover, sink: SinkChannel, lander: SinkChannel, pull: Pull, landing: list[Group]
) -> float | None:
    """Read a group's files from the source's helper and hand each on to the lander; then its
    commit. A file that failed at the source, or changed since it was listed, fails alone.
    Returns the rate its bytes came in at (bytes per second), None when too few came to tell."""
    r = mover.r
    t0, got = time.monotonic(), 0
    group = Group()
    group.t0 = pull.t0
    batch: list[tuple[FileTask, bytes, str | None]] = []
    held = 0
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
        got += len(data)
        t.moved_total += len(data)
        count_progress(t, mover.s.stats, len(data))  # progress as bytes arrive, not at the group's commit
        digest = head.get("digest") if r.alg else None
        batch.append((t, data, digest))
        group.items.append((i, t, data, digest))
        held += len(data)
        if held >= SEND_PIECE:
            lander.put(batch, r.alg, local=True)
            batch, held = [], 0
    sink.answered()
    seconds = time.monotonic() - t0
    rate = got / seconds if got >= GROUP_MIN_BYTES // 2 and seconds > 0 else None
    if not group.items:
        return rate
    if batch:
        lander.put(batch, r.alg, local=True)
    group.commit_id = lander.commit()
    landing.append(group)
    pull.answered.update(i for i, _, _, _ in group.items)
    return rate
