"""`first-contact`: how `auto` moves data over a link nobody measured, and learns it as it goes.

Nothing is probed before the copy. What the copy does anyway tells enough to start:

1. **RTT from the first connection** (`executor.link_rtt()`: the kernel's minimum RTT of the
   SSH connection's TCP socket, the path's own delay, or the quickest of a few SFTP round trips
   when the connection runs in an OpenSSH client process). Without it (an executor that cannot
   say), 50 ms is assumed and the summary says so.
2. **Size classes and pipelining from the protocol window, not a BDP.** An SSH channel never
   has more than its window in flight, whatever the link, so a channel is full once its
   window is: the files are split into Multi-Chunk's classes (paper 000 section 4.2: Yildirim,
   Arslan, Kim, Kosar, Application-Level Optimization of Big Data Transfers Through Pipelining,
   Parallelism and Concurrency, 2016) with the window standing in for the BDP, and each class
   pipelines enough files to keep one window in flight for the control round trips a file
   costs (eq. 4 on the window). Parallelism stays 1: more channels serve large files as well
   as more streams would, and the ramp below counts channels.
3. **A starting concurrency from the RTT and the file mix**: the channels needed to carry an
   assumed rate (`assumed_mbit`, 400 Mbit/s: under what a campus or research network carries, so the ramp mostly
   goes up) given each class's share of the bytes and one channel's model rate for that
   class (models.channel_rate_bps), never fewer than 2. Classes without a channel yet wait
   for one, longest first, as in Multi-Chunk; no class runs alone at one channel.
4. **Concurrency doubled per measured interval while the rate gains more than 5 %**, then held
   at the best level and re-checked when the rate drifts (cc_ramp.py). The classes run at the
   same time over one pool of channels (channels.py); a finished class's channels go to the
   others, as Multi-Chunk's do. While the ramp goes up, the next doubling's connections are
   opened during the current interval, so a new level waits for its slow start only, not for
   its SSH handshakes too. Where every class is of large files, one channel may be all a link
   takes (one window per RTT fills it), and the ramp may come down to one; with small files
   it never goes below two.
5. **What was learned is returned** (`learned`): RTT, the best rate reached, and the level the
   ramp settled on. The copy keeps it in the tuning library, and the next copy over the link
   holds that level from the start (`LinkInfo.learned_cc`), re-checking it when the rate drifts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ..engine.params import TransferParams
from ..engine.result import ChunkResult
from .base import INITIAL_WINDOW, Algorithm, RunContext, check_fraction, check_int, plan_sizes
from .cc_ramp import DEFAULT_DRIFT, DEFAULT_GAIN, HEADROOM, CCRamp
from .channels import ChannelScheduler, round_robin
from .chunks import ChunkSpec, make_spec
from .dataset import ManifestLike, SortedSizes
from .executor import ChunkEvent, bundled_up_to, supports_sessions
from .models import DEFAULT_MAX_CC, DEFAULT_MAX_PP, DEFAULT_MAX_WINDOW, LinkInfo, channel_rate_bps, pp_level, pp_param
from .multichunk import ROUND_ROBIN, MultiChunk, bundle_channels, host_cores, travels_in_bundles

ASSUMED_MBIT = 400.0
FALLBACK_RTT_S = 0.05
MIN_CC = 2
SMALL_CLASSES = frozenset({"small", "middle"})
# Round trips before a new channel carries data: TCP's handshake (1), SSH key exchange (3-4),
# public-key auth (3-4), the SFTP channel and its init (4), the bundle helper's exec (2). Timed with
# paramiko on an emulated 139 ms path: 2.0 s, 14 round trips; counting 3 let the ramp measure new
# channels before they carried anything, and a doubling that would have paid read as no gain.
SETUP_RTTS = 12
# Round trips before a channel whose connection is already open carries data: the SFTP or bundle
# helper request and the first write's reply.
READY_RTTS = 3
MIN_SETTLE_S = 0.5
MIN_WINDOW_S = 2.0  # progress comes in blocks and socket buffers: a shorter window is mostly noise
WINDOW_RTTS = 8


def probe_rtt(executor: Any, link: LinkInfo) -> tuple[float | None, float | None, str]:
    """(RTT, minimum RTT, how it was found) from the executor, else from given figures."""
    probe = getattr(executor, "link_rtt", None)
    if callable(probe):
        got = probe()
        if got is not None:
            return got
    if link.measured:
        return link.rtt_s, link.rtt_s, f"the link figures ({link.source})"
    return None, None, f"no connection to measure: {FALLBACK_RTT_S * 1000:g} ms assumed"


def contact_link(rtt_s: float, link: LinkInfo) -> LinkInfo:
    """The link as first contact models it: the measured RTT, and a 'bandwidth' of one protocol
    window per RTT, so that the BDP the models divide by is the window."""
    window = link.channel_window_bytes or DEFAULT_MAX_WINDOW
    return LinkInfo(
        rtt_s=rtt_s,
        bandwidth_bps=window * 8 / rtt_s,
        tcp_buffer_bytes=link.tcp_buffer_bytes,
        file_rtts=link.file_rtts,
        channel_window_bytes=link.channel_window_bytes,
        source="first contact",
    )


def _slow_start_rtts(window_bytes: int) -> float:
    return max(1.0, math.log2(max(window_bytes / INITIAL_WINDOW, 2.0)))


def interval_seconds(rtt_s: float, window_bytes: int) -> tuple[float, float]:
    """(settle, window) of one ramp interval: a new channel's set-up and slow start to its window
    must pass before its rate counts, then the rate is averaged over a few RTTs."""
    settle = max(MIN_SETTLE_S, (SETUP_RTTS + _slow_start_rtts(window_bytes)) * rtt_s)
    return settle, max(MIN_WINDOW_S, WINDOW_RTTS * rtt_s)


def ready_settle_seconds(rtt_s: float, window_bytes: int) -> float:
    """The settle time of channels whose connections were opened ahead: slow start only."""
    return max(MIN_SETTLE_S, (READY_RTTS + _slow_start_rtts(window_bytes)) * rtt_s)


def windows_for(rate_bps: float, clink: LinkInfo) -> int:
    """Channels of large files that carry `rate_bps` (with a quarter to spare) at one protocol
    window per RTT each: a channel of large files is window-bound, so channels beyond these add
    data in flight that the path can only queue (and drop), not carry. 0: no rate known."""
    window = clink.channel_window_bytes or DEFAULT_MAX_WINDOW
    if rate_bps <= 0 or clink.rtt_s <= 0:
        return 0
    return max(1, math.ceil(HEADROOM * rate_bps * clink.rtt_s / (8 * window)))


def bundle_cap(specs: list[ChunkSpec], clink: LinkInfo, rate_bps: float, bundled_max: int, cores: int) -> int:
    """The most channels worth running while every class travels in bundles, 0 (no bound) when
    one does not: Multi-Chunk's rule for bundled chunks (multichunk.bundle_channels) on the rate
    seen instead of a measured BDP. A bundled channel is one window-bound stream, so channels
    beyond the windows that carry `rate_bps` (with a quarter to spare), plus one, or one per
    core if more, add helper processes at both ends and no rate; the bound rises as a higher
    rate is seen."""
    if not specs or not all(travels_in_bundles(s, bundled_max) for s in specs):
        return 0
    return _bundled_channels(clink, rate_bps, cores)


def _bundled_channels(clink: LinkInfo, rate_bps: float, cores: int) -> int:
    seen = LinkInfo(
        rtt_s=clink.rtt_s,
        bandwidth_bps=max(HEADROOM * rate_bps, 1.0),
        source="first contact",
        channel_window_bytes=clink.channel_window_bytes or DEFAULT_MAX_WINDOW,
    )
    return bundle_channels(seen, cores)


def opened_first(link: LinkInfo, executor: Any, largest_file: int, max_cc: int) -> int:
    """The data connections opened with the RTT probe's, before the classes are known: the level
    the library learned for this link, else the least a ramp starts at; where every file travels
    in bundles, no more than bundle_cap would let a learned level run (a level an earlier copy
    left above it would open connections nobody uses)."""
    opened = min(link.learned_cc if link.learned_cc > 0 else MIN_CC, max_cc)
    bundled = bundled_up_to(executor)
    if link.learned_cc > 0 and 0 < largest_file <= bundled:
        clink = contact_link(link.rtt_s, link)
        opened = min(opened, max(MIN_CC, _bundled_channels(clink, known_bps(link), host_cores())))
    return opened


def known_bps(link: LinkInfo) -> float:
    """The best rate an earlier first contact over this link reached; 0 when none did."""
    return link.bandwidth_bps if link.learned_cc > 0 else 0.0


def floor_cc(specs: list[ChunkSpec], cap: int) -> int:
    """The fewest channels the ramp may use: two while small files move (one channel leaves
    their per-file round trips unhidden), one when every class is of large files."""
    small = any(s.id.split(".")[-1] in SMALL_CLASSES for s in specs)
    return min(MIN_CC if small else 1, cap)


class FirstContact(Algorithm):
    name = "first-contact"

    def __init__(
        self,
        *,
        assumed_mbit: float = ASSUMED_MBIT,
        max_cc: int = DEFAULT_MAX_CC,
        max_pp: int = DEFAULT_MAX_PP,
        gain: float = DEFAULT_GAIN,
        drift: float = DEFAULT_DRIFT,
        start_cc: int | None = None,
    ) -> None:
        if start_cc is not None:
            check_int(self.name, "start_cc", start_cc)
        self.opts = {
            "assumed_mbit": check_fraction(self.name, "assumed_mbit", assumed_mbit, 1.0, 1e6),
            "max_cc": check_int(self.name, "max_cc", max_cc),
            "max_pp": check_int(self.name, "max_pp", max_pp),
            "gain": check_fraction(self.name, "gain", gain, 0.0, 1.0),
            "drift": check_fraction(self.name, "drift", drift, 0.0, 10.0),
            "start_cc": start_cc,
        }
        self._mc = MultiChunk(max_pp=max_pp, max_p=1)
        self.learned: dict[str, Any] | None = None
        self.notes: list[str] = []
        self.ramp: CCRamp | None = None

    # -- plan -----------------------------------------------------------------------------
    def classes(self, sizes: SortedSizes, clink: LinkInfo) -> list[ChunkSpec]:
        """One chunk per non-empty size class, in Multi-Chunk's start order, p = 1."""
        ranges = self._mc.classify(sizes, clink)
        specs = []
        for name in (n for n in ROUND_ROBIN if n in ranges):
            lo, hi = ranges[name]
            pp = pp_param(pp_level(clink.pipeline_bytes, sizes.mean(lo, hi), self.opts["max_pp"]))
            params = TransferParams(pp=pp, p=1, cc=1, tcp_buffer=clink.tcp_buffer_bytes)
            specs.append(make_spec(sizes, f"fc.{name}", lo, hi, params))
        return specs

    def start_cc(
        self,
        specs: list[ChunkSpec],
        clink: LinkInfo,
        learned_cc: int = 0,
        known_rate: float = 0.0,
        bundled_cap: int = 0,
    ) -> tuple[int, str]:
        """The first level of the ramp, and why. `known_rate`: the best rate (bit/s) an earlier
        copy over this link reached; `bundled_cap`: bundle_cap for that rate (0: no bound)."""
        cap = self.opts["max_cc"]
        floor = floor_cc(specs, cap)
        if self.opts["start_cc"]:
            return min(self.opts["start_cc"], cap), "given (start_cc)"
        if learned_cc > 0:
            cc = max(floor, min(learned_cc, cap))
            if 0 < bundled_cap < cc:
                return max(floor, bundled_cap), (
                    f"the last copy settled at cc {learned_cc}, but these files travel in bundles, one "
                    f"stream per channel: {bundled_cap} carry the {known_rate / 1e6:.0f} Mbit/s it reached "
                    "(its windows plus one, or one per core)"
                )
            # Only the one-channel case: where more than one window is needed, a level above the
            # windows' count still pays at the end, when fewer files than channels are left.
            windows = windows_for(known_rate, clink) if floor == 1 else 0
            if windows == 1 < cc:
                return max(floor, windows), (
                    f"the last copy settled at cc {learned_cc}, but {windows} window(s) per RTT carry the "
                    f"{known_rate / 1e6:.0f} Mbit/s it reached: more channels of large files only queue at the router"
                )
            return cc, "where the last copy over this link settled"
        assumed = self.opts["assumed_mbit"] * 1e6
        total = sum(s.bytes for s in specs) or 1
        need = 0.0
        for s in specs:
            rate = channel_rate_bps(s.bytes / s.files, s.params.pp, 1, clink, control_rtts=clink.file_rtts)
            need += assumed * (s.bytes / total) / max(rate, 1.0)
        cc = max(MIN_CC, math.ceil(need))
        why = (
            f"channels for an assumed {self.opts['assumed_mbit']:g} Mbit/s at one "
            f"{(clink.channel_window_bytes or DEFAULT_MAX_WINDOW) >> 10} KiB window per channel and RTT over this file mix"
        )
        return min(cc, cap), why

    def plan(self, manifest: ManifestLike, link: LinkInfo) -> list[ChunkSpec]:
        sizes = plan_sizes(manifest, link)
        clink = contact_link(link.rtt_s if link.measured else FALLBACK_RTT_S, link)
        specs = self.classes(sizes, clink)
        cc, _ = self.start_cc(specs, clink, link.learned_cc, known_bps(link))
        alloc = round_robin(cc, [s.id for s in specs], {s.id: s.files for s in specs})
        return [s.with_params(cc=max(1, alloc[s.id])) for s in specs]

    # -- run ------------------------------------------------------------------------------
    def run(self, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> list[ChunkResult]:
        ctx = RunContext.open(manifest_sorted, link, executor)
        if len(ctx.sizes) == 0:
            return []
        warm = getattr(executor, "warm", None)
        # The first level's handshakes overlap the RTT probe's (+1: the verifier's connection).
        opened = opened_first(link, executor, int(ctx.sizes.sizes[-1]), self.opts["max_cc"])
        if callable(warm):
            warm(opened + 1)
        rtt, min_rtt, how = probe_rtt(executor, link)
        # The model's round trips are the path's: its minimum RTT. The smoothed one also holds
        # the hosts' delays (delayed ACKs, a peer busy starting up): on loopback it read 3-12 ms
        # against 0.01-0.02 ms minimum, and sized 1 KiB files for 9-32 channels on two cores
        # (docs/tuning.md, "First contact").
        clink = contact_link(min_rtt or rtt or FALLBACK_RTT_S, link)
        specs = self.classes(ctx.sizes, clink)
        bounds = _BundleBound(specs, clink, executor, known_bps(link))
        cc, why = self.start_cc(specs, clink, link.learned_cc, known_bps(link), bounds.cap(0.0))
        settle, window = interval_seconds(clink.rtt_s, clink.bdp_bytes)
        self.ramp = ramp = CCRamp(
            start=cc,
            cap=bounds.ramp_cap(cc, self.opts["max_cc"], 0.0),
            settle_s=settle,
            window_s=window,
            ready_settle_s=ready_settle_seconds(clink.rtt_s, clink.bdp_bytes) if callable(warm) else None,
            floor=floor_cc(specs, self.opts["max_cc"]),
            one_channel_bps=clink.bandwidth_bps,  # one window per RTT
            gain=self.opts["gain"],
            drift=self.opts["drift"],
            # a level learned over this link is held, and re-checked only when the rate drifts from it
            ramping=not (link.learned_cc > 0 and not self.opts["start_cc"]),
            known_rate=known_bps(link),
        )
        ramp.restart(0.0, new_channels=not (callable(warm) and ramp.cc <= opened))
        rtt_text = f"{rtt * 1000:.3g} ms (min {min_rtt * 1000:.3g})" if rtt and min_rtt else "unknown"
        self.notes = [
            f"first contact: RTT {rtt_text} from {how}",
            f"first contact: start at cc {ramp.cc} ({why}); classes "
            + ", ".join(f"{s.id.split('.')[-1]} {s.files} files pp {s.params.pp}" for s in specs),
        ]
        if supports_sessions(executor):
            _RampScheduler(ctx, specs, ramp, lambda rate: bounds.ramp_cap(cc, self.opts["max_cc"], rate)).run()
        else:
            for spec in specs:  # one class after another, the ramp stepping once per class
                result = ctx.run_spec(spec.with_params(cc=min(ramp.cc, spec.files)))
                ramp.feed(sum(r.seconds for r in ctx.results), result.throughput_mbit * 1e6)
        self.notes.append(self._ramp_note(ramp))
        if not ramp.peak_rate and ctx.results:
            # too short for one interval: the whole copy's average is the only rate there is
            seconds = max(r.seconds for r in ctx.results)
            ramp.peak_rate = sum(r.bytes_moved for r in ctx.results) * 8 / seconds if seconds > 0 else 0.0
        self.learned = {
            "rtt_ms": round(rtt * 1000, 3) if rtt else None,
            "min_rtt_ms": round(min_rtt * 1000, 3) if min_rtt else None,
            "rtt_from": how,
            "rate_mbit": round(ramp.peak_rate / 1e6, 2),
            "cc": ramp.learned_cc,
            "pp_level": max((s.params.pp for s in specs), default=1) - 1,
            "steps": [(round(s.at, 2), s.cc, round(s.rate_bps / 1e6, 1), s.action) for s in ramp.steps],
        }
        return ctx.results

    @staticmethod
    def _ramp_note(ramp: CCRamp) -> str:
        if not ramp.steps:
            return f"first contact: too short to measure an interval; stayed at cc {ramp.cc}"
        path = " -> ".join(f"cc {s.cc} {s.rate_bps / 1e6:.0f} Mbit/s" for s in ramp.steps[:8])
        more = f" (+{len(ramp.steps) - 8} intervals)" if len(ramp.steps) > 8 else ""
        end = f"held cc {ramp.cc}" if ramp.mode == "hold" else f"still ramping at cc {ramp.cc} when the copy ended"
        return f"first contact: ramp {path}{more}; {end}, best {ramp.peak_rate / 1e6:.0f} Mbit/s"


class _BundleBound:
    """bundle_cap for one copy: its classes, the executor (which may stop bundling mid-copy: the
    server refused the helper, and files then go one by one over SFTP, where more channels hide
    per-file round trips again) and the rate an earlier copy over the link reached."""

    def __init__(self, specs: list[ChunkSpec], clink: LinkInfo, executor: Any, known_rate: float) -> None:
        self.specs, self.clink, self.executor, self.known_rate = specs, clink, executor, known_rate
        self.cores = host_cores()

    def cap(self, rate_bps: float) -> int:
        bundled = bundled_up_to(self.executor)
        return bundle_cap(self.specs, self.clink, max(rate_bps, self.known_rate), bundled, self.cores)

    def ramp_cap(self, start: int, max_cc: int, rate_bps: float) -> int:
        """The ramp's ceiling: `max_cc`, or the bundle bound (never below the level it started at)."""
        bound = self.cap(rate_bps)
        return min(max_cc, max(start, bound)) if bound else max_cc


class _RampScheduler(ChannelScheduler):
    """The classes on one pool of channels whose size the ramp sets; `ceiling(rate)`: the most
    channels the ramp may use once `rate` (bit/s, the best interval) was seen."""

    def __init__(
        self, ctx: RunContext, specs: list[ChunkSpec], ramp: CCRamp, ceiling: Callable[[float], int] | None = None
    ) -> None:
        super().__init__(ctx, specs, ramp.cc)
        self.ramp = ramp
        self._ceiling = ceiling
        self._tick_at: float | None = None
        self._tick_total = 0
        self._bytes = sum(s.bytes for s in specs)
        self._ahead_done = False  # this level's next doubling was opened ahead (reset on each change)
        self._warm = getattr(ctx.executor, "warm", None)

    def _open_ahead(self, at: float) -> None:
        """Once per level while ramping up, after its own channels have taken their connections:
        start opening the ones the next doubling will want, unless the copy will be over by then."""
        if not callable(self._warm) or self._ahead_done or self.ramp.ahead() <= 0 or not self._outlasts_level(at):
            return
        self._ahead_done = True
        n = min(self.ramp.ahead(), max(0, self._cap_total() - self.ramp.cc))
        if n > 0:
            self._warm(n)
            self.ramp.opened_ahead(n)

    def _outlasts_level(self, at: float) -> bool:
        """Whether the copy, at its average rate so far, will still have a whole interval to run
        once the level under way has been measured: the ramp doubles only then (less left, and
        it is near the end: cc_ramp.py), so only then are the next level's connections used.
        Each one opened for nothing costs a handshake on both ends (on wan50 `tiny`, three were
        opened ahead for a doubling the 4 s copy never reached). Nothing moved yet: not known,
        so not yet."""
        done = self.total_bytes_done
        if done <= 0 or at <= 0:
            return False
        left_s = (self._bytes - done) * at / done
        measured_at = max(self.ramp.measuring_from, at) + self.ramp.window_s
        return at + left_s > measured_at + self.ramp.settle_s + self.ramp.window_s

    def _cap_total(self) -> int:
        """Channels the unfinished chunks could use at most (one per file)."""
        return sum(st.cap for st in self.states.values() if not st.done)

    def on_progress(self, event: ChunkEvent) -> None:
        if self._ceiling is not None:
            # a higher rate seen raises the bundle bound; bundles stopping lifts it
            self.ramp.cap = max(self.ramp.floor, self._ceiling(self.ramp.peak_rate))
        self._open_ahead(event.at)
        # A tick reports every running chunk at the same time: feed the ramp the previous tick's
        # total once this one begins, so the total it sees is complete.
        if self._tick_at is not None and event.at > self._tick_at:
            wanted = self.ramp.observe(self._tick_at, self._tick_total, self._bytes - self._tick_total)
            if wanted is not None:
                self.resize(wanted, event.at)
                self._ahead_done = False
        self._tick_at = event.at
        self._tick_total = self.total_bytes_done

    def on_done(self, event: ChunkEvent) -> None:
        self.ramp.restart(event.at)
        self._tick_at = None
