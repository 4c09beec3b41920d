"""`adaptive-cc`: the Adaptive Concurrency algorithm of paper 001.

Paper 001 (Kim, Yildirim, Kosar, A Flexible Client for GridFTP-based Data
Scheduling; docs/papers.md) section 4.1: cut the file list into
chunks of a fixed number of files; move the first with concurrency 1 (here: the
connections the SSH channel window needs on a measured link,
`streams_for_channel_window`, see pcp.py); for each
next chunk raise concurrency while the measured throughput is higher than the
previous chunk's, lower it when it falls. It needs no model of the link, which
is why `auto` picks it when the link was not measured. Near the optimum it
oscillates by one (the "wavy behaviour" of paper 001 Fig. 2); `hold_band`
(default 0, the paper's rule) keeps concurrency unchanged while throughput
moves by less than that fraction.

Pipelining: `pp` (files in flight) if given; otherwise, on a measured link,
each chunk gets eq. 4 of paper 000 on its own mean size (chunks of a sorted
manifest differ in size); on an unmeasured link, GridFTP's default level 20.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from ..engine.params import TransferParams
from ..engine.result import ChunkResult
from .base import Algorithm, RunContext, check_fraction, check_int, default_min_chunk_bytes, plan_sizes
from .chunks import ChunkSpec, make_spec
from .dataset import ManifestLike, SortedSizes
from .models import DEFAULT_MAX_CC, DEFAULT_MAX_PP, LinkInfo, pp_level, pp_param, streams_for_channel_window

GRIDFTP_DEFAULT_LEVEL = 20  # paper 000 section 1: GridFTP's static default
TARGET_CHUNKS = 8  # enough steps for the ramp to find its peak


class AdaptiveCC(Algorithm):
    name = "adaptive-cc"

    def __init__(
        self,
        *,
        files_per_chunk: int | None = None,
        pp: int | None = None,
        p: int = 1,
        max_cc: int = DEFAULT_MAX_CC,
        max_pp: int = DEFAULT_MAX_PP,
        hold_band: float = 0.0,
        min_chunk_bytes: int | None = None,
    ) -> None:
        if files_per_chunk is not None:
            check_int(self.name, "files_per_chunk", files_per_chunk)
        if pp is not None:
            check_int(self.name, "pp", pp)
        if min_chunk_bytes is not None:
            check_int(self.name, "min_chunk_bytes", min_chunk_bytes)
        self.opts = {
            "files_per_chunk": files_per_chunk,
            "pp": pp,
            "p": check_int(self.name, "p", p),
            "max_cc": check_int(self.name, "max_cc", max_cc),
            "max_pp": check_int(self.name, "max_pp", max_pp),
            "hold_band": check_fraction(self.name, "hold_band", hold_band),
            "min_chunk_bytes": min_chunk_bytes,
        }

    def files_per_chunk(self, sizes: SortedSizes, link: LinkInfo) -> int:
        """Given, or: enough files for `min_chunk_bytes` of data, but at least TARGET_CHUNKS chunks."""
        if self.opts["files_per_chunk"]:
            return self.opts["files_per_chunk"]
        n = len(sizes)
        mean = sizes.mean(0, n)
        min_chunk = self.opts["min_chunk_bytes"] or default_min_chunk_bytes(link)
        by_bytes = math.ceil(min_chunk / mean) if mean > 0 else n
        return max(1, min(by_bytes, math.ceil(n / TARGET_CHUNKS)))

    def _pp(self, sizes: SortedSizes, link: LinkInfo, start: int, stop: int) -> int:
        if self.opts["pp"]:
            return self.opts["pp"]
        if not link.measured:
            return pp_param(min(GRIDFTP_DEFAULT_LEVEL, self.opts["max_pp"]))
        return pp_param(pp_level(link.pipeline_bytes, sizes.mean(start, stop), self.opts["max_pp"]))

    def _chunks(self, sizes: SortedSizes, link: LinkInfo) -> list[tuple[int, int]]:
        """Row ranges of the chunks, in order (none for an empty manifest)."""
        n = len(sizes)
        bounds = np.append(np.arange(0, n, self.files_per_chunk(sizes, link)), n)
        return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))

    def _params(self, sizes: SortedSizes, link: LinkInfo, lo: int, hi: int, cc: int) -> TransferParams:
        return TransferParams(
            pp=self._pp(sizes, link, lo, hi), p=self.opts["p"], cc=cc, tcp_buffer=link.tcp_buffer_bytes
        )

    def plan(self, manifest: ManifestLike, link: LinkInfo) -> list[ChunkSpec]:
        """The chunks with the concurrency they get if throughput keeps rising."""
        sizes = plan_sizes(manifest, link)
        first = streams_for_channel_window(link, self.opts["max_cc"])
        specs = []
        for i, (lo, hi) in enumerate(self._chunks(sizes, link)):
            cc = min(first + i, self.opts["max_cc"])
            specs.append(make_spec(sizes, f"acc.{i + 1:04d}", lo, hi, self._params(sizes, link, lo, hi, cc)))
        return specs

    def run(self, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> list[ChunkResult]:
        ctx = RunContext.open(manifest_sorted, link, executor)
        cc, prev = streams_for_channel_window(link, self.opts["max_cc"]), None
        for i, (lo, hi) in enumerate(self._chunks(ctx.sizes, link)):
            params = self._params(ctx.sizes, link, lo, hi, min(cc, hi - lo))
            thr = ctx.run(lo, hi, params, f"acc.{i + 1:04d}").throughput_mbit
            cc = self.next_cc(cc, thr, prev)
            prev = thr
        return ctx.results

    def next_cc(self, cc: int, thr: float, prev: float | None) -> int:
        """Paper 001 section 4.1, each case an early return."""
        if prev is None:
            return min(cc + 1, self.opts["max_cc"])  # first chunk: nothing to compare, go up
        if abs(thr - prev) <= self.opts["hold_band"] * prev:
            return cc  # inside the hold band: not a real change
        if thr > prev:
            return min(cc + 1, self.opts["max_cc"])  # throughput rose: more concurrency
        return max(cc - 1, 1)  # throughput fell: less concurrency
