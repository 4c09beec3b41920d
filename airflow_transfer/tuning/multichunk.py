"""`mc`: the Multi-Chunk algorithm of paper 000 section 4.2.

Paper 000 (Yildirim, Arslan, Kim, Kosar, Application-Level Optimization of Big
Data Transfers Through Pipelining, Parallelism and Concurrency, IEEE TCC 2016;
docs/papers.md) section 4.2 (after Arslan et al.,
Euro-Par'13): split the sorted dataset into Small, Middle, Large and Huge
chunks by file size relative to the BDP, set pipelining and parallelism per
chunk up front, hand out a fixed number of channels round robin over
{Huge, Small, Large, Middle}, and move the chunks at the same time, so the
slow small files travel alongside the large ones instead of after them. When
a chunk finishes, its channels go, one at a time, to the chunk with the
longest estimated time to completion (a chunk still waiting for its first
channel counts as never finishing, so it is served first).

Size classes (multiples of the BDP, parametrised by `MCThresholds`):

    Small   size <  0.1 BDP   needs deep pipelining; even eq. 4 at max_pp may not fill the pipe
    Middle  size <  1   BDP   eq. 4 pipelining fills the pipe
    Large   size < 20   BDP   one file fills the pipe; pipelining only hides control gaps
    Huge    size >= 20  BDP   long single files; parallelism pays when a window < BDP

Per chunk: pp from eq. 4 on the chunk's mean (models.pp_level); p = 1 for
Small and Middle (rule 4 of section 3), and for Large and Huge
min(ceil(mean / BDP), ceil(BDP / window)) capped at max_p - enough streams
that their windows cover the BDP, never more streams than BDPs in a file.
MC does not choose the channel count (section 4.2): it is an option. One
bound is added here (`useful_channels`): a Large or Huge chunk never holds more
channels than it takes to cover the BDP under the protocol's own window
(ceil(BDP / channel window), plus one to hide the gap between files), divided
by its p, when its mean file is at least `WINDOW_FILLING` (4) channel windows
long. Each such file fills a channel's window by itself, so more channels only
put more data in flight than the path and its queue hold: on wan50's `medium`
(20 x 50 MiB), 8 channels ran at 404 Mbit/s and 2, 3 or 4 at 416-417
(benchmarks/results/mc-channels.md). Files barely longer than a window (the
Large class of wan50's `mixed`, 3-4 MiB against a 2 MiB window) spend much of
their time opening and closing the window, and capped at 3 channels that chunk
ran alone at about 340 Mbit/s after the Middle chunk ended, while one chunk of
4 channels over the whole dataset ran at 457. Small and Middle chunks keep
every channel they are given: there, channels hide per-file round trips (8
channels 417, 3 channels 395 on `small`) - unless their files travel in
bundles (`bundle_channels`).

A chunk whose files all go in bundles (engine/bundle.py: many files to one
stream, one round trip per group) has no per-file round trips left to hide:
each of its channels is one long stream, window-bound like a Large chunk's,
so the window rule above applies to it whatever its files' size. Its channels
cost CPU besides: two helper processes each, and per-file work spread over
them, which only more cores can run. So a bundled chunk holds at most the
channels that cover the BDP plus one, or one per core of this host if that is
more. On a 2-core host an oracle sweep of fixed channel counts over 2000 x
64 KiB files (`tiny`) put the best at 2-3 channels on lan (1 ms, 1 Gbit/s;
within 1 %), 3 on wan50 (50 ms, 500 Mbit/s) and 3-4 on wan100, where the rule
gives 2, 3 and 4; 8 channels ran at 0.80x-0.89x of the best (docs/tuning.md,
"Bundled chunks").

The same holds for the whole copy on a path whose BDP one channel's window already covers
(a LAN: 1 ms at 1 Gbit/s is 125 KB against SSH's 2 MiB): when every chunk fills a channel by
itself - it travels in bundles, or it is a Large or Huge chunk whose mean file is at least
`WINDOW_FILLING` BDPs, so a file's own bytes dwarf the gap between files - no chunk needs
channels to fill the pipe or to hide round trips, and each channel only adds CPU (a
connection, its SSH stream, its helpers). MC then runs with `channel_budget` channels in all,
bundle_channels' count, instead of `channels`. An oracle sweep on lan's `mixed` (1000 files of
1 B - 4 MiB, 2 GiB) on this 2-core host: one chunk at 2 fixed channels 862-896 Mbit/s, 3 at
855-888, 4 at 780-845, 8 at 770-777, MC with 8 channels 708-785 (docs/tuning.md, "Channels on
a LAN"). A Small or Middle chunk sent file by file over SFTP keeps the budget at `channels`:
its channels hide per-file round trips. When bundles stop mid-copy, the budget is lifted with
the bundle caps.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..engine.params import TransferParams
from ..engine.result import ChunkResult
from .base import Algorithm, RunContext, check_int, plan_sizes
from .channels import ChannelScheduler, round_robin
from .chunks import ChunkSpec, make_spec
from .dataset import ManifestLike, SortedSizes
from .executor import ChunkEvent, bundled_up_to, supports_sessions
from .models import (
    DEFAULT_MAX_P,
    DEFAULT_MAX_PP,
    LinkInfo,
    pp_level,
    pp_param,
    streams_for_channel_window,
    tcp_window,
)

CLASSES = ("small", "middle", "large", "huge")
ROUND_ROBIN = ("huge", "small", "large", "middle")  # paper 000 section 4.2
DEFAULT_CHANNELS = 8
# A file this many channel windows long keeps its connection's window full for most of its
# transfer; a shorter one leaves it part-empty at its start and end, and more channels fill that.
WINDOW_FILLING = 4


@dataclass(frozen=True)
class MCThresholds:
    """Upper bounds of Small, Middle and Large as multiples of the BDP."""

    small: float = 0.1
    middle: float = 1.0
    large: float = 20.0

    def __post_init__(self) -> None:
        if not (0 < self.small <= self.middle <= self.large):
            raise ValueError(
                f"mc thresholds must satisfy 0 < small <= middle <= large (got {self.small}, "
                f"{self.middle}, {self.large}) in multiples of the BDP"
            )


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def bundle_channels(link: LinkInfo, cores: int) -> int:
    """The most channels a chunk moved in bundles can use (module docstring): those whose
    windows cover the BDP, plus one, or `cores` if that is more."""
    return max(streams_for_channel_window(link, cap=1 << 16) + 1, cores, 1)


def _big(spec: ChunkSpec) -> bool:
    """`spec` is MC's Large or Huge chunk."""
    return spec.id.rsplit(".", 1)[-1] in ("large", "huge")


def travels_in_bundles(spec: ChunkSpec, bundled_max: int) -> bool:
    """Every file of `spec` travels in bundles (files up to `bundled_max` bytes do; 0: none)."""
    return 0 < bundled_max and spec.max_size <= bundled_max


def useful_channels(spec: ChunkSpec, link: LinkInfo, bundled_max: int = 0, cores: int | None = None) -> int:
    """The most channels chunk `spec` can use (module docstring): its file count; for a
    chunk whose files are all at most `bundled_max` bytes (they travel in bundles),
    bundle_channels; and for Large and Huge chunks on a link with a protocol window,
    the connections that cover the BDP plus one, over p."""
    cap = spec.files
    if travels_in_bundles(spec, bundled_max):
        return min(cap, bundle_channels(link, host_cores() if cores is None else cores))
    window = link.channel_window_bytes
    if _big(spec) and window > 0 and link.measured and spec.bytes >= WINDOW_FILLING * window * spec.files:
        connections = streams_for_channel_window(link, cap=1 << 16) + 1
        cap = min(cap, max(1, math.ceil(connections / max(spec.params.p, 1))))
    return cap


def _fills_a_channel(spec: ChunkSpec, link: LinkInfo, bundled_max: int) -> bool:
    """One channel of `spec` is one long stream: its files travel in bundles, or it is a Large or
    Huge chunk whose mean file is at least WINDOW_FILLING BDPs."""
    if travels_in_bundles(spec, bundled_max):
        return True
    return _big(spec) and spec.bytes >= WINDOW_FILLING * link.bdp_bytes * spec.files


def channel_budget(
    specs: list[ChunkSpec], link: LinkInfo, channels: int, bundled_max: int = 0, cores: int | None = None
) -> int:
    """The channels MC runs with in all (module docstring): `channels`, or bundle_channels'
    count where one channel's window covers the measured BDP and every chunk fills a channel
    by itself."""
    if not specs or not link.measured or link.bdp_bytes <= 0:
        return channels
    if link.channel_window_bytes < link.bdp_bytes:  # no protocol window (0), or several channels fill the pipe
        return channels
    if not all(_fills_a_channel(spec, link, bundled_max) for spec in specs):
        return channels
    return max(1, min(channels, bundle_channels(link, host_cores() if cores is None else cores)))


class MultiChunk(Algorithm):
    name = "mc"

    def __init__(
        self,
        *,
        channels: int = DEFAULT_CHANNELS,
        thresholds: MCThresholds | dict | None = None,
        max_pp: int = DEFAULT_MAX_PP,
        max_p: int = DEFAULT_MAX_P,
    ) -> None:
        if isinstance(thresholds, dict):
            thresholds = MCThresholds(**thresholds)
        if thresholds is not None and not isinstance(thresholds, MCThresholds):
            raise ValueError(f"mc: thresholds must be MCThresholds or a dict (got {type(thresholds).__name__})")
        self.thresholds = thresholds or MCThresholds()
        self.opts = {
            "channels": check_int(self.name, "channels", channels),
            "thresholds": (self.thresholds.small, self.thresholds.middle, self.thresholds.large),
            "max_pp": check_int(self.name, "max_pp", max_pp),
            "max_p": check_int(self.name, "max_p", max_p),
        }
        self.last_moves: list[tuple[float, str, int]] = []  # (time, chunk id, channels), filled by run()
        self.notes: list[str] = []  # for the copy's summary, filled by run()

    # -- plan -----------------------------------------------------------------
    def classify(self, sizes: SortedSizes, link: LinkInfo) -> dict[str, tuple[int, int]]:
        """Row range of each non-empty class."""
        bdp, t, n = link.bdp_bytes, self.thresholds, len(sizes)
        cuts = [
            0,
            sizes.index_at_least(t.small * bdp),
            sizes.index_at_least(t.middle * bdp),
            sizes.index_at_least(t.large * bdp),
            n,
        ]
        return {name: (cuts[i], cuts[i + 1]) for i, name in enumerate(CLASSES) if cuts[i + 1] > cuts[i]}

    def chunk_params(self, name: str, mean: float, link: LinkInfo, channels: int) -> TransferParams:
        bdp = link.bdp_bytes
        pp = pp_param(pp_level(link.pipeline_bytes, mean, self.opts["max_pp"]))
        p = 1
        if name in ("large", "huge"):
            # TCP's window, not the SSH channel's: MC already spreads `channels` connections over the chunks, which
            # covers an SSH channel window's shortfall. p = 2 per channel on top of that opened 23
            # connections on wan50's `mixed` for no gain (264 Mbit/s in one run, against 271 with p = 1).
            p = min(math.ceil(mean / bdp), math.ceil(bdp / tcp_window(link)))
            p = min(max(p, 1), self.opts["max_p"])
        return TransferParams(pp=pp, p=p, cc=max(channels, 1), tcp_buffer=link.tcp_buffer_bytes)

    def _layout(self, sizes: SortedSizes, link: LinkInfo, bundled: int = 0) -> tuple[list[ChunkSpec], int]:
        """The chunks in start order, each with its first channel count, and the channels in all."""
        ranges = self.classify(sizes, link)
        order = [name for name in ROUND_ROBIN if name in ranges]
        specs = {}
        for name in order:
            lo, hi = ranges[name]
            specs[name] = make_spec(sizes, f"mc.{name}", lo, hi, self.chunk_params(name, sizes.mean(lo, hi), link, 1))
        budget = channel_budget(list(specs.values()), link, self.opts["channels"], bundled)
        alloc = round_robin(budget, order, {n: useful_channels(specs[n], link, bundled) for n in order})
        return [specs[n].with_params(cc=max(1, alloc[n])) for n in order], budget

    def plan(self, manifest: ManifestLike, link: LinkInfo) -> list[ChunkSpec]:
        """Chunks in start order; cc is each chunk's initial channel count (a chunk
        beyond the channel count shows 1 and waits for freed channels)."""
        return self._layout(plan_sizes(manifest, link), link)[0]

    # -- run ------------------------------------------------------------------
    def run(self, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> list[ChunkResult]:
        ctx = RunContext.open(manifest_sorted, link, executor)
        bundled = bundled_up_to(executor)
        specs, budget = self._layout(ctx.sizes, link, bundled)
        if not specs:
            return []
        channels = self.opts["channels"]
        self.notes = [n for n in (_bundle_note(s, link, bundled, channels) for s in specs) if n]
        if budget < channels:
            self.notes.append(_budget_note(link, budget, channels))
        if not supports_sessions(executor):
            # One chunk at a time with every channel: MC's parameters, not its overlap.
            for spec in specs:
                now = bundled_up_to(executor)  # bundles may have stopped since
                cap = min(useful_channels(spec, link, now), channel_budget(specs, link, channels, now))
                ctx.run_spec(spec.with_params(cc=min(channels, cap)))
            return ctx.results
        scheduler = _Scheduler(ctx, specs, channels, bundled, budget)
        scheduler.run()
        self.last_moves = scheduler.moves
        if scheduler.lifted:
            self.notes.append(scheduler.lifted)
        return ctx.results


class _Scheduler(ChannelScheduler):
    """MC's scheduler: caps from useful_channels, and the bundle rule's caps lifted as soon as
    the executor stops bundling (a server found to refuse the helper): its small files then go
    one by one over SFTP, where channels hide per-file round trips again."""

    def __init__(self, ctx: RunContext, specs: list[ChunkSpec], channels: int, bundled: int, budget: int) -> None:
        self.bundled = bundled
        self.channels = channels  # what the budget gives way to when bundles stop
        self.lifted = ""
        super().__init__(ctx, specs, budget, cap=lambda spec: useful_channels(spec, ctx.link, bundled))

    def on_progress(self, event: ChunkEvent) -> None:
        self._lift(event.at)

    def on_done(self, event: ChunkEvent) -> None:
        self._lift(event.at)

    def _lift(self, at: float) -> None:
        if not self.bundled or bundled_up_to(self.ctx.executor):
            return
        self.bundled = 0
        for st in self.states.values():
            st.cap = useful_channels(st.spec, self.ctx.link)
        self.lifted = f"mc: bundles stopped at {at:.1f} s; their chunks' channel caps lifted"
        if self.in_use + self.spare < self.channels:  # a budget was kept (channel_budget)
            self.resize(self.channels, at)  # hands the spare channels on too
        elif self.spare:
            self.spare = self._reassign(self.spare, at)


def _bundle_note(spec: ChunkSpec, link: LinkInfo, bundled: int, channels: int) -> str:
    if not travels_in_bundles(spec, bundled):
        return ""
    cores = host_cores()
    cap = bundle_channels(link, cores)
    if cap >= min(channels, spec.files):
        return ""
    return (
        f"mc: {spec.id} moves in bundles, one stream per channel: at most {cap} of {channels} channels "
        f"(windows to cover the BDP, plus one, or this host's {cores} cores)"
    )


def _budget_note(link: LinkInfo, budget: int, channels: int) -> str:
    return (
        f"mc: one channel's {link.channel_window_bytes >> 10} KiB window covers the BDP "
        f"({link.bdp_bytes >> 10} KiB) and every chunk fills a channel by itself: {budget} of {channels} "
        f"channels in all (the window's one plus one, or this host's {host_cores()} cores)"
    )
