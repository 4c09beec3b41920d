"""One pool of channels shared by chunks that run at the same time (Multi-Chunk, first contact).

`ChannelScheduler` starts chunks on a session (tuning/executor.py, `SessionExecutor`), hands the
channels of a finished chunk, one at a time, to the chunk with the longest estimated time left,
and can grow or shrink the pool while everything runs (`resize`), which is how the first-contact
ramp changes concurrency without stopping a chunk. Subclasses watch the run through
`on_progress` (every progress tick) and `on_done` (after a chunk's channels were handed on).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .base import RunContext
from .chunks import ChunkSpec
from .executor import ChunkEvent
from .models import LinkInfo, channel_rate_bps


def round_robin(channels: int, order: list[str], caps: dict[str, int] | None = None) -> dict[str, int]:
    """`channels` handed out one by one over `order`, skipping a name once it holds its cap."""
    alloc = {name: 0 for name in order}
    left = channels if order else 0
    while left > 0:
        open_ = [n for n in order if caps is None or alloc[n] < caps[n]]
        if not open_:
            break
        for name in open_:
            if left == 0:
                break
            alloc[name] += 1
            left -= 1
    return alloc


class ChunkState:
    """What the scheduler knows of one chunk: its channels, progress and channel-seconds."""

    def __init__(self, spec: ChunkSpec, link: LinkInfo, cap: int) -> None:
        self.spec = spec
        self.channels = 0
        self.bytes_done = 0
        self.channel_seconds = 0.0
        self.last_at = 0.0
        self.done = False
        self.model_rate = max(channel_rate_bps(spec.bytes / spec.files, spec.params.pp, spec.params.p, link) / 8, 1.0)
        self.cap = cap

    def eta(self, channels: int) -> float:
        """Seconds left if the chunk had `channels` channels from now on."""
        if channels <= 0:
            return math.inf
        per_channel = (
            self.bytes_done / self.channel_seconds
            if self.channel_seconds > 0 and self.bytes_done > 0
            else self.model_rate
        )
        return (self.spec.bytes - self.bytes_done) / (per_channel * channels)

    def account(self, at: float) -> None:
        """Book the channel-seconds since the last change, before the channel count changes."""
        self.channel_seconds += self.channels * max(at - self.last_at, 0.0)
        self.last_at = at


class ChannelScheduler:
    def __init__(
        self,
        ctx: RunContext,
        specs: list[ChunkSpec],
        channels: int,
        cap: Callable[[ChunkSpec], int] | None = None,
    ) -> None:
        self.ctx = ctx
        cap_of = cap or (lambda spec: spec.files)
        self.states = {s.id: ChunkState(s, ctx.link, cap_of(s)) for s in specs}
        self.order = [s.id for s in specs]
        alloc = round_robin(channels, self.order, {cid: self.states[cid].cap for cid in self.order})
        self.initial = dict(alloc)
        self.spare = channels - sum(self.initial.values())  # more channels than the chunks can use
        self.moves: list[tuple[float, str, int]] = []  # (time, chunk id, channels after)
        self.session: Any = None

    @property
    def total_bytes_done(self) -> int:
        return sum(st.bytes_done for st in self.states.values())

    @property
    def in_use(self) -> int:
        return sum(st.channels for st in self.states.values() if not st.done)

    def run(self) -> None:
        self.session = session = self.ctx.executor.open_session(self.ctx.manifest)
        try:
            for cid in self.order:
                if self.initial[cid] > 0:
                    self._start(cid, self.initial[cid], 0.0)
            while any(st.channels > 0 and not st.done for st in self.states.values()):
                event = session.wait_any()
                st = self.states[event.chunk_id]
                st.account(event.at)
                st.bytes_done = event.bytes_done
                if not event.done:
                    self.on_progress(event)
                    continue
                st.done = True
                self.ctx.results.append(event.result)
                freed, st.channels = st.channels + self.spare, 0
                self.spare = self._reassign(freed, event.at)
                self.on_done(event)
        finally:
            session.close()

    # -- hooks for subclasses ---------------------------------------------------------------
    def on_progress(self, event: ChunkEvent) -> None:
        """A progress tick of one running chunk (its bytes are already booked)."""

    def on_done(self, event: ChunkEvent) -> None:
        """A chunk finished; its channels have been handed on."""

    # -- changing the pool ----------------------------------------------------------------
    def resize(self, total: int, at: float) -> int:
        """Grow or shrink the channels in use towards `total` (every running chunk keeps at
        least one); returns the total actually in use afterwards."""
        now = self.in_use + self.spare
        if total > now:
            self.spare = self._reassign(total - now + self.spare, at)
        elif total < now:
            self._release(now - total, at)
        return self.in_use + self.spare

    def _release(self, count: int, at: float) -> None:
        """Take `count` channels back: first unused spares, then one at a time from the chunk that
        would finish soonest with one channel fewer."""
        from_spare = min(count, self.spare)
        self.spare -= from_spare
        count -= from_spare
        cut = {cid: 0 for cid in self.order}
        for _ in range(count):
            open_ = [
                cid for cid in self.order if not self.states[cid].done and self.states[cid].channels - cut[cid] > 1
            ]
            if not open_:
                break
            target = min(open_, key=lambda c: self.states[c].eta(self.states[c].channels - cut[c] - 1))
            cut[target] += 1
        for cid, n in cut.items():
            if n:
                self._set(cid, self.states[cid].channels - n, at)

    def _start(self, cid: str, channels: int, at: float) -> None:
        st = self.states[cid]
        st.channels, st.last_at = channels, at
        self.session.start(st.spec.with_params(cc=channels), channels)
        self.moves.append((at, cid, channels))

    def _set(self, cid: str, channels: int, at: float) -> None:
        st = self.states[cid]
        st.account(at)
        st.channels = channels
        self.session.set_channels(cid, channels)
        self.moves.append((at, cid, channels))

    def _reassign(self, freed: int, at: float) -> int:
        """Give freed channels one by one to the longest-running chunk; returns channels nobody can use."""
        extra = {cid: 0 for cid in self.order}
        for _ in range(freed):
            open_ = [
                cid
                for cid in self.order
                if not self.states[cid].done and self.states[cid].channels + extra[cid] < self.states[cid].cap
            ]
            if not open_:
                break
            target = max(open_, key=lambda c: self.states[c].eta(self.states[c].channels + extra[c]))
            extra[target] += 1
        for cid in self.order:
            if not extra[cid]:
                continue
            st = self.states[cid]
            if st.channels == 0:
                self._start(cid, extra[cid], at)
            else:
                self._set(cid, st.channels + extra[cid], at)
        return freed - sum(extra.values())
