"""The Algorithm base class, shared options, and the exponential ramp of paper 000.

Every algorithm offers two calls:

    plan(manifest, link) -> list[ChunkSpec]      the up-front plan, no bytes moved
    run(manifest_sorted, link, executor) -> list[ChunkResult]   in execution order

`manifest` is the Arrow manifest (or an array of sizes) sorted by size
(`sort_manifest`); chunk rows refer to that order. For the adaptive
algorithms the plan is what happens if every probe keeps improving; `run`
decides from measured throughput and may stop a ramp earlier, combine the
remaining chunks, or re-split them.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict

import numpy as np
import pyarrow as pa

from ..engine.params import TransferParams
from ..engine.result import ChunkResult
from .chunks import ChunkSpec, make_spec
from .dataset import ManifestLike, SortedSizes
from .executor import check_executor
from .models import DEFAULT_MAX_CC, DEFAULT_MAX_P, DEFAULT_MAX_PP, ETHERNET_MSS, LinkInfo

INITIAL_WINDOW = 10 * ETHERNET_MSS  # Linux's initial congestion window (RFC 6928)

MIB = 1024 * 1024
# Paper 000 section 2.1.3: a chunk needs enough data to get through slow start
# before its pipelining level shows (the paper sizes it with a sampling model,
# its ref. [25]). Slow start from the initial window IW to one BDP takes about
# log2(BDP / IW) RTTs; a chunk of K BDPs takes K RTTs at full rate, so
# K = 4 x log2(BDP / IW) keeps the start-up near a fifth of the chunk's time.
MIN_CHUNK_SLOW_STARTS = 4
MIN_CHUNK_FLOOR = 16 * MIB
DEFAULT_DROP = 0.05  # paper 000 section 4.1.2: stop a ramp on a > 5 % drop


def default_min_chunk_bytes(link: LinkInfo) -> int:
    bdp = link.bdp_bytes
    slow_start_rtts = max(1.0, math.log2(max(bdp / INITIAL_WINDOW, 2.0)))
    return int(max(MIN_CHUNK_FLOOR, math.ceil(MIN_CHUNK_SLOW_STARTS * slow_start_rtts) * bdp))


def check_int(algorithm: str, name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{algorithm}: option {name} must be a whole number >= {minimum} (got {value!r})")
    return int(value)


def check_fraction(algorithm: str, name: str, value: Any, low: float = 0.0, high: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value < high):
        raise ValueError(f"{algorithm}: option {name} must be a number in [{low}, {high}) (got {value!r})")
    return float(value)


DEFAULT_MIN_CHUNKS = 5  # paper 001 section 5 ends up with 5 chunks for 5000 x 1 MB


class ProbeLimits(TypedDict, total=False):
    """The options of the algorithms that probe (pcp, and auto for it): probe chunk size and
    count, and the caps of the three knobs."""

    min_chunk_bytes: int | None  # None: from the link (default_min_chunk_bytes)
    min_chunks: int
    max_pp: int
    max_p: int
    max_cc: int


def probe_options(algorithm: str, limits: ProbeLimits) -> dict[str, Any]:
    """ProbeLimits with their defaults, each checked, in that order."""
    min_chunk_bytes = limits.get("min_chunk_bytes")
    if min_chunk_bytes is not None:
        check_int(algorithm, "min_chunk_bytes", min_chunk_bytes)
    return {
        "min_chunk_bytes": min_chunk_bytes,
        "min_chunks": check_int(algorithm, "min_chunks", limits.get("min_chunks", DEFAULT_MIN_CHUNKS)),
        "max_pp": check_int(algorithm, "max_pp", limits.get("max_pp", DEFAULT_MAX_PP)),
        "max_p": check_int(algorithm, "max_p", limits.get("max_p", DEFAULT_MAX_P)),
        "max_cc": check_int(algorithm, "max_cc", limits.get("max_cc", DEFAULT_MAX_CC)),
    }


def check_link(link: Any) -> LinkInfo:
    if not isinstance(link, LinkInfo):
        raise ValueError(
            f"link must be a LinkInfo (got {type(link).__name__}); "
            "build one with LinkInfo(rtt_s=..., bandwidth_bps=...)"
        )
    return link


def plan_sizes(manifest: ManifestLike, link: Any) -> SortedSizes:
    """What a plan works on: the manifest's sorted sizes, once the link is checked."""
    check_link(link)
    return SortedSizes.of(manifest)


class Algorithm(ABC):
    """A strategy: plans chunks and, given an executor, runs and adapts them."""

    name: ClassVar[str]

    @abstractmethod
    def plan(self, manifest: ManifestLike, link: LinkInfo) -> list[ChunkSpec]: ...

    @abstractmethod
    def run(self, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> list[ChunkResult]: ...

    opts: dict

    def options(self) -> dict:
        """The effective options (after defaults), for logs and `plan --json`."""
        return dict(self.opts)


@dataclass
class RunContext:
    """Bookkeeping shared by a run: the manifest, its sizes, the executor, the results."""

    manifest: pa.Table
    sizes: SortedSizes
    executor: Any
    link: LinkInfo
    results: list[ChunkResult] = field(default_factory=list)

    @classmethod
    def open(cls, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> RunContext:
        check_executor(executor)
        check_link(link)
        if not isinstance(manifest_sorted, pa.Table):
            raise ValueError(
                f"run() needs the sorted manifest as an Arrow table (got {type(manifest_sorted).__name__});"
                " the executor reads paths from it"
            )
        return cls(manifest_sorted, SortedSizes.of(manifest_sorted), executor, link)

    def run(self, start: int, stop: int, params: TransferParams, chunk_id: str) -> ChunkResult:
        result = self.executor.run_chunk(self.manifest, int(start), int(stop), params, chunk_id)
        self.results.append(result)
        return result

    def run_spec(self, spec: ChunkSpec) -> ChunkResult:
        return self.run(spec.start, spec.stop, spec.params, spec.id)

    def spec(self, chunk_id: str, start: int, stop: int, params: TransferParams) -> ChunkSpec:
        return make_spec(self.sizes, chunk_id, start, stop, params)


class StaticAlgorithm(Algorithm):
    """An algorithm whose run is its plan: the chunks and their parameters follow from the
    sizes alone, and nothing measured during the run changes them."""

    @abstractmethod
    def _specs(self, sizes: SortedSizes) -> list[ChunkSpec]: ...

    def plan(self, manifest: ManifestLike, link: LinkInfo) -> list[ChunkSpec]:
        return self._specs(plan_sizes(manifest, link))

    def run(self, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> list[ChunkResult]:
        ctx = RunContext.open(manifest_sorted, link, executor)
        for spec in self._specs(ctx.sizes):
            ctx.run_spec(spec)
        return ctx.results


class Ramp:
    """Exponential ramp of one knob with the 5 % drop rule (paper 000 Alg. 2).

    Feed it one measurement per chunk; `value` is the level to use next.
    The ramp stops at the first throughput <= (1 - drop) x the previous one,
    or at `cap`. The optimum is the best-measured level: the paper takes the
    level before the drop, which is the same thing unless throughput wandered
    within the 5 % band first.
    """

    def __init__(self, start: int, cap: int, drop: float = DEFAULT_DROP) -> None:
        self.value = max(1, min(start, cap))
        self.cap = cap
        self.drop = drop
        self.done = False
        self.best_value = self.value
        self.best_thr = -math.inf
        self._prev_thr: float | None = None
        self.history: list[tuple[int, float]] = []

    def seed(self, value: int, throughput: float) -> None:
        """Count a measurement taken elsewhere (e.g. the last step of another ramp)."""
        self.history.append((value, throughput))
        self.best_value, self.best_thr = value, throughput
        self._prev_thr = throughput
        self.value = min(value * 2, self.cap)
        if self.value == value:
            self.done = True

    def feed(self, throughput: float) -> None:
        if self.done:
            return
        tried = self.value
        self.history.append((tried, throughput))
        if throughput > self.best_thr:
            self.best_value, self.best_thr = tried, throughput
        dropped = self._prev_thr is not None and throughput <= (1 - self.drop) * self._prev_thr
        self._prev_thr = throughput
        if dropped or tried >= self.cap:
            self.done = True
            self.value = self.best_value
            return
        self.value = min(tried * 2, self.cap)

    @property
    def optimum(self) -> int:
        return self.best_value
