"""`auto` at run time: re-tuning when the link changes under a running transfer (paper 003)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.tuning import LinkInfo, LinkSimulator, get_algorithm
from airflow_transfer.tuning.base import RunContext
from airflow_transfer.tuning.retune import RestRunner, Segment

MB = 1024 * 1024
LINK = LinkInfo(rtt_s=0.05, bandwidth_bps=1e9, source="profiler")


def table(sizes) -> pa.Table:
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))
    return pa.table(
        {"path": pa.array([f"f{i:07d}" for i in range(sizes.size)]), "size": sizes, "mtime": np.zeros(sizes.size)}
    )


def large_files() -> pa.Table:
    return table(np.random.default_rng(3).integers(48 * MB, 80 * MB, 3000))


def sim(changes=None) -> LinkSimulator:
    return LinkSimulator(LINK, rate_changes=changes, cpu_bps=8e9, conn_cpu=0.01)


def test_steady_link_no_retune_and_same_decisions_as_pcp():
    auto = get_algorithm("auto")
    results = auto.run(large_files(), LINK, sim())
    assert auto.last_decision.algorithm == "pcp"
    assert auto.last_algorithm.last_retunes == []
    rest = [r for r in results if ".rest." in r.chunk_id]
    assert len(rest) == 8 and len({r.params for r in rest}) == 1


def test_bandwidth_rise_mid_transfer_raises_concurrency_and_beats_frozen_pcp():
    changes = [(200.0, 4e9)]
    auto = get_algorithm("auto")
    s_auto = sim(changes)
    results = auto.run(large_files(), LINK, s_auto)
    [(trigger, before, after)] = auto.last_algorithm.last_retunes
    assert after > before
    rest = [r for r in results if ".rest." in r.chunk_id]
    assert rest[-1].params.cc > rest[0].params.cc
    s_pcp = sim(changes)
    get_algorithm("pcp").run(large_files(), LINK, s_pcp)
    assert s_auto.now < 0.9 * s_pcp.now


def test_bandwidth_drop_mid_transfer_lowers_concurrency():
    auto = get_algorithm("auto")
    results = auto.run(large_files(), LINK, sim([(200.0, 2.5e8)]))
    assert auto.last_algorithm.last_retunes
    rest = [r for r in results if ".rest." in r.chunk_id]
    assert rest[-1].params.cc < rest[0].params.cc


def test_drift_is_judged_against_the_model_not_raw_file_size():
    """Sub-chunks of a sorted manifest grow in file size; that alone must not trigger a re-tune."""
    t = table(np.geomspace(200_000, 50 * MB, 6000).astype(np.int64))
    s = LinkSimulator(LINK)
    ctx = RunContext.open(t, LINK, s)
    runner = RestRunner(ctx, cc=1, max_cc=32, piece_bytes=ctx.sizes.total / 10, drift=0.25)
    runner.run([Segment(0, 6000, TransferParams(pp=2), "rest")])
    raw = [c.throughput_mbit for c in s.calls]
    assert max(raw) > 1.3 * min(raw)  # raw throughput does move with file size ...
    assert runner.retunes == []  # ... yet nothing was re-tuned


def test_unmeasured_link_runs_first_contact():
    auto = get_algorithm("auto")
    s = LinkSimulator(LINK)
    results = auto.run(table(np.full(3000, MB)), LinkInfo.unknown(), s)
    assert auto.last_decision.algorithm == "first-contact"
    assert min(r.params.cc for r in results) >= 2  # never a chunk alone on one channel
    assert auto.last_algorithm.ramp.steps  # and concurrency was measured, not assumed


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("mixed_share", 0.7, "mixed_share must be a number in"),
        ("drift", -1, "drift must be a number in"),
        ("min_chunks", 0, "min_chunks must be a whole number >= 1"),
    ],
)
def test_auto_options_are_validated(option, value, message):
    with pytest.raises(ValueError, match=message):
        get_algorithm("auto", **{option: value})
