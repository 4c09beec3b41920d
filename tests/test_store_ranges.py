"""Byte-range coalescing and the missing-ranges complement used by resume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_transfer.store.ranges import coalesce, covered_bytes, decode, encode, missing_ranges


def _bitmap(ranges: list[list[int]], size: int) -> np.ndarray:
    bits = np.zeros(size, dtype=bool)
    for start, end in ranges:
        bits[start:end] = True
    return bits


def test_coalesce_merges_overlapping_and_touching_ranges_in_any_order() -> None:
    assert coalesce([[20, 30], [0, 10], [10, 15], [12, 18], [40, 40], [29, 35]]) == [[0, 18], [20, 35]]


def test_coalesce_of_nothing_and_of_empty_ranges_is_empty() -> None:
    assert coalesce([]) == []
    assert coalesce([[5, 5], [0, 0]]) == []


def test_coalesce_keeps_a_one_byte_gap() -> None:
    assert coalesce([[0, 10], [11, 20]]) == [[0, 10], [11, 20]]


@pytest.mark.parametrize("bad", [[[-1, 5]], [[10, 5]]])
def test_invalid_ranges_are_rejected_with_the_offending_pair(bad: list[list[int]]) -> None:
    with pytest.raises(ValueError, match=r"byte range .* is invalid"):
        coalesce(bad)


def test_missing_ranges_is_the_complement_within_the_file() -> None:
    assert missing_ranges(100, [[10, 20], [50, 60]]) == [[0, 10], [20, 50], [60, 100]]
    assert missing_ranges(100, []) == [[0, 100]]
    assert missing_ranges(100, [[0, 100]]) == []
    assert missing_ranges(0, []) == []
    # ranges past the end (a file that shrank) do not produce negative gaps
    assert missing_ranges(50, [[40, 80]]) == [[0, 40]]


def test_missing_ranges_rejects_a_negative_size() -> None:
    with pytest.raises(ValueError, match="negative"):
        missing_ranges(-1, [])


def test_encode_is_compact_coalesced_json_and_decode_round_trips() -> None:
    text = encode([[5, 10], [0, 5], [20, 30]])
    assert text == "[[0,10],[20,30]]"
    assert decode(text) == [[0, 10], [20, 30]]
    assert decode(None) == [] and decode("") == [] and decode("[]") == []


def test_byte_offsets_beyond_four_gib_survive() -> None:
    big = 5 * 2**40  # a 5 TiB file
    assert coalesce([[big - 10, big], [0, big - 10]]) == [[0, big]]
    assert covered_bytes([[0, big]]) == big


_ranges = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda t: [t[0], t[0] + t[1]]), max_size=30)


@settings(max_examples=100, deadline=None)
@given(_ranges)
def test_coalesce_covers_exactly_the_same_bytes_with_sorted_disjoint_ranges(ranges: list[list[int]]) -> None:
    merged = coalesce(ranges)
    assert np.array_equal(_bitmap(merged, 260), _bitmap(ranges, 260))
    assert all(start < end for start, end in merged)
    assert all(prev[1] < nxt[0] for prev, nxt in zip(merged, merged[1:]))
    assert covered_bytes(ranges) == int(_bitmap(ranges, 260).sum())


@settings(max_examples=100, deadline=None)
@given(_ranges, st.integers(0, 260))
def test_missing_plus_done_is_the_whole_file_with_no_overlap(ranges: list[list[int]], size: int) -> None:
    gaps = missing_ranges(size, ranges)
    done = _bitmap(ranges, 260)[:size]
    missing = _bitmap(gaps, 260)[:size]
    assert not (done & missing).any()
    assert (done | missing).all()
    assert all(end <= size for _, end in gaps)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda t: [t[0], t[0] + t[1]]), max_size=80))
def test_small_and_array_coalescing_agree_on_either_side_of_the_cutoff(ranges: list[list[int]]) -> None:
    # coalesce() merges short lists in plain Python and long ones with numpy; both must
    # give the same answer, or a file's ranges would change meaning as they pile up.
    from airflow_transfer.store import ranges as rng

    assert rng._coalesce_small(ranges) == rng._coalesce_array(ranges)
    assert coalesce(ranges) == rng._coalesce_array(ranges)
    assert np.array_equal(_bitmap(coalesce(ranges), 260), _bitmap(ranges, 260))


@pytest.mark.parametrize("count", [1, 32, 33, 500])
def test_invalid_range_is_rejected_on_both_paths(count: int) -> None:
    ranges = [[i * 10, i * 10 + 5] for i in range(count - 1)] + [[7, 3]]
    with pytest.raises(ValueError, match=r"byte range \[7, 3\] is invalid"):
        coalesce(ranges)
