"""`pcp`: Adaptive Pipelining-Concurrency-Parallelism, paper 000 Alg. 2.

Paper 000 (Yildirim, Arslan, Kim, Kosar, Application-Level Optimization of Big
Data Transfers Through Pipelining, Parallelism and Concurrency, IEEE TCC 2016)
section 4.1, also paper 001 (Kim, Yildirim, Kosar, A Flexible Client for
GridFTP-based Data Scheduling) section 4.2; see docs/papers.md. The sorted dataset is split at the BDP:

Set 1 (files < BDP): Recursive Chunk Division gives chunks with their own
pipelining level (eq. 4); the largest chunk is halved until there are
`min_chunks`; chunks then go one by one with concurrency 1, 2, 4, ... while
each throughput stays above 95 % of the previous one. The remaining chunks are
combined where their levels agree and moved at the best concurrency found.
No parallelism: rule 4 of section 3 (dividing small files hurts).

Set 2 (files >= BDP): pipelining level 2, then chunks of at least
`min_chunk_bytes` x cc bytes and more than cc files, ramping parallelism
first and then concurrency the same way; the rest goes in one chunk.

Choices where the paper leaves room:
* both ramps start at `streams_for_channel_window` (models.py), not at 1, when
  the protocol caps each connection with a window of its own (SSH's channel
  window): the paper's GridFTP streams had only TCP's, which grows to the BDP;
  an SSH connection's does not, so the probes below that count are known to be
  window-bound before they run (on wan50 the cc=1 probe spent 6 s at 165 Mbit/s);
* the concurrency ramp of Set 2 starts at 2, reusing the measurement at
  (best p, cc = 1) that ended the parallelism ramp instead of repeating it;
* `adapt=True` (what `auto` uses) moves each final "rest" in sub-chunks and
  re-probes concurrency when throughput drifts (retune.py, paper 003).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

import pyarrow as pa

from ..engine.params import TransferParams
from ..engine.result import ChunkResult
from .base import (
    DEFAULT_DROP,
    Algorithm,
    ProbeLimits,
    Ramp,
    RunContext,
    check_fraction,
    check_int,
    default_min_chunk_bytes,
    plan_sizes,
    probe_options,
)
from .chunks import ChunkSpec, make_spec
from .dataset import ManifestLike, SortedSizes
from .models import LinkInfo, pp_param, streams_for_channel_window
from .rcd import Piece, combine_same_level, divide_largest, recursive_chunk_division
from .retune import RestRunner, Segment

SET2_LEVEL = 2  # paper 000 section 4.1: "for the second set we set a static pipelining level of 2"


@dataclass(frozen=True)
class PCPPlan:
    """The data-only part of PCP, shared by plan() and run()."""

    set1_stop: int  # rows [0, set1_stop) are < BDP
    pieces: list[Piece]  # Set 1 after RCD and divide-largest
    min_chunk_bytes: int


class PCP(Algorithm):
    name = "pcp"

    def __init__(
        self,
        *,
        drop: float = DEFAULT_DROP,
        adapt: bool = False,
        adapt_pieces: int = 8,
        drift: float = 0.25,
        **limits: Unpack[ProbeLimits],
    ) -> None:
        self.opts = {
            **probe_options(self.name, limits),
            "drop": check_fraction(self.name, "drop", drop),
            "adapt": bool(adapt),
            "adapt_pieces": check_int(self.name, "adapt_pieces", adapt_pieces),
            "drift": check_fraction(self.name, "drift", drift, 0.0, 10.0),
        }
        self.last_retunes: list[tuple[str, int, int]] = []  # filled by run() when adapt is on

    # -- the data-only part -------------------------------------------------
    def divide(self, sizes: SortedSizes, link: LinkInfo) -> PCPPlan:
        bdp = link.bdp_bytes
        min_chunk = self.opts["min_chunk_bytes"] or default_min_chunk_bytes(link)
        set1_stop = sizes.index_at_least(bdp)
        pieces = recursive_chunk_division(sizes, 0, set1_stop, link.pipeline_bytes, min_chunk, self.opts["max_pp"])
        pieces = divide_largest(sizes, pieces, self.opts["min_chunks"])
        return PCPPlan(set1_stop, pieces, min_chunk)

    def _set2_sample_stop(self, sizes: SortedSizes, cursor: int, cc: int, min_chunk: int) -> int:
        """End row of the next Set-2 probe: > min_chunk x cc bytes and > cc files (Alg. 2)."""
        n = len(sizes)
        by_bytes = int(sizes.cum.searchsorted(sizes.cum[cursor] + min_chunk * cc, side="right"))
        stop = max(by_bytes, cursor + cc + 1)
        # A remainder too small to be a chunk of its own rides with this probe.
        if stop >= n or sizes.bytes(stop, n) < min_chunk or n - stop <= cc:
            return n
        return stop

    # -- plan -----------------------------------------------------------------
    def plan(self, manifest: ManifestLike, link: LinkInfo) -> list[ChunkSpec]:
        sizes = plan_sizes(manifest, link)
        if len(sizes) == 0:
            return []
        pcp = self.divide(sizes, link)
        specs: list[ChunkSpec] = []
        cc = streams_for_channel_window(link, self.opts["max_cc"])
        for i, piece in enumerate(pcp.pieces):
            params = TransferParams(pp=pp_param(piece.level), p=1, cc=cc, tcp_buffer=link.tcp_buffer_bytes)
            specs.append(make_spec(sizes, f"s1.{i + 1:03d}", piece.start, piece.stop, params))
            cc = min(cc * 2, self.opts["max_cc"])
        specs.extend(self._plan_set2(sizes, pcp, link))
        return specs

    def _plan_set2(self, sizes: SortedSizes, pcp: PCPPlan, link: LinkInfo) -> list[ChunkSpec]:
        n, cursor, p, cc = len(sizes), pcp.set1_stop, streams_for_channel_window(link, self.opts["max_p"]), 1
        specs: list[ChunkSpec] = []
        phase = "p"
        while cursor < n:
            stop = self._set2_sample_stop(sizes, cursor, cc, pcp.min_chunk_bytes)
            params = TransferParams(pp=pp_param(SET2_LEVEL), p=p, cc=cc, tcp_buffer=link.tcp_buffer_bytes)
            specs.append(make_spec(sizes, f"s2.{len(specs) + 1:03d}", cursor, stop, params))
            cursor = stop
            if phase == "p" and p < self.opts["max_p"]:
                p *= 2
                continue
            phase = "cc"
            if cc >= self.opts["max_cc"]:
                break
            cc = min(cc * 2, self.opts["max_cc"])
        if cursor < n:
            params = TransferParams(pp=pp_param(SET2_LEVEL), p=p, cc=cc, tcp_buffer=link.tcp_buffer_bytes)
            specs.append(make_spec(sizes, "s2.rest", cursor, n, params))
        return specs

    # -- run ------------------------------------------------------------------
    def run(self, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> list[ChunkResult]:
        ctx = RunContext.open(manifest_sorted, link, executor)
        if len(ctx.sizes) == 0:
            return []
        pcp = self.divide(ctx.sizes, link)
        self._run_set1(ctx, pcp)
        self._run_set2(ctx, pcp)
        return ctx.results

    def _run_set1(self, ctx: RunContext, pcp: PCPPlan) -> None:
        pieces = pcp.pieces
        ramp = Ramp(streams_for_channel_window(ctx.link, self.opts["max_cc"]), self.opts["max_cc"], self.opts["drop"])
        used = 0
        for i, piece in enumerate(pieces):
            if ramp.done:
                break
            cc = min(ramp.value, piece.stop - piece.start)
            params = TransferParams(pp=pp_param(piece.level), p=1, cc=cc, tcp_buffer=ctx.link.tcp_buffer_bytes)
            result = ctx.run(piece.start, piece.stop, params, f"s1.{i + 1:03d}")
            ramp.value = cc  # what actually ran, if the chunk had fewer files than the ramp asked
            ramp.feed(result.throughput_mbit)
            used = i + 1
        rest = combine_same_level(pieces[used:])
        segments = [
            Segment(
                p.start,
                p.stop,
                TransferParams(pp=pp_param(p.level), p=1, cc=1, tcp_buffer=ctx.link.tcp_buffer_bytes),
                f"s1.rest.L{p.level}",
            )
            for p in rest
        ]
        self._run_rest(ctx, segments, ramp.optimum)

    def _run_set2(self, ctx: RunContext, pcp: PCPPlan) -> None:
        sizes, n = ctx.sizes, len(ctx.sizes)
        cursor = pcp.set1_stop
        pp = pp_param(SET2_LEVEL)
        tcp = ctx.link.tcp_buffer_bytes
        p_ramp = Ramp(streams_for_channel_window(ctx.link, self.opts["max_p"]), self.opts["max_p"], self.opts["drop"])
        cc_ramp: Ramp | None = None
        k = 0
        while cursor < n:
            if not p_ramp.done:
                ramp, p, cc = p_ramp, p_ramp.value, 1
            else:
                if cc_ramp is None:
                    cc_ramp = Ramp(1, self.opts["max_cc"], self.opts["drop"])
                    cc_ramp.seed(1, p_ramp.best_thr)
                if cc_ramp.done:
                    break
                ramp, p, cc = cc_ramp, p_ramp.optimum, cc_ramp.value
            stop = self._set2_sample_stop(sizes, cursor, cc, pcp.min_chunk_bytes)
            k += 1
            result = ctx.run(cursor, stop, TransferParams(pp=pp, p=p, cc=cc, tcp_buffer=tcp), f"s2.{k:03d}")
            cursor = stop
            ramp.feed(result.throughput_mbit)
        if cursor < n:
            best_cc = cc_ramp.optimum if cc_ramp is not None else 1
            segment = Segment(cursor, n, TransferParams(pp=pp, p=p_ramp.optimum, cc=1, tcp_buffer=tcp), "s2.rest")
            self._run_rest(ctx, [segment], best_cc)

    def _run_rest(self, ctx: RunContext, segments: list[Segment], cc: int) -> None:
        if not segments:
            return
        if not self.opts["adapt"]:
            for seg in segments:
                ctx.run(
                    seg.start,
                    seg.stop,
                    TransferParams(
                        pp=seg.params.pp,
                        p=seg.params.p,
                        cc=min(cc, seg.stop - seg.start),
                        tcp_buffer=seg.params.tcp_buffer,
                    ),
                    seg.label,
                )
            return
        total = sum(ctx.sizes.bytes(s.start, s.stop) for s in segments)
        piece_bytes = max(total / self.opts["adapt_pieces"], self.divide_min_chunk(ctx))
        runner = RestRunner(ctx, cc, self.opts["max_cc"], piece_bytes, self.opts["drift"], self.opts["drop"])
        runner.run(segments)
        self.last_retunes = runner.retunes

    def divide_min_chunk(self, ctx: RunContext) -> int:
        return self.opts["min_chunk_bytes"] or default_min_chunk_bytes(ctx.link)
