"""Small files in bundles: a group of files per round trip over one SSH exec channel.

Pipelining (paper 000 in docs/papers.md) hides the round trips of small files
but not their per-file work: over SFTP every file costs an OPEN, WRITEs, an
FSETSTAT, a CLOSE, a digest request, a rename and their replies, each a few
Python steps on both ends. Where the destination runs commands over SSH and
has python3, the bundle sink (remote/bundle_sink.py, standard library only) is
started once per connection and a group of small files travels as one framed
stream: a header and the bytes of each file, then one commit, written by the same
helper on the source's side (bundle_groups.py). The sink writes
every file under its temporary name, makes the group durable (one syncfs where
the kernel has it), reads each file back from disk, compares its digest with
the source's, and only then renames it into place; one reply reports every
file. A crash at any point leaves temporary names only, and the journal marks a
file done only after that reply, so a resume sends exactly the unfinished ones.

The bundle path is a mover beneath the one runner (engine/runner.py): retries,
deadline, journal and outcomes are the runner's. Where the sink cannot run
(SFTP-only server, no python3, a forced command) or fails, the same chunk goes
on over SFTP, and the chunk's summary says which path it took and why.
"""

from __future__ import annotations

import dataclasses
import errno
import threading
import time
from typing import TYPE_CHECKING, Any

from ..protocols import openssh
from ..protocols.rtt import tcp_send_rate
from .bundle_carriers import BundleUnavailable
from .bundle_channel import (
    FEEDER_NAME,
    LANDER_NAME,
    SINK_NAME,
    SinkChannel,
    SinkStarting,
    take_spare,
    wants_openssh,
)
from .bundle_groups import Group, move_groups
from .bundle_sizes import GROUP_BYTES, GROUP_MIN_BYTES, TAIL_GROUP_FILES, group_bytes
from .carrier_choice import decide_for_connection
from .failures import ChecksumMismatch
from .local_peek import BUNDLE_MAX_FILE  # files up to 1 MiB travel in bundles; larger ones stream over SFTP
from .sftp_jobs import FileTask, SourceChanged, count_progress_many
from .sftp_mover import SFTPMover

if TYPE_CHECKING:
    from .runner import Runner
    from .transfer import TransferSession

_HELPERS = (SINK_NAME, LANDER_NAME, FEEDER_NAME)


def _has_sink(conn: Any) -> bool:
    return SINK_NAME in conn.companions


class BundleState:
    """What a copy's sessions (siblings under Multi-Chunk too) learnt about bundles: why they
    are off, if they are, and what the sink verified."""

    def __init__(self, enabled: bool = True) -> None:
        self.off = "" if enabled else "bundles turned off"
        # Why a download's helper is not over OpenSSH's client, once that is known (bundle_carriers.py).
        self.no_openssh = ""
        self.lock = threading.Lock()
        self.files = self.groups = self.verified = self.mismatched = self.repaired = 0

    def count(self, verified: bool = False, mismatched: bool = False, repaired: bool = False) -> None:
        self.count_many(verified, mismatched, repaired)

    def count_many(self, verified: int = 0, mismatched: int = 0, repaired: int = 0) -> None:
        with self.lock:
            self.verified += verified
            self.mismatched += mismatched
            self.repaired += repaired


class BundleMover(SFTPMover):
    """Uploads small files in bundles through the sink; anything else (and everything, where
    the sink cannot run) over SFTP as SFTPMover does."""

    def __init__(self, session: TransferSession, runner: Runner) -> None:
        super().__init__(session, runner)
        self.state: BundleState = session.bundle
        self.lock = threading.Lock()
        self.groups = 0
        self.bundled = 0
        self.carrier = ""  # what carried this chunk's helper stream: "paramiko" or "openssh"

    def connect(self) -> Any:
        # An upload's sinks start with the first connections the pool opens (prestart_upload_sinks),
        # and verification warms one connection more. Taking the pool's last-released connection,
        # one worker of two often got the connection without a sink and started its own while a
        # sink started ahead sat unused to the end (a third exec session and python3 on the server).
        if self.upload and not self.state.off and self.pool.on_transport is not None:
            return self.pool.acquire(prefer=_has_sink)
        return super().connect()

    def release(self, conn: Any, broken: bool) -> None:
        # A helper stays with its connection for the next chunk (python3's start and the hello
        # once per connection, not per chunk) unless a reply is still owed on it; a pair goes
        # together.
        helpers = [conn.companions.get(name) for name in _HELPERS]
        if any(h is not None and (broken or h.in_flight) for h in helpers):
            for name in _HELPERS:
                helper = conn.companions.pop(name, None)
                if helper is not None:
                    helper.close()
        super().release(conn, broken)

    def describe(self) -> str:
        """Which path the chunk's files took, and why: for the chunk's summary."""
        why = self.state.off
        if self.bundled:
            carrier = self.carrier or "paramiko"
            # Sinks started with their connections never asked _open: the pool's choice says why.
            why_not = self.state.no_openssh or (getattr(self.pool, "upload_carrier_why", "") if self.upload else "")
            if carrier == "paramiko" and why_not:
                carrier += f" ({why_not})"
            return f"bundle: {self.bundled} files in {self.groups} groups over {carrier}" + (
                f"; the rest over sftp ({why})" if why else ""
            )
        return f"sftp ({why})" if why else "sftp"

    def small(self, t: FileTask) -> bool:
        return t.size <= BUNDLE_MAX_FILE and not t.repair

    def takes_whole(self, t: FileTask) -> bool:
        # While bundles work, a small file waits for a bundle. A worker whose bundle loop ended
        # because the chunk had a worker too many, and which then found itself kept (another
        # retired first), used to carry the rest of the small files one by one over SFTP: a
        # tenth of the rate on a first contact with 100,000 files.
        return super().takes_whole(t) and (bool(self.state.off) or not self.small(t))

    def drain(self, conn: Any, gone: list[bool]) -> None:
        pair = self._pair(conn)
        if pair is not None:
            move_groups(self, *pair)
        # What is left for SFTP: files too big for a bundle, or every file where no sink runs. When
        # the next file in line is a small one, the SFTP drain returns and the runner's loop
        # brings this worker back here (or retires it).
        super().drain(conn, gone)

    def _pair(self, conn: Any) -> tuple[SinkChannel, SinkChannel] | None:
        """(the helper reading the files, the one landing them) for this connection, or None
        where bundles cannot run: the server's helper, and one on this host (bundle_groups.py)."""
        sink = self._sink(conn)
        if sink is None:
            return None
        name = FEEDER_NAME if self.upload else LANDER_NAME
        if sink.partner is not None and name not in conn.companions:
            conn.companions[name] = sink.partner  # handed back paired (head_start.py)
        mine = self._local(conn, name)
        if mine is None:
            return None
        return (mine, sink) if self.upload else (sink, mine)

    def group_bound(self, dest: SinkChannel, rate: float | None) -> int:
        """The most bytes the next group may hold. An upload over paramiko reads the congestion
        window of the socket its sink's stream rides (the Transport of its exec channel); over
        an `ssh` process that socket is out of sight, as a download's sender is, so the rate its
        last group came in at stands in for it. A download's channel starts with small groups and
        takes larger ones as it speeds up, so one that is slow (new, in slow start, or cut by a
        loss) holds little of what is left."""
        sock = getattr(getattr(dest.chan, "transport", None), "sock", None) if self.upload else None
        if sock is not None:
            return group_bytes(tcp_send_rate(sock))
        return GROUP_MIN_BYTES if rate is None else group_bytes(rate)

    def _sink(self, conn: Any) -> SinkChannel | None:
        if self.state.off:
            return None
        sink = conn.companions.get(SINK_NAME)
        if sink is not None and not isinstance(sink, SinkStarting):
            self.carrier = sink.carrier
            return sink
        try:
            if sink is not None:  # started with the connection (prestart_upload_sinks)
                conn.companions.pop(SINK_NAME)
                sink = sink.result()
            sink = sink or self._open(conn)
        except BundleUnavailable as exc:
            self.state.off = str(exc)  # once per copy: the server will not change its mind
            return None
        if self.r.alg and self.r.alg not in sink.algorithms:
            sink.close()
            self.state.off = f"the bundle sink there cannot compute {self.r.alg}"
            return None
        conn.companions[SINK_NAME] = sink
        self.carrier = sink.carrier
        return sink

    def _open(self, conn: Any) -> SinkChannel:
        """The server's helper over OpenSSH's client where it can carry this target, else over
        paramiko, both ways. Measured on loopback (docs/transfers.md, "Small files in
        bundles"): pulling 2000 x 64 KiB took 3.6 s over OpenSSH against 6.8 s over paramiko,
        whose receive path costs this process Python steps per packet; pushing, once the pump
        splices the feeder's pipe into `ssh`'s, 2.34 s against 2.42 and 3.35 machine CPU-s
        against 3.67 (8 interleaved pairs). An `ssh` that cannot start the helper does not turn
        bundles off: paramiko's exec channel is tried next, and its answer decides."""
        target = conn.target
        if wants_openssh() and not self.state.no_openssh and target is not None:
            why = openssh.usable(dataclasses.replace(target, client="auto"))
            if not why and self.upload:
                why = decide_for_connection(self.pool, conn)  # the link's round trip (carrier_choice.py)
            if not why:
                try:
                    # One started with the copy's first handshakes (bundle_channel.py), else a new one.
                    spare = take_spare(self.pool, SINK_NAME)
                    return spare or SinkChannel.over_openssh(target)
                except BundleUnavailable as exc:
                    why = f"OpenSSH's client could not start the helper: {exc}"
            with self.state.lock:
                self.state.no_openssh = why  # once per copy: neither the target nor the server changes
        return SinkChannel.over_paramiko(conn.transport)

    def _local(self, conn: Any, name: str) -> SinkChannel | None:
        """The helper on this host that lands downloaded groups (or reads uploaded ones), one
        per connection."""
        mine = conn.companions.get(name)
        if mine is None:
            try:
                mine = take_spare(self.pool, name) or SinkChannel.local()
            except BundleUnavailable as exc:
                self.state.off = f"the local bundle helper did not start: {exc}"
                return None
            conn.companions[name] = mine
        return mine

    def take_group(self, limit: int, max_bytes: int = GROUP_BYTES) -> list[int]:
        """The next group's files (see _take), without those found landed already."""
        while True:
            taken = self._take(limit, max_bytes)
            kept = self.landed(taken)
            if kept or not taken:
                return kept

    def _take(self, limit: int, max_bytes: int) -> list[int]:
        """Up to `limit` files and `max_bytes`, and no more than half this worker's share of what
        is waiting. Without that rule one channel could take the last 16 MiB group while the
        others had nothing left (on an emulated 139 ms path the last 2 % of a 617 MiB copy of
        small files took 5 s of its 28). Half: a worker holds two groups at a time (one sent and
        committing, the next being sent), and workers take their last groups at different times;
        with whole shares, wan50 `tiny` still ended with one channel carrying its last 256 files
        (13 MiB) alone for 1.4 s in one run of five. Halving makes the last groups small (down to
        TAIL_GROUP_FILES), so the channels finish close together."""
        r = self.r
        limit = min(limit, max(TAIL_GROUP_FILES, -(-r.schedule.share() // 2)))
        tasks = r.tasks
        return r.schedule.pop_group(limit, lambda k: self.small(tasks[k]), lambda k: tasks[k].size, max_bytes)

    def settle(self, group: Group, results: list[dict]) -> None:
        """Each file's outcome from a sink's reply to its group's commit (the remote sink's for
        uploads, the local one's for downloads)."""
        r = self.r
        seconds = time.monotonic() - group.t0
        with self.lock:
            self.groups += 1
            self.bundled += len(group.items)
        with self.state.lock:
            self.state.groups += 1
            self.state.files += len(group.items)
        count_progress_many([(t, t.size) for _, t in group.items], self.s.stats)  # capped: a retry is not progress
        landed: list[int] = []  # verified and renamed: finished together, after the loop
        try:
            for (i, t), res in zip(group.items, results, strict=True):
                if res.get("ok"):
                    landed.append(i)
                    continue
                self._refused(i, t, res, seconds)
        finally:
            repaired = sum(1 for i in landed if r.tasks[i].mismatches)
            self.state.count_many(verified=len(landed) if r.alg is not None else 0, repaired=repaired)
            r.finish_ok(landed, seconds)

    def _refused(self, i: int, t: FileTask, res: dict, seconds: float) -> None:
        """A file of a group the sink did not land: mismatched (sent again) or failed."""
        r = self.r
        code = str(res.get("code") or "")
        why: BaseException
        if code == "EMISMATCH":
            t.mismatches += 1
            self.state.count(mismatched=True)
            got, want = str(res.get("digest") or ""), str(res.get("expected") or "")
            why = ChecksumMismatch(f"checksum mismatch ({r.alg}): source {want[:16]}, destination {got[:16]}")
        elif res.get("source") and code == "ECHANGED":  # the source, as the helper reading it found it
            why = SourceChanged(f"source changed since it was listed: {t.src}")
        elif res.get("source") and code == "ENOENT":
            why = FileNotFoundError(errno.ENOENT, str(res.get("error") or code), t.src)
        else:
            where = t.src if res.get("source") else t.dst
            why = OSError(getattr(errno, code, errno.EIO), str(res.get("error") or code), where)
        r.failed(i, why, seconds, t.dst if self.upload and not res.get("source") else t.src)
