"""A copy's first small files, moved while the command line still loads the copy path.

Before it imports the engine, the store and the tuning (about 0.3 s of this process's CPU),
the command line starts the SSH handshakes and the bundle helpers (bundle_channel.py), and
for a download the source's listing. Those are ready before the imports end, and used to
wait for them. The head start puts those helpers to work meanwhile, every pair that was
started (one per data connection): the pairs take small files (1 MiB or less) from one shared
walk, in the order the tree is walked, and each has its share moved group by group exactly
as a chunk's bundle mover would (one pair alone carried a loopback pull of 2,000 x 64 KiB
for most of a second while the other, ready as early, waited). The helper where they land
writes each file under no name, makes the group durable, reads it back, checks the source's digest and only
then names it. A download walks the listing run ahead and lands through the lander on this
host; an upload walks the local tree itself and lands through the server's sink, looking at
the server's directories over the SFTP session of one warmed connection it holds meanwhile.

When the copy's first chunk begins, it stops the head start (the groups in flight are
answered first) and adopts what it placed (`adopt`): those files are journaled done and
counted as moved, not as found present; the pair goes back to the pool's spares, where the
chunk's first bundle worker takes it.

What keeps this safe: only files with no entry at all at the destination are taken (a
resumed copy decides about the others itself), in directories that are real directories
(made here, or found as such: never through a symlink); a kill at any point leaves verified
files under their final names and nothing else, as a chunk's bundle does, and the re-run
finds them complete (size and mtime as listed) and skips them. A file the helpers could not
place, for any reason, is left to the chunk, which meets the reason itself.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import UnsafePathError
from ..paths import check_relative, join_path, temp_name
from .bundle_sizes import GROUP_MIN_BYTES, group_bytes
from .local_peek import BUNDLE_MAX_FILE
from .result import FileOutcome
from .sftp_jobs import FileTask

if TYPE_CHECKING:
    from .bundle_channel import SinkChannel
    from .session import Session

IN_FLIGHT = 2  # groups asked for and not yet answered, as a chunk's bundle worker keeps them


class HeadStart:
    """Small files moved over the pairs of helpers started ahead, until `finish`. The group loop
    and the hand-over are here; where the files come from, how the destination is looked at and
    which pairs are used are the direction's (head_start_sides.py)."""

    root: str | None = None  # the lander's confinement (downloads), as the chunk's mover sets it

    def __init__(self, pool: Any, dst_root: str, algorithm: str | None, pairs: int = 1) -> None:
        self.pool, self.dst_root, self.algorithm = pool, dst_root, algorithm
        self.started = time.monotonic()
        self.landed: dict[str, tuple[int, float]] = {}  # rel -> (size, mtime) as listed: placed and verified
        self.mismatched: set[str] = set()  # rels whose read-back differed from the source's digest
        self.bytes = self.groups = 0
        self.why = ""  # why a pair stopped before it was told to, if one did (the first reason met)
        self.wanted = max(1, pairs)  # pairs to put to work, as many as were started ahead
        self.groups_by_pair: list[int] = []  # groups each pair moved, in the order they began
        self._stop = threading.Event()
        self._lock = threading.Lock()  # finish() and take_groups(): held while the threads are joined
        self._counts = threading.Lock()  # what the pairs' threads add to: counts, landed files, pairs
        self._walk_lock = threading.Lock()  # one thread at a time takes files from the walk
        self._finished = self._groups_told = False
        self._pairs: list[tuple[SinkChannel, SinkChannel] | None] = []  # (reading helper, landing helper)
        self._files: Iterator[FileTask] | None = None
        self._others: list[threading.Thread] = []  # the further pairs' threads
        # The first pair's thread; it starts one more per further pair and outlives them all.
        self.thread = threading.Thread(target=self._run, name="head-start", daemon=True)

    def start(self) -> HeadStart:
        self.thread.start()
        return self

    # -- what a direction provides -------------------------------------------
    def _small_files(self) -> Iterator[FileTask]:
        raise NotImplementedError

    def _take_pair(self) -> tuple[SinkChannel, SinkChannel] | None:
        raise NotImplementedError

    def _take_another(self) -> tuple[SinkChannel, SinkChannel] | None:
        """A further pair, once the first is at work."""
        return self._take_pair()

    def _give_back(self, source: SinkChannel, dest: SinkChannel) -> None:
        raise NotImplementedError

    def _done(self) -> None:
        """Every pair is handed back or closed (an upload releases its connection here)."""

    # -- the threads -----------------------------------------------------------
    def _run(self) -> None:
        try:
            self._move()
        except Exception as exc:  # noqa: BLE001 - whatever it was, the chunk moves the rest and meets it
            self._failed(0, exc)
        finally:
            for other in self._others:
                other.join()  # finish() hands back every pair once this thread ends

    def _move(self) -> None:
        pair = self._take_pair()  # first: an upload looks at the server over its connection
        if pair is None:
            return
        self._pairs.append(pair)
        self.groups_by_pair.append(0)
        files = self._small_files()
        first = next(files, None)
        if first is None:
            return  # finish() hands the pair back unused
        self._files = itertools.chain([first], files)
        for n in range(self.wanted - 1):
            other = threading.Thread(target=self._another, name=f"head-start-{n + 2}", daemon=True)
            self._others.append(other)
            other.start()
        self._carry(0, *pair)

    def _another(self) -> None:
        """A further pair's thread: it takes files from the same walk until it runs out or stops."""
        index = None
        try:
            pair = self._take_another()  # waits while that pair is still starting
            if pair is None:
                return
            with self._counts:
                index = len(self._pairs)
                self._pairs.append(pair)  # so that finish() hands it back, even unused
                self.groups_by_pair.append(0)
            self._carry(index, *pair)
        except Exception as exc:  # noqa: BLE001 - its files in flight were not placed: the chunk moves them
            if index is not None:
                self._failed(index, exc)

    def _failed(self, index: int, exc: Exception) -> None:
        """One pair met an error: it is closed, the others go on."""
        with self._counts:
            self.why = self.why or f"{type(exc).__name__}: {exc}"
        self._drop(index)

    def _next_group(self, limit: int, max_bytes: int) -> list[FileTask]:
        with self._walk_lock:
            return _group(self._files, limit, max_bytes) if self._files is not None else []

    def _carry(self, index: int, source: SinkChannel, dest: SinkChannel) -> None:
        """Move groups over one pair, two in flight, until the walk runs out or finish() stops it."""
        source.pair(dest, self.root)
        limit = min(source.max_files, dest.max_files)
        landing: collections.deque[tuple[list[FileTask], list[int], int]] = collections.deque()
        rate: float | None = None
        while not self._stop.is_set():
            group = self._next_group(limit, GROUP_MIN_BYTES if rate is None else group_bytes(rate))
            if not group:
                break
            ids, commit_id = source.relay(group, self.algorithm, self.root is None, None)
            landing.append((group, ids, commit_id))
            if len(landing) >= IN_FLIGHT:
                rate = self._settle(index, source, dest, *landing.popleft()) or rate
        while landing:
            self._settle(index, source, dest, *landing.popleft())

    def _settle(
        self,
        index: int,
        source: SinkChannel,
        dest: SinkChannel,
        group: list[FileTask],
        ids: list[int],
        commit_id: int,
    ) -> float | None:
        results = dest.result(commit_id, len(group))
        source.answered()
        for t, res, want in zip(group, results, ids, strict=True):
            if not isinstance(res, dict) or res.get("id") != want:
                raise ValueError(f"the bundle helper answered for another file than {t.rel}")
        with self._counts:
            for t, res in zip(group, results):
                if res.get("ok"):
                    self.landed[t.rel] = (t.size, t.mtime)
                    self.bytes += t.size
                elif res.get("code") == "EMISMATCH":
                    self.mismatched.add(t.rel)  # caught: the chunk sends it again and says so
            self.groups += 1
            self.groups_by_pair[index] += 1
        got, seconds = dest.received
        if isinstance(got, int) and isinstance(seconds, (int, float)) and got >= GROUP_MIN_BYTES // 2 and seconds > 0:
            return got / seconds
        return None

    # -- the copy's side -------------------------------------------------------
    def finish(self) -> dict[str, tuple[int, float]]:
        """Stop (after the groups in flight are answered), hand the helpers back to the pool,
        and return what was placed: rel -> (size, mtime) as listed."""
        with self._lock:
            if not self._finished:
                self._finished = True
                self._stop.set()
                self.thread.join()  # it joins the further pairs' threads first
                pairs, self._pairs = self._pairs, []
                for pair in pairs:
                    if pair is None:
                        continue  # dropped after an error
                    source, dest = pair
                    if source.in_flight or dest.in_flight:
                        source.close()  # closes its partner too
                    else:
                        if source.pump is not None:
                            source.pump.forget()  # its counts were never this copy's progress
                        self._give_back(source, dest)
                self._done()
        return self.landed

    def take_groups(self) -> int:
        """The groups it moved, the first time asked (chunks adopting its files count them once)."""
        with self._lock:
            groups, self._groups_told = (0 if self._groups_told else self.groups), True
        return groups

    def describe(self) -> str:
        """What it did, for the first chunk's summary."""
        if not self.landed:
            return ""
        return f"{len(self.landed)} files placed while the copy started (head start, {self.groups} groups)"

    def close(self) -> None:
        """The pool closes: stop at once, without waiting for replies."""
        self._stop.set()
        for index in range(len(self._pairs)):
            self._drop(index)
        if self.thread.ident is not None:
            self.thread.join(5.0)
        self._done()

    def _drop(self, index: int) -> None:
        """Close the pair at `index` (after an error, or as the pool closes)."""
        with self._counts:
            pair = self._pairs[index] if index < len(self._pairs) else None
            if pair is not None:
                self._pairs[index] = None
        for helper in pair or ():
            helper.close()  # both: they may not be paired yet


def _group(files: Iterator[FileTask], limit: int, max_bytes: int) -> list[FileTask]:
    group: list[FileTask] = []
    size = 0
    while len(group) < limit and size < max_bytes:
        t = next(files, None)
        if t is None:
            break
        group.append(t)
        size += t.size
    return group


def small_task(rec: list, src_root: str, dst_root: str) -> FileTask | None:
    """A lister record ["f", rel, size, mtime, mode] as a task, if small and safely named, with
    the paths the copy's own task for it has (TransferSession.tasks)."""
    rel, size, mtime, mode = rec[1], rec[2], rec[3], rec[4]
    if not (type(size) is int and 0 <= size <= BUNDLE_MAX_FILE and isinstance(mtime, (int, float))):
        return None
    try:
        check_relative(rel)
    except UnsafePathError:
        return None  # the copy refuses it, with the reason
    dst = join_path(dst_root, rel)
    return FileTask(rel, size, float(mtime), join_path(src_root, rel), dst, temp_name(dst), int(mode) & 0o7777)


def adopt(
    session: Session, tasks: list[FileTask], dst_root: str, outcomes: dict[int, FileOutcome]
) -> tuple[set[int], str]:
    """The indices of `tasks` the head start placed (stopping it first), each recorded as a
    moved and verified file: journal, counts, outcome; and what to say of them in the chunk's
    summary. A file whose read-back it found wrong counts as a mismatch, and as repaired once
    the chunk lands it. Nothing where the session's pool has no head start or it placed files
    elsewhere."""
    head = getattr(getattr(session, "pool", None), "ahead", None)
    if not isinstance(head, HeadStart) or head.dst_root != dst_root:
        return set(), ""
    landed = head.finish()
    bundle = getattr(session, "bundle", None)
    caught = [t for t in tasks if t.rel in head.mismatched]
    for t in caught:
        t.mismatches += 1
    if caught and bundle is not None:
        bundle.count_many(mismatched=len(caught))
    mine = [i for i, t in enumerate(tasks) if landed.get(t.rel) == (t.size, t.mtime)] if landed else []
    if not mine:
        return set(), ""
    if session.journal is not None:
        session.journal.mark_done_many([(tasks[i].rel, tasks[i].size, tasks[i].mtime, 1) for i in mine])
    moved = 0
    for i in mine:
        t = tasks[i]
        t.attempts = 1
        t.moved_total = t.counted = t.size
        moved += t.size
        outcomes[i] = FileOutcome(t.rel, t.size, t.size, 0.0, True)
    session.stats.add_bytes(moved)
    session.stats.files_finished(len(mine))
    if bundle is not None:  # the summary's verify counts: bundled files like the chunk's own
        with bundle.lock:
            bundle.files += len(mine)
            bundle.groups += head.take_groups()
        bundle.count_many(verified=len(mine) if session.verify is not None else 0)
    return set(mine), head.describe()
