"""Small files downloaded in bundles: the mirror of the upload path in engine/bundle.py.

The bundle helper on the source host (remote/bundle_sink.py) and the same
helper started on this host (the lander, bundle_carriers.py) are paired: the
source's helper reads each file asked for and writes it, its digest taken from
the bytes it read, as a put for the lander; a Pump (bundle_channel.py) copies
that stream into the lander's input without reading it. The lander lands each
group as a server lands uploads: every file under its temporary name, the group
made durable (one syncfs), each file read back from disk and checked against
the source's digest, and only then renamed; its commit's reply reports every
file, including those the source could not send. The next group is asked for
before the reply of the one before is read, and the lander commits a group
while the next one arrives, in a process of its own: the source reads, the link
carries and this disk checks at once, while this process only asks and counts.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import resume
from .bundle_sizes import GROUP_MIN_BYTES, group_bytes

if TYPE_CHECKING:
    from .bundle import BundleMover, SinkChannel
    from .sftp_jobs import FileTask


class Group:
    """One bundle in flight: its files (index, task, bytes, source digest) and its commit.
    A download's group holds no bytes here: they go from helper to helper."""

    def __init__(self) -> None:
        self.items: list[tuple[int, FileTask, bytes, str | None]] = []
        self.commit_id = 0
        self.t0 = time.monotonic()


def pull_groups(mover: BundleMover, sink: SinkChannel, lander: SinkChannel) -> None:
    """Download the chunk's small files group by group from `sink`, landed by `lander`."""
    r = mover.r
    limit = min(sink.max_files, lander.max_files)
    landing: list[Group] = []  # asked for, the lander's commit not yet answered (at most two)
    rate: float | None = None  # bytes per second this pair's last group came in at
    try:
        sink.pair(lander)
        while not r.schedule.surplus():
            # The sender's congestion window is on the server, out of sight: the rate the last
            # group came in at stands in for it (an upload reads its own window, bundle.py). A
            # channel starts with small groups and takes larger ones as it speeds up, so one
            # that is slow (new, in slow start, or cut by a loss) holds little of what is left.
            indices = mover.take_group(limit, GROUP_MIN_BYTES if rate is None else group_bytes(rate))
            if not indices:
                break
            group = Group()
            for i in indices:
                t = r.tasks[i]
                t.attempts += 1
                resume.restart(t, mover.s.journal)  # fetched whole: earlier ranges no longer count
                group.items.append((i, t, b"", None))
            group.commit_id = sink.relay([t for _, t, _, _ in group.items], r.alg)
            landing.append(group)
            if len(landing) > 1:
                rate = _settle(mover, sink, lander, landing) or rate
        while landing:
            _settle(mover, sink, lander, landing)
    except BaseException as exc:
        # A group the lander committed still lands: its reply is read while the lander answers
        # (when the source went away, the lander answers the commits it read, then ends). Every
        # other file in flight goes again, whole, over a new connection when a channel broke;
        # any other error is each file's outcome as it is, so no file stays counted as running.
        broke = isinstance(exc, (OSError, EOFError, ValueError))
        why = ConnectionError(f"connection lost during a bundle: {exc}") if broke else exc
        try:
            while landing:
                _settle(mover, sink, lander, landing)
        except Exception:  # noqa: BLE001 - the lander is gone too: its groups go again below
            pass
        for group in landing:
            for i, t, _, _ in group.items:
                t.unheard = True  # its commit was asked for: it may have landed
                r.failed(i, why, 0.0, t.src)
        if not broke:
            raise
        raise ConnectionError(f"bundle channel lost: {exc}") from exc


def _settle(mover: BundleMover, sink: SinkChannel, lander: SinkChannel, landing: list[Group]) -> float | None:
    """Read the lander's reply to the oldest group and settle it; the rate its bytes came in at
    (bytes per second, from the lander's count), None when too few came to tell."""
    group = landing[0]
    results = lander.result(group.commit_id, len(group.items))
    sink.answered()
    landing.pop(0)
    for (_, t, _, _), res in zip(group.items, results):
        if not res.get("source"):  # its bytes came over the link, whatever the lander found
            t.moved_total += t.size
    mover.settle(group, results)
    got, seconds = lander.received
    if isinstance(got, int) and isinstance(seconds, (int, float)) and got >= GROUP_MIN_BYTES // 2 and seconds > 0:
        return got / seconds
    return None
