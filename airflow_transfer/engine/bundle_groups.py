"""Small files in bundles, both ways: groups asked of one helper and landed by another.

Two copies of the bundle helper (remote/bundle_sink.py) are paired for a chunk's
channel: the one where the files are (the server's for a download, one started
on this host for an upload: the feeder) and the one where they land (the
lander on this host, or the server's sink). Asked to `send` a file, the first
reads it, takes its digest from the bytes it read, checks its size and mtime
against the listing and writes it as a put for the second; a Pump
(bundle_channel.py) copies that stream into the second's input without reading
it. The second lands each group: every file under its temporary name (or none),
the group made durable (one syncfs), each file read back from disk and checked
against the source's digest, and only then named; its reply to the group's
commit reports every file, those the first could not send included. The next
group is asked for before the reply to the one before is read, and the lander
commits a group while the next one arrives: the source reads, the link carries
and the destination's disk checks at once, while this process only asks and
counts, its per-file work a request line and a journal row.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from . import resume
from .bundle_sizes import GROUP_MIN_BYTES

if TYPE_CHECKING:
    from .bundle import BundleMover, SinkChannel
    from .sftp_jobs import FileTask


class Group:
    """One bundle in flight: its files (index, task) and its commit's request id."""

    def __init__(self) -> None:
        self.items: list[tuple[int, FileTask]] = []
        self.ids: list[int] = []  # the files' request ids, in order
        self.commit_id = 0
        self.t0 = time.monotonic()
        self.heard = False  # the commit's reply was read (settling it may still have failed)


def move_groups(mover: BundleMover, source: SinkChannel, dest: SinkChannel) -> None:
    """Move the chunk's small files group by group from `source`'s host to `dest`'s."""
    r = mover.r
    limit = min(source.max_files, dest.max_files)
    landing: list[Group] = []  # asked for, the commit not yet answered (at most two)
    rate: float | None = None  # bytes per second the last group came in at (dest's count)
    group: Group | None = None  # taken from the schedule, its commit not yet asked for
    try:
        # A download's lander takes only files under the copy's destination root (the server's
        # helper writes its input); an upload's sink is the server's own business.
        source.pair(dest, None if mover.upload else os.path.abspath(mover.s.dst.path))
        while not r.schedule.surplus():
            indices = mover.take_group(limit, mover.group_bound(dest, rate))
            if not indices:
                break
            group = Group()
            for i in indices:
                t = r.tasks[i]
                t.attempts += 1
                resume.restart(t, mover.s.journal)  # sent whole: ranges of an earlier attempt no longer count
                group.items.append((i, t))
            group.ids, group.commit_id = source.relay([t for _, t in group.items], r.alg, mover.upload, mover.s.stats)
            landing.append(group)
            group = None
            if len(landing) > 1:
                rate = _settle(mover, source, dest, landing[0]) or rate
                landing.pop(0)
        while landing:
            _settle(mover, source, dest, landing[0])
            landing.pop(0)
    except BaseException as exc:
        # A group the lander committed still lands: its reply is read while the lander answers
        # (when the source went away, the lander answers the commits it read, then ends). Every
        # other file in flight goes again, whole, over a new connection when a channel broke;
        # any other error is each file's outcome as it is, so no file stays counted as running.
        broke = isinstance(exc, (OSError, EOFError, ValueError))
        why = ConnectionError(f"connection lost during a bundle: {exc}") if broke else exc
        # Not after a timeout (the reply would wait as long again) nor an interruption.
        readable = broke and not isinstance(exc, TimeoutError)
        for pending in [g for g in landing if not g.heard] if readable else ():
            try:
                _settle(mover, source, dest, pending)
            except Exception:  # noqa: BLE001 - the lander is gone too: its groups go again below
                break
            landing.remove(pending)
        for lost in landing:
            for i, t in lost.items:
                t.unheard = True  # its commit was asked for: it may have landed
                r.failed(i, why, 0.0, _at(mover, t))
        for i, t in group.items if group is not None else ():
            r.failed(i, why, 0.0, _at(mover, t))  # its commit never went out
        if not broke:
            raise
        raise ConnectionError(f"bundle channel lost: {exc}") from exc


def _settle(mover: BundleMover, source: SinkChannel, dest: SinkChannel, group: Group) -> float | None:
    """Read the reply to `group` (the oldest in flight) and settle it; the rate its bytes came in
    at (bytes per second, as the lander counted them), None when too few came to tell."""
    results = dest.result(group.commit_id, len(group.items))
    group.heard = True
    source.answered()
    for (_, t), res, want in zip(group.items, results, group.ids):
        # Each entry answers the file asked for in its place: a reply out of step (other files,
        # another order) is caught here, and its group goes again on a new pair. Where a file
        # landed needs no check here: a confined lander places a file only where the client's
        # mac for that id says (SinkChannel.pair).
        if not isinstance(res, dict) or res.get("id") != want:
            raise ValueError(f"the bundle helper answered for another file than {t.rel} ({str(res)[:200]})")
    for (_, t), res in zip(group.items, results):
        if not res.get("source"):  # its bytes crossed, whatever the lander found
            t.moved_total += t.size
    mover.settle(group, results)
    got, seconds = dest.received
    if isinstance(got, int) and isinstance(seconds, (int, float)) and got >= GROUP_MIN_BYTES // 2 and seconds > 0:
        return got / seconds
    return None


def _at(mover: BundleMover, t: FileTask) -> str:
    """The path a failure of `t` is reported at: where it was being written."""
    return t.dst if mover.upload else t.src
