"""Models of paper 000 / 001 / 004: BDP, pipelining level, Mathis bound, LinkInfo."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.tuning.chunks import ChunkSpec
from airflow_transfer.tuning.dataset import SortedSizes, sizes_of, sort_manifest
from airflow_transfer.tuning.models import (
    DEFAULT_MAX_WINDOW,
    LinkInfo,
    bdp,
    channel_rate_bps,
    effective_window,
    mathis_bps,
    pp_level,
    pp_level_eq1,
    pp_levels,
    pp_param,
    stream_bps,
    streams_to_fill,
)

MB = 1024 * 1024


def test_bdp_is_bandwidth_times_rtt_in_bytes():
    assert bdp(1e9, 0.1) == 12_500_000
    assert LinkInfo(rtt_s=0.05, bandwidth_bps=8e8).bdp_bytes == 5_000_000


@pytest.mark.parametrize(
    "bdp_bytes, mean, expected",
    [
        (8 * MB, 1.5 * MB, 5),  # ceil(5.33) - 1
        (8 * MB, 7.5 * MB, 1),  # ceil(1.07) - 1
        (5 * MB, 1 * MB, 4),  # paper 001's dataset: eq. 4 says 4 ...
        (8 * MB, 2 * MB, 3),  # exact division: ceil(4) - 1
        (8 * MB, 64 * MB, 1),  # larger than the BDP: floor of 1 (rule 1, always pipeline)
        (8 * MB, 1024, 32),  # tiny files: capped at max_pp
        (8 * MB, 0, 32),  # empty files are pure control traffic
    ],
)
def test_pp_level_is_eq4_clamped(bdp_bytes, mean, expected):
    assert pp_level(bdp_bytes, mean, max_pp=32) == expected


def test_eq1_of_paper_001_differs_from_eq4_by_two_levels():
    # ... while paper 001 eq. 1 gives the 6 its experiment used.
    assert pp_level_eq1(5 * MB, 1 * MB) == 6
    assert pp_level(5 * MB, 1 * MB) == 4


def test_pp_levels_vectorised_matches_scalar():
    means = np.array([0, 1024, 1.5 * MB, 7.5 * MB, 80 * MB])
    assert pp_levels(8 * MB, means, 20).tolist() == [pp_level(8 * MB, m, 20) for m in means]


def test_pp_param_converts_levels_to_files_in_flight():
    # GridFTP level 4 keeps five commands outstanding (paper 000 section 1).
    assert pp_param(4) == 5
    assert pp_param(0) == 1
    with pytest.raises(ValueError, match="level must be >= 0"):
        pp_param(-1)


def test_max_pp_must_be_positive_whole_number():
    with pytest.raises(ValueError, match="max_pp must be a whole number >= 1"):
        pp_level(8 * MB, MB, max_pp=0)


def test_mathis_bound_falls_with_rtt_and_loss():
    base = mathis_bps(0.1, 1e-4)
    assert base == pytest.approx(1448 * 8 * math.sqrt(1.5) / (0.1 * 0.01))
    assert mathis_bps(0.2, 1e-4) == pytest.approx(base / 2)
    assert mathis_bps(0.1, 4e-4) == pytest.approx(base / 2)
    assert mathis_bps(0.1, 0.0) == math.inf


def test_single_stream_is_window_limited_then_streams_fill_the_link():
    link = LinkInfo(rtt_s=0.1, bandwidth_bps=1e9, max_window_bytes=MB)
    assert stream_bps(link) == pytest.approx(MB * 8 / 0.1)
    assert streams_to_fill(link) == math.ceil(1e9 / (MB * 8 / 0.1))  # 12 streams of 84 Mbit/s
    lossy = LinkInfo(rtt_s=0.1, bandwidth_bps=1e9, loss_rate=1e-3)
    assert stream_bps(lossy) == pytest.approx(mathis_bps(0.1, 1e-3))


def test_window_defaults_to_linux_autotuning_cap_and_takes_the_smaller_limit():
    assert effective_window(LinkInfo(rtt_s=0.1, bandwidth_bps=1e9)) == DEFAULT_MAX_WINDOW
    assert (
        effective_window(LinkInfo(rtt_s=0.1, bandwidth_bps=1e9, tcp_buffer_bytes=2 * MB, max_window_bytes=3 * MB))
        == 2 * MB
    )


def test_channel_rate_rises_with_pipelining_until_the_window_caps_it():
    link = LinkInfo(rtt_s=0.1, bandwidth_bps=1e9, max_window_bytes=16 * MB)
    rates = [channel_rate_bps(MB, pp, 1, link) for pp in (1, 2, 4, 8, 16, 32)]
    assert rates == sorted(rates)
    assert rates[0] < rates[-1] / 10
    assert rates[-1] == pytest.approx(1e9)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rtt_s": 0, "bandwidth_bps": 1e9}, "rtt_s must be a finite number > 0"),
        ({"rtt_s": 0.1, "bandwidth_bps": -1}, "bandwidth_bps must be a finite number > 0"),
        ({"rtt_s": float("nan"), "bandwidth_bps": 1e9}, "rtt_s must be a finite number > 0"),
        ({"rtt_s": 0.1, "bandwidth_bps": 1e9, "tcp_buffer_bytes": -5}, "tcp_buffer_bytes must be a whole number"),
        ({"rtt_s": 0.1, "bandwidth_bps": 1e9, "loss_rate": 1.5}, "loss_rate must be in"),
    ],
)
def test_linkinfo_rejects_bad_figures_clearly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinkInfo(**kwargs)


def test_linkinfo_from_bdp_and_unknown():
    link = LinkInfo.from_bdp(8 * MB)
    assert link.bdp_bytes == 8 * MB and link.measured
    assert not LinkInfo.unknown().measured
    with pytest.raises(ValueError, match="BDP must be a number of bytes > 0"):
        LinkInfo.from_bdp(0)


def test_sorted_sizes_prefix_sums_and_splits():
    s = SortedSizes.of(np.array([1, 2, 3, 4, 10], dtype=np.int64))
    assert s.total == 20 and s.bytes(1, 4) == 9 and s.mean(0, 5) == 4.0
    assert s.index_above(4.0) == 4
    assert s.index_at_least(3) == 2
    assert s.byte_split(0, 5) == 4  # half the bytes (10) are reached at row 4
    assert s.byte_cuts(0, 5, 5).tolist() == [3, 4]


def test_unsorted_or_invalid_manifests_are_rejected_with_the_fix():
    with pytest.raises(ValueError, match="not sorted by size.*sort_manifest"):
        SortedSizes.of(np.array([5, 1], dtype=np.int64))
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        sizes_of(np.array([1, -1]))
    with pytest.raises(ValueError, match="no 'size' column"):
        sizes_of(pa.table({"path": ["a"]}))
    with pytest.raises(ValueError, match="1-D integer array"):
        sizes_of(np.array([1.5, 2.0]))


def test_sort_manifest_orders_by_size_and_keeps_other_columns():
    t = pa.table({"path": ["b", "a", "c"], "size": pa.array([30, 10, 20], pa.int64()), "mtime": [0.0, 1.0, 2.0]})
    out = sort_manifest(t)
    assert out.column("size").to_pylist() == [10, 20, 30]
    assert out.column("path").to_pylist() == ["a", "c", "b"]


def test_chunkspec_round_trips_through_plain_dicts():
    spec = ChunkSpec("s1.001", 10, 20, 10, 12345, 100, 2000, TransferParams(pp=5, p=1, cc=4))
    data = spec.to_dict()
    assert data["params"] == {"pp": 5, "p": 1, "cc": 4, "block_size": 0, "tcp_buffer": 0}
    assert all(isinstance(v, (int, str, dict)) for v in data.values())
    assert ChunkSpec.from_dict(data) == spec


def test_chunkspec_validation_is_clear():
    with pytest.raises(ValueError, match=r"rows \[5, 5\) must be non-empty"):
        ChunkSpec("x", 5, 5, 0, 0, 0, 0, TransferParams())
    with pytest.raises(ValueError, match="missing bytes"):
        ChunkSpec.from_dict({"id": "x", "start": 0, "stop": 1, "files": 1, "min_size": 1, "max_size": 1, "params": {}})
    with pytest.raises(ValueError, match="pp must be a whole number >= 1"):
        ChunkSpec.from_dict(
            {
                "id": "x",
                "start": 0,
                "stop": 1,
                "files": 1,
                "bytes": 1,
                "min_size": 1,
                "max_size": 1,
                "params": {"pp": 0},
            }
        )


def test_sftp_pipelining_hides_two_round_trips_per_file() -> None:
    """1 MiB files on a 500 Mbit/s, 50 ms link (BDP about 3 MiB): eq. 4 keeps ceil(BDP/F) = 3
    files in flight; over SFTP each file also waits for its OPEN and CLOSE replies, so the
    engine aims at two BDPs: 6 files."""
    import dataclasses

    from airflow_transfer.tuning.adaptive_cc import AdaptiveCC
    from airflow_transfer.tuning.models import SFTP_FILE_RTTS, LinkInfo, pp_level, pp_param

    link = LinkInfo(rtt_s=0.05, bandwidth_bps=500e6)
    sftp = dataclasses.replace(link, file_rtts=SFTP_FILE_RTTS)
    assert link.pipeline_bytes == link.bdp_bytes and sftp.pipeline_bytes == 2 * link.bdp_bytes
    mib = 1 << 20
    assert pp_param(pp_level(link.pipeline_bytes, mib)) == 3
    assert pp_param(pp_level(sftp.pipeline_bytes, mib)) == 6
    sizes = np.full(400, mib, dtype=np.int64)
    paper = {s.params.pp for s in AdaptiveCC().plan(sizes, link)}
    over_sftp = {s.params.pp for s in AdaptiveCC().plan(sizes, sftp)}
    assert paper == {3} and over_sftp == {6}
