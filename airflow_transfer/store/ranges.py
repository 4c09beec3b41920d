"""Byte ranges a file has committed, kept as coalesced half-open [start, end) pairs.

The journal stores them as compact JSON text (``[[0,1048576],[2097152,3145728]]``):
after coalescing, a file written in order is a single pair however many
ranges the engine reported, and one written by p connections is at most p.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import numpy as np

Ranges = list[list[int]]


def _as_array(ranges: Iterable[Sequence[int]]) -> np.ndarray:
    pairs = np.asarray(list(ranges), dtype=np.int64).reshape(-1, 2)
    if (pairs[:, 0] < 0).any() or (pairs[:, 1] < pairs[:, 0]).any():
        bad = pairs[(pairs[:, 0] < 0) | (pairs[:, 1] < pairs[:, 0])][0].tolist()
        raise ValueError(f"byte range {bad} is invalid: a range is [start, end) with 0 <= start <= end")
    return pairs


# Below this many ranges a plain sort-and-merge beats numpy's per-call overhead (~30 us):
# the journal coalesces every file's few ranges at every flush, 100,000 times for 100,000 files.
SMALL = 32


def coalesce(ranges: Iterable[Sequence[int]]) -> Ranges:
    """Sorted, non-overlapping, non-touching ranges covering exactly the input."""
    ranges = ranges if isinstance(ranges, (list, tuple)) else list(ranges)
    if len(ranges) <= SMALL:
        return _coalesce_small(ranges)
    return _coalesce_array(ranges)


def _coalesce_small(ranges: Sequence[Sequence[int]]) -> Ranges:
    pairs = []
    for pair in ranges:
        start, end = (int(x) for x in pair)
        if start < 0 or end < start:
            raise ValueError(f"byte range {[start, end]} is invalid: a range is [start, end) with 0 <= start <= end")
        if end > start:
            pairs.append([start, end])
    pairs.sort()
    out: Ranges = []
    for start, end in pairs:
        if out and start <= out[-1][1]:  # overlapping or touching: extend the run
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
    return out


def _coalesce_array(ranges: Iterable[Sequence[int]]) -> Ranges:
    pairs = _as_array(ranges)
    pairs = pairs[pairs[:, 1] > pairs[:, 0]]
    if len(pairs) == 0:
        return []
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    reach = np.maximum.accumulate(pairs[:, 1])
    # a new run starts where a range begins beyond everything before it
    # (touching ranges, start == previous reach, join the run)
    new_run = np.empty(len(pairs), dtype=bool)
    new_run[0] = True
    new_run[1:] = pairs[1:, 0] > reach[:-1]
    first = np.flatnonzero(new_run)
    last = np.append(first[1:] - 1, len(pairs) - 1)
    return np.column_stack([pairs[first, 0], reach[last]]).tolist()


def covered_bytes(ranges: Iterable[Sequence[int]]) -> int:
    """Bytes covered by the ranges (overlaps counted once)."""
    return sum(end - start for start, end in coalesce(ranges))


def missing_ranges(size: int, done_ranges: Iterable[Sequence[int]]) -> Ranges:
    """The parts of a ``size``-byte file not covered by ``done_ranges`` (resume works on these)."""
    if size < 0:
        raise ValueError(f"file size {size} is negative")
    done = np.asarray(coalesce(done_ranges), dtype=np.int64).reshape(-1, 2)
    done = np.clip(done, 0, size)
    gap_starts = np.concatenate([[0], done[:, 1]])
    gap_ends = np.concatenate([done[:, 0], [size]])
    keep = gap_ends > gap_starts
    return np.column_stack([gap_starts[keep], gap_ends[keep]]).tolist()


def encode(ranges: Iterable[Sequence[int]]) -> str:
    """Compact JSON text of the coalesced ranges."""
    return json.dumps(coalesce(ranges), separators=(",", ":"))


def decode(text: str | None) -> Ranges:
    """Ranges from their JSON text (empty for NULL or '')."""
    if not text:
        return []
    return [[int(start), int(end)] for start, end in json.loads(text)]
