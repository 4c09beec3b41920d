"""Run-time re-tuning of a long final phase (used by `auto`).

Paper 003 (Kola, Kosar, Livny, Run-time Adaptation of Grid Data Placement Jobs,
2003; docs/papers.md; section 1): parameters optimal when a
job is submitted may no longer be optimal when it executes. PCP ends with
"transfer the rest in one chunk with the optimal values"; for a long rest
that freezes a decision the link may invalidate. `RestRunner` instead moves
the rest in sub-chunks and watches their throughput. If it moves away from
the reference by more than `drift`, it probes concurrency again: doubling
while that gains more than 5 % (the paper-000 ramp rule), else halving while
that gains, else staying where it was.

Sub-chunks of a size-sorted manifest differ in file size, and throughput
follows file size. So the watch compares throughput divided by the model's
per-channel rate for that sub-chunk (models.channel_rate_bps), which factors
out what file size alone explains and leaves what changed on the link.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..engine.params import TransferParams
from .base import DEFAULT_DROP, RunContext
from .models import channel_rate_bps


@dataclass
class Segment:
    """A run of rows with its base parameters (cc is decided by the runner)."""

    start: int
    stop: int
    params: TransferParams
    label: str


class RestRunner:
    def __init__(
        self, ctx: RunContext, cc: int, max_cc: int, piece_bytes: float, drift: float = 0.25, drop: float = DEFAULT_DROP
    ) -> None:
        self.ctx, self.cc, self.max_cc = ctx, cc, max_cc
        self.piece_bytes, self.drift, self.drop = piece_bytes, drift, drop
        self.reference: float | None = None
        self.retunes: list[tuple[str, int, int]] = []  # (chunk id that triggered, cc before, cc after)
        self._mode = "steady"
        self._base_cc = cc
        self._base_score = 0.0
        self._first_probe = False

    def run(self, segments: list[Segment]) -> int:
        """Move every segment; returns the concurrency in use at the end."""
        for seg in segments:
            cuts = self.ctx.sizes.byte_cuts(seg.start, seg.stop, self.piece_bytes)
            bounds = [seg.start, *cuts.tolist(), seg.stop]
            for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
                params = replace(seg.params, cc=min(self.cc, hi - lo))
                chunk_id = f"{seg.label}.{k + 1:03d}"
                result = self.ctx.run(lo, hi, params, chunk_id)
                self._observe(chunk_id, result.throughput_mbit / self._norm(lo, hi, params))
        return self.cc

    def _norm(self, lo: int, hi: int, params: TransferParams) -> float:
        rate = channel_rate_bps(self.ctx.sizes.mean(lo, hi), params.pp, params.p, self.ctx.link) / 1e6
        return max(rate, 1e-9)

    def _observe(self, chunk_id: str, score: float) -> None:
        """One decision per sub-chunk, each branch an early return."""
        if self._mode == "steady":
            if self.reference is None:
                self.reference = score
                return
            if abs(score / self.reference - 1) <= self.drift:
                return  # within the band: the link looks as it did at the last tuning
            before = self.cc
            self._base_cc, self._base_score = self.cc, score
            if self.cc < self.max_cc:
                self._mode, self._first_probe = "up", True
                self.cc = min(self.cc * 2, self.max_cc)
            elif self.cc > 1:
                self._mode = "down"
                self.cc = max(self.cc // 2, 1)
            else:
                self.reference = score
                return
            self.retunes.append((chunk_id, before, self.cc))
            return
        gained = score > (1 + self.drop) * self._base_score
        if gained:
            self._base_cc, self._base_score = self.cc, score
            self._first_probe = False
            step = self.cc * 2 if self._mode == "up" else self.cc // 2
            step = min(max(step, 1), self.max_cc)
            if step != self.cc:
                self.cc = step
                return  # still improving: keep going the same way
            self._settle()
            return
        if self._mode == "up" and self._first_probe and self._base_cc > 1:
            self._mode = "down"  # more did not help: try fewer
            self.cc = max(self._base_cc // 2, 1)
            self._first_probe = False
            return
        self._settle()

    def _settle(self) -> None:
        self.cc = self._base_cc
        self.reference = self._base_score
        self._mode = "steady"
