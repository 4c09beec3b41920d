"""Recursive Chunk Division and the chunk revisions of Adaptive PCP.

Paper 000 (Yildirim, Arslan, Kim, Kosar, Application-Level Optimization of Big
Data Transfers Through Pipelining, Parallelism and Concurrency, IEEE TCC 2016;
docs/papers.md) Alg. 1 splits a size-sorted range at its
mean-size index while the pipelining level of the piece differs from its
parent's; Alg. 2 then divides the largest chunk until there are enough chunks
to ramp concurrency over, and combines chunks that ended up with the same
level. Everything works on row ranges and prefix sums (dataset.SortedSizes), so
the cost is O(chunks x log rows), independent of how many files a chunk holds.

Reading of Alg. 1, where the pseudo-code is loose:

* The root (the whole of Set 1) has no parent, so the "level differs from the
  parent" and "level != 1" rules do not stop it; otherwise a set whose mean is
  above BDP / 2 (level 1) would never be divided, whatever its spread.
* A piece is divided only if both halves hold at least `min_chunk_bytes`
  (section 2.1.3: a chunk needs enough data to get past slow start). The
  pseudo-code checks only "size > 2 x min"; checking the halves is what keeps
  the stated rule "a chunk cannot be less than the minimum chunk size".
* A leaf keeps its own eq. 4 level. The pseudo-code's else branch writes
  "opt_pp = parent_pp", which agrees when the stop is "same level as the
  parent" and otherwise throws away the model's estimate for exactly those
  files; we keep the estimate.

Levels are non-increasing along the sorted order (a range further right has a
larger mean), so chunks with the same level are always neighbours and
combining them keeps every chunk one contiguous row range.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .dataset import SortedSizes
from .models import DEFAULT_MAX_PP


class Piece(NamedTuple):
    start: int
    stop: int
    level: int  # paper-000 pipelining level


def _raw_level(bdp_bytes: float, mean: float) -> float:
    return math.inf if mean <= 0 else math.ceil(bdp_bytes / mean) - 1


def recursive_chunk_division(
    sizes: SortedSizes, start: int, stop: int, bdp_bytes: float, min_chunk_bytes: float, max_pp: int = DEFAULT_MAX_PP
) -> list[Piece]:
    """Alg. 1 of paper 000 on rows [start, stop); returns pieces in row order."""
    if stop <= start:
        return []
    out: list[Piece] = []
    # (start, stop, parent level or None for the root); right pushed first so the
    # left half is finished first and `out` comes out in row order.
    stack: list[tuple[int, int, int | None]] = [(start, stop, None)]
    while stack:
        lo, hi, parent = stack.pop()
        mean = sizes.mean(lo, hi)
        raw = _raw_level(bdp_bytes, mean)
        level = int(min(max(raw, 1), max_pp))
        if _divisible(sizes, lo, hi, mean, raw, level, parent, min_chunk_bytes, max_pp):
            mid = sizes.index_above(mean, lo, hi)
            stack.append((mid, hi, level))
            stack.append((lo, mid, level))
        else:
            out.append(Piece(lo, hi, level))
    return out


def _divisible(
    sizes: SortedSizes,
    lo: int,
    hi: int,
    mean: float,
    raw: float,
    level: int,
    parent: int | None,
    min_chunk_bytes: float,
    max_pp: int,
) -> bool:
    """Alg. 1's conditions, each an early return with its reason."""
    if parent is not None and level == parent:
        return False  # same level as the parent: dividing cannot change pipelining
    if parent is not None and level == 1:
        return False  # files near the BDP already: pipelining level at its floor
    if raw > max_pp:
        return False  # over the cap: every finer piece would be clamped the same way
    if sizes.bytes(lo, hi) <= 2 * min_chunk_bytes:
        return False  # too little data to make two chunks that pass slow start
    mid = sizes.index_above(mean, lo, hi)
    if not lo < mid < hi:
        return False  # all files the same size: the mean index does not split
    if sizes.bytes(lo, mid) < min_chunk_bytes or sizes.bytes(mid, hi) < min_chunk_bytes:
        return False  # one half would fall under the minimum chunk size
    return True


def divide_largest(sizes: SortedSizes, pieces: list[Piece], min_count: int) -> list[Piece]:
    """Alg. 2: split the largest chunk (by bytes) in two halves of equal bytes until
    there are `min_count` chunks or no chunk has two files left."""
    pieces = list(pieces)
    while len(pieces) < min_count:
        candidates = [i for i, p in enumerate(pieces) if p.stop - p.start >= 2]
        if not candidates:
            break
        i = max(candidates, key=lambda k: sizes.bytes(pieces[k].start, pieces[k].stop))
        p = pieces[i]
        mid = sizes.byte_split(p.start, p.stop)
        pieces[i : i + 1] = [Piece(p.start, mid, p.level), Piece(mid, p.stop, p.level)]
    return pieces


def combine_same_level(pieces: list[Piece]) -> list[Piece]:
    """Alg. 2: merge neighbouring chunks with the same level into one."""
    out: list[Piece] = []
    for p in pieces:
        if out and out[-1].level == p.level and out[-1].stop == p.start:
            out[-1] = Piece(out[-1].start, p.stop, p.level)
        else:
            out.append(p)
    return out
