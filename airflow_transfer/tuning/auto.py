"""`auto`: pick an algorithm from the dataset and the link, keep adapting while it runs.

The decision (`Auto.decide`) is a list of early returns, each with its reason:

1. no files                             -> fixed        nothing to move
2. link figures not measured            -> adaptive-cc  no trustworthy BDP, so no model;
                                                        paper 001's model-free ramp
3. too little data to probe             -> mc           total < min_chunks x min_chunk_bytes, or
                                                        the whole dataset takes less than
                                                        min_chunks x probe_seconds / probe_share
                                                        at the link's rate: probes would be most of
                                                        the transfer, so set pp/p per size class
                                                        from the models
4. mixed dataset                        -> mc           Set 1 (< BDP) and Set 2 (>= BDP) would each
                                                        take >= mixed_share of the transfer time
                                                        (model estimate on one channel, so both
                                                        file count and bytes count): MC moves small
                                                        files alongside large ones (section 4.2)
5. otherwise                            -> pcp          homogeneous enough to converge adaptively
                                                        (paper 000 section 4.1)

While it runs: PCP is started with `adapt=True`, so its final "rest" phases go
in sub-chunks whose throughput is watched; a change beyond `drift` re-probes
concurrency (retune.py, after paper 003 section 1: parameters optimal at
submission may not be at execution). first-contact keeps re-checking its
concurrency when the rate drifts, and MC re-balances channels whenever a chunk finishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

import pyarrow as pa

from ..engine.result import ChunkResult
from .base import (
    Algorithm,
    ProbeLimits,
    check_fraction,
    check_int,
    check_link,
    default_min_chunk_bytes,
    probe_options,
)
from .chunks import ChunkSpec
from .dataset import ManifestLike, SortedSizes
from .first_contact import FirstContact
from .fixed import Fixed
from .models import LinkInfo, channel_rate_bps, pp_level, pp_param
from .multichunk import DEFAULT_CHANNELS, MultiChunk
from .pcp import PCP

# A probe chunk shows its setting only after connection setup and the window's ramp: on
# wan50 the first PCP probe of `small` (cc 2) ran 6.2 s at 170 Mbit/s, overshoot probes 6-10 s
# (benchmarks/results/tuning-diagnosis). Probing pays back only when the probes are a minor
# part of the transfer; on the 1-2 GiB datasets of the wan50 benchmark MC's static plan beat
# adaptive PCP by 18 % (small) and 31 % (medium) in one run (docs/tuning.md, "The wan50 targets").
DEFAULT_PROBE_SECONDS = 5.0
DEFAULT_PROBE_SHARE = 0.5


@dataclass(frozen=True)
class Decision:
    algorithm: str
    reason: str


class Auto(Algorithm):
    name = "auto"

    def __init__(
        self,
        *,
        channels: int = DEFAULT_CHANNELS,
        mixed_share: float = 0.1,
        drift: float = 0.25,
        probe_seconds: float = DEFAULT_PROBE_SECONDS,
        probe_share: float = DEFAULT_PROBE_SHARE,
        adapt: bool = True,
        **limits: Unpack[ProbeLimits],
    ) -> None:
        self.opts = {
            **probe_options(self.name, limits),
            "channels": check_int(self.name, "channels", channels),
            "mixed_share": check_fraction(self.name, "mixed_share", mixed_share, 0.0, 0.5),
            "drift": check_fraction(self.name, "drift", drift, 0.0, 10.0),
            "probe_seconds": check_fraction(self.name, "probe_seconds", probe_seconds, 0.0, 3600.0),
            "probe_share": check_fraction(self.name, "probe_share", probe_share, 0.01, 1.0),
            "adapt": bool(adapt),
        }
        self.last_decision: Decision | None = None
        self.last_algorithm: Algorithm | None = None

    def decide(self, manifest: ManifestLike | SortedSizes, link: LinkInfo) -> Decision:
        check_link(link)
        sizes = manifest if isinstance(manifest, SortedSizes) else SortedSizes.of(manifest)
        n, total = len(sizes), sizes.total
        if n == 0:
            return Decision("fixed", "empty dataset: nothing to move")
        if not link.measured:
            return Decision(
                "first-contact",
                "link not measured: RTT from the first connection, concurrency doubled while the rate gains",
            )
        if link.learned_cc > 0:
            return Decision(
                "first-contact",
                f"the tuning library knows this link from a first contact: hold cc {link.learned_cc}, re-checked on drift",
            )
        min_chunk = self.opts["min_chunk_bytes"] or default_min_chunk_bytes(link)
        if total < self.opts["min_chunks"] * min_chunk:
            return Decision(
                "mc",
                f"{total} bytes is less than {self.opts['min_chunks']} probe chunks of "
                f"{min_chunk} bytes: static per-class parameters from the models",
            )
        link_s = total * 8 / link.bandwidth_bps
        probing_s = self.opts["min_chunks"] * self.opts["probe_seconds"]
        if link_s < probing_s / self.opts["probe_share"]:
            return Decision(
                "mc",
                f"the dataset takes {link_s:.0f} s at the link's rate, and {self.opts['min_chunks']} "
                f"probes of {self.opts['probe_seconds']:g} s would be more than "
                f"{self.opts['probe_share']:.0%} of it: static per-class parameters from the models",
            )
        set1 = sizes.index_at_least(link.bdp_bytes)
        share = self.opts["mixed_share"]
        t1, t2 = self._estimated_seconds(sizes, set1, link)
        if min(t1, t2) >= share * (t1 + t2):
            return Decision(
                "mc",
                f"mixed dataset: files below the BDP ({set1} of {n}) and above it would take "
                f"{t1 / (t1 + t2):.0%} and {t2 / (t1 + t2):.0%} of the time on one channel",
            )
        return Decision("pcp", "homogeneous dataset on a measured link: adaptive PCP, re-tuned at run time")

    def _estimated_seconds(self, sizes: SortedSizes, set1: int, link: LinkInfo) -> tuple[float, float]:
        """Model time of Set 1 and Set 2 on one channel, each at its paper-000 pipelining:
        file count and bytes both count, as they do on the wire."""
        n = len(sizes)
        out = []
        for lo, hi, level in ((0, set1, None), (set1, n, 2)):
            if hi <= lo:
                out.append(0.0)
                continue
            mean = sizes.mean(lo, hi)
            pp = pp_param(level if level else pp_level(link.pipeline_bytes, mean, self.opts["max_pp"]))
            rate = channel_rate_bps(mean, pp, 1, link)
            out.append(sizes.bytes(lo, hi) * 8 / rate if rate > 0 else (hi - lo) * link.rtt_s)
        return out[0], out[1]

    def delegate(self, decision: Decision) -> Algorithm:
        o = self.opts
        if decision.algorithm == "fixed":
            return Fixed()
        if decision.algorithm == "first-contact":
            return FirstContact(max_cc=o["max_cc"], max_pp=o["max_pp"], drift=o["drift"])
        if decision.algorithm == "mc":
            return MultiChunk(channels=o["channels"], max_pp=o["max_pp"], max_p=o["max_p"])
        return PCP(
            min_chunk_bytes=o["min_chunk_bytes"],
            min_chunks=o["min_chunks"],
            max_pp=o["max_pp"],
            max_p=o["max_p"],
            max_cc=o["max_cc"],
            adapt=o["adapt"],
            drift=o["drift"],
        )

    def plan(self, manifest: ManifestLike, link: LinkInfo) -> list[ChunkSpec]:
        sizes = SortedSizes.of(manifest)
        self.last_decision = self.decide(sizes, link)
        self.last_algorithm = self.delegate(self.last_decision)
        return self.last_algorithm.plan(sizes.sizes, link)

    def run(self, manifest_sorted: pa.Table, link: LinkInfo, executor: Any) -> list[ChunkResult]:
        if not isinstance(manifest_sorted, pa.Table):
            raise ValueError(
                f"run() needs the sorted manifest as an Arrow table (got {type(manifest_sorted).__name__})"
            )
        self.last_decision = self.decide(manifest_sorted, link)
        self.last_algorithm = self.delegate(self.last_decision)
        return self.last_algorithm.run(manifest_sorted, link, executor)
