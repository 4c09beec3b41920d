"""Concurrency found the way TCP finds its window: double while it pays, then hold and watch.

`CCRamp` is fed the copy's cumulative payload bytes at the executor's progress ticks and says
when to change the number of channels. Each level is measured over one interval: a settle time
first (new connections pay their SSH handshake and TCP slow start, and that is not the level's
rate), then a measuring window. The rules, after paper 000 Alg. 2 (Yildirim, Arslan, Kim, Kosar,
Application-Level Optimization of Big Data Transfers Through Pipelining, Parallelism and
Concurrency, 2016), applied to concurrency inside one running transfer rather than per chunk:

* ramp: double while the interval's rate beats the best so far by more than `gain` (5 %);
  when it does not, go back to the best level and hold it; if already the first doubling
  did not pay, halve instead while that gains (the start was too high for this path);
  a doubling that gains, but less than half in proportion to the channels it added
  (`diminish`), holds where it is: the path is near its bottleneck, and doubling again
  would mostly add queueing and losses (slow start's exit, as HyStart takes it for TCP);
* hold: the first interval sets a reference; a later interval more than `drift` (25 %) away
  from it re-checks, as run-time re-tuning does (paper 003: Kola, Kosar, Livny, Run-time
  Adaptation of Grid Data Placement Jobs, 2003): the same ramp again from the level held;
  more channels are kept only if they beat what the held level carried before the drift (its
  reference), not the slow interval that set the re-check off: the interval after a slow one
  is usually faster whatever the level, and counting that as a gain moved the level up a
  doubling per copy on a noisy two-core host (4, 8, then 16 channels over four copies, for
  no more than 4 carried); fewer channels are compared with the slow interval, the level's
  rate as it is now;
* a change in what is moving (a chunk finished, its channels went elsewhere) restarts the
  interval under way, and in hold replaces the reference;
* a rise while holding is room to re-check only once it passes what this link was seen to
  carry (this copy's best interval, or an earlier copy's): a rise back to that rate is the
  level recovering from a slow interval, and re-checking up from it put twice the channels on
  a path that was already full (a 111 Mbit/s path: 102 Mbit/s at 4 channels, 21 at 8);
* near the end nothing changes: when less is left than one interval moves at the best rate
  seen, new channels would only be opening (and slow-starting) while the last files finish;
* channels opened ahead settle sooner: while ramping up, the caller may open the next
  doubling's connections during the current interval (`ahead`, `opened_ahead`); a level that
  adds no more channels than were opened ahead (or fewer channels, or channels moved between
  chunks) waits only `ready_settle_s`, the slow start, not the SSH handshake as well.

It is pure bookkeeping over (time, bytes) pairs, so the simulator and the engine drive it alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_GAIN = 0.05
DEFAULT_DRIFT = 0.25
DEFAULT_DIMINISH = 0.5
HEADROOM = 1.25  # a rate counts as fitting a channel's window with a quarter to spare


@dataclass
class Step:
    """One measured interval: the level, its rate, and what the ramp did next."""

    at: float
    cc: int
    rate_bps: float
    action: str


@dataclass
class CCRamp:
    start: int
    cap: int
    settle_s: float
    window_s: float
    floor: int = 2
    gain: float = DEFAULT_GAIN
    drift: float = DEFAULT_DRIFT
    ramping: bool = True  # False: start holding at `start` (a level learned on an earlier copy)
    known_rate: float = 0.0  # the best rate an earlier copy over this link reached (bit/s), if any
    ready_settle_s: float | None = None  # the settle time when no connection has to be opened first
    diminish: float = DEFAULT_DIMINISH
    # With floor 1: the most one channel carries (one window per RTT, bit/s). The ramp goes down to
    # one channel only while the best rate seen fits it; 0: no such bound.
    one_channel_bps: float = 0.0
    steps: list[Step] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.floor = max(1, min(self.floor, self.cap))
        self.cc = max(self.floor, min(self.start, self.cap))
        self.mode = "up" if self.ramping else "hold"
        self.best_cc, self.best_rate = self.cc, 0.0
        self.base_cc = self.cc
        self.reference: float | None = None
        self.peak_rate = 0.0  # the highest interval rate seen, for the tuning library
        self.settled_cc: int | None = None if self.ramping else self.cc  # where the last ramp stopped
        self._from: float = 0.0  # the current interval starts measuring here
        self._mark: tuple[float, int] | None = None
        self._seen = 0  # the total at the last tick
        self._since = 0  # the total when the level (or the mix) last changed
        self._ready = 0  # connections the caller opened ahead for the next level
        self._recheck_rate: float | None = None  # the held level's rate in the interval that set off a re-check

    @property
    def measuring_from(self) -> float:
        """When the level under way starts (or started) to be measured: after its settle time."""
        return self._mark[0] if self._mark is not None else self._from

    # -- opening ahead --------------------------------------------------------------------
    def ahead(self) -> int:
        """Channels the next doubling would add, worth opening now; 0 unless ramping up."""
        if self.mode != "up" or self.cc >= self.cap:
            return 0
        return min(self.cc * 2, self.cap) - self.cc

    def opened_ahead(self, n: int) -> None:
        """The caller started opening `n` connections for the next level."""
        self._ready = max(self._ready, n)

    def _settle_after(self, before: int) -> float:
        """The settle time of a change from `before` channels to the current level."""
        added = self.cc - before
        if self.ready_settle_s is not None and added <= self._ready:
            return self.ready_settle_s
        return self.settle_s

    # -- input ------------------------------------------------------------------------------
    def restart(self, at: float, new_channels: bool = False) -> None:
        """What moves changed under the ramp: measure afresh after a settle time. Channels
        handed from a finished chunk to another are open already; `new_channels`: they are
        being opened (the copy's start). A settle still under way is not cut short."""
        settle = self.settle_s if new_channels or self.ready_settle_s is None else self.ready_settle_s
        self._from, self._mark, self._since = max(self._from, at + settle), None, self._seen
        if self.mode == "hold":
            self.reference = None

    def observe(self, at: float, total_bytes: int, left_bytes: int | None = None) -> int | None:
        """One progress tick; returns the new channel count when it should change, else None.
        `left_bytes`: what the copy still has to move, when the caller knows it.

        A measuring window opens only after the settle time AND once bytes have moved since the
        change: a start-up (connections, the bundle helper) can outlast the settle time, and a
        window opened during it measured a stall, not the level."""
        seen, self._seen = self._seen, total_bytes
        if at < self._from or total_bytes <= self._since or seen <= self._since:
            return None
        if self._mark is None:
            self._mark = (at, total_bytes)
            return None
        t0, b0 = self._mark
        if at - t0 < self.window_s:
            return None
        if total_bytes <= b0:
            return None  # nothing was reported yet (progress comes per group or block): keep measuring
        before = self.cc
        changed = self.feed(at, (total_bytes - b0) * 8 / (at - t0), left_bytes)
        if changed is None:
            self._mark = (at, total_bytes)  # same level: the next interval starts now, no settle
            return None
        self._from, self._mark, self._since = at + self._settle_after(before), None, total_bytes
        self._ready = 0
        return changed

    def feed(self, at: float, rate_bps: float, left_bytes: int | None = None) -> int | None:
        """One interval's rate, measured by the caller; returns the new level if it changes."""
        before = self.cc
        action = self._decide(rate_bps, left_bytes)
        self.peak_rate = max(self.peak_rate, rate_bps)
        self.steps.append(Step(at, before, rate_bps, action))
        return self.cc if self.cc != before else None

    # -- the rules, each an early return --------------------------------------------------
    def _decide(self, rate: float, left_bytes: int | None) -> str:
        if left_bytes is not None and left_bytes * 8 < self.peak_rate * (self.settle_s + self.window_s):
            if self.mode == "up" and rate > (1 + self.gain) * self.best_rate:
                self.best_cc, self.best_rate = self.cc, rate  # what the next copy starts from
            return "near the end (less left than one interval moves): no change"
        if self.mode == "hold":
            return self._hold(rate)
        if self.mode == "up":
            return self._up(rate)
        return self._down(rate)

    def _up(self, rate: float) -> str:
        if rate > (1 + self.gain) * self.best_rate:
            added = self.cc / self.best_cc - 1  # the channels added, as a share of the best level's
            paid = rate / self.best_rate - 1 if self.best_rate > 0 else added
            self.best_cc, self.best_rate = self.cc, rate
            if paid < self.diminish * added:
                return self._settle("gained under half in proportion: near the bottleneck, hold")
            if self.cc < self.cap:
                self.cc = min(self.cc * 2, self.cap)
                return "gained: doubled"
            return self._settle("gained at the cap: hold")
        if self.best_cc == self.base_cc and self.base_cc > self._floor(rate):
            # the first doubling from where this ramp began did not pay: try fewer before settling
            self.mode = "down"
            if self._recheck_rate is not None:
                self.best_rate = self._recheck_rate  # fewer channels against the level as it is now
            self.cc = max(self.base_cc // 2, self._floor(rate))
            return "no gain up: trying fewer"
        return self._settle("no gain: back to the best level, hold")

    def _floor(self, rate: float) -> int:
        """The fewest channels worth trying now: one only while one channel could carry the best
        rate seen (with a quarter to spare); a lower rate at one channel is noise, not a gain."""
        if self.floor >= 2 or self.one_channel_bps <= 0:
            return self.floor
        seen = max(self.peak_rate, self.best_rate, rate)
        return 1 if HEADROOM * seen <= self.one_channel_bps else min(2, self.cap)

    def _down(self, rate: float) -> str:
        if rate > (1 + self.gain) * self.best_rate:
            self.best_cc, self.best_rate = self.cc, rate
            if self.cc > self._floor(rate):
                self.cc = max(self.cc // 2, self._floor(rate))
                return "gained with fewer: halved"
            return self._settle("gained at the floor: hold")
        return self._settle("no gain down: back to the best level, hold")

    def _hold(self, rate: float) -> str:
        if self.reference is None:
            self.reference = rate
            return "hold: reference set"
        change = rate / self.reference - 1 if self.reference > 0 else (0.0 if rate <= 0 else 1.0)
        if abs(change) <= self.drift:
            return "hold"
        if change > 0 and rate <= (1 + self.drift) * max(self.peak_rate, self.known_rate):
            self.reference = rate
            return f"rose {change:+.0%}, back to what this link carried: new reference"
        # drifted: re-check from here, up first; a doubling must beat the level's reference too
        self.base_cc = self.cc
        self.best_cc, self.best_rate = self.cc, max(rate, self.reference)
        self._recheck_rate = rate
        if self.cc < self.cap:
            self.mode = "up"
            self.cc = min(self.cc * 2, self.cap)
            return f"drifted {change:+.0%}: re-checking up"
        if self.cc > self._floor(rate):
            self.mode = "down"
            self.best_rate = rate  # fewer channels against the level as it is now
            self.cc = max(self.cc // 2, self._floor(rate))
            return f"drifted {change:+.0%}: re-checking down"
        self.reference = rate
        return "drifted at the only level: new reference"

    def _settle(self, action: str) -> str:
        self.cc = self.best_cc
        self._recheck_rate = None
        self.mode = "hold"
        self.reference = None  # measured afresh at the level held
        self.settled_cc = self.cc
        self.base_cc = self.cc
        return action

    @property
    def learned_cc(self) -> int:
        """The level worth starting from next time: the one held, or, when the copy ended while
        the ramp was still moving, the best level it measured."""
        return self.cc if self.mode == "hold" else self.best_cc
