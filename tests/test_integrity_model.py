"""Liu, Jung, Kettimuthu, Sun (end-to-end integrity verification) Table I and section III.B, worked."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_transfer.integrity.model import (
    PAPER_UNIT,
    CostModel,
    block_level_time,
    checksum_threads,
    choose_verify_mode,
    file_level_time,
    pipeline_time,
    sequential_time,
    split_blocks,
    startup_overhead,
)

MB = 10**6
GB = 10**9
DATASET_20_10G = [10 * GB] * 20
DATASET_10G_500M = [10 * GB, 500 * MB] * 10  # alternating, as Table I's file-level cell implies
BLOCKS = {"100MB": 100 * MB, "500MB": 500 * MB, "1GB": GB, "2GB": 2 * GB}

# Table I, as printed: (block-level per block size, file-level, sequential) in t and c.
TABLE_I = {
    ("transfer", "20-10G"): (
        {
            "100MB": lambda t, c: 400 * t + c / 5,
            "500MB": lambda t, c: 400 * t + c,
            "1GB": lambda t, c: 400 * t + 2 * c,
            "2GB": lambda t, c: 400 * t + 4 * c,
        },
        lambda t, c: 400 * t + 20 * c,
        lambda t, c: 400 * (t + c),
    ),
    ("transfer", "10G-500M"): (
        {k: (lambda t, c: 210 * t + c) for k in BLOCKS},
        lambda t, c: 200 * t + 201 * c,
        lambda t, c: 210 * (t + c),
    ),
    ("checksum", "20-10G"): (
        {
            "100MB": lambda t, c: 400 * c + t / 5,
            "500MB": lambda t, c: 400 * c + t,
            "1GB": lambda t, c: 400 * c + 2 * t,
            "2GB": lambda t, c: 400 * c + 4 * t,
        },
        lambda t, c: 400 * c + 20 * t,
        lambda t, c: 400 * (c + t),
    ),
    ("checksum", "10G-500M"): (
        {
            "100MB": lambda t, c: 208 * c + 51 / 5 * t,
            "500MB": lambda t, c: 210 * c + t,
            "1GB": lambda t, c: 210 * c + 2 * t,
            "2GB": lambda t, c: 201 * c + 40 * t,
        },
        lambda t, c: 200 * t + 201 * c,
        lambda t, c: 210 * (c + t),
    ),
}
# The paper's testbeds (section IV.C): Rains t = 7 s, c = 1 s; Cooley t = 0.5 s, c = 1 s.
TESTBED = {"transfer": (7.0, 1.0), "checksum": (0.5, 1.0)}
DATASETS = {"20-10G": DATASET_20_10G, "10G-500M": DATASET_10G_500M}


@pytest.mark.parametrize("case, dataset", list(TABLE_I))
def test_every_cell_of_table_one(case: str, dataset: str) -> None:
    t, c = TESTBED[case]
    model = CostModel(t, c, unit=PAPER_UNIT)
    sizes = DATASETS[dataset]
    block_cells, file_cell, seq_cell = TABLE_I[(case, dataset)]
    # Table I's note: the 500 MB files go whole even with 100 MB blocks.
    whole = 500 * MB if dataset == "10G-500M" else 0
    for label, size in BLOCKS.items():
        got = block_level_time(sizes, size, model, whole_files_up_to=whole)
        assert got == pytest.approx(block_cells[label](t, c)), (case, dataset, label)
    assert file_level_time(sizes, model) == pytest.approx(file_cell(t, c))
    assert sequential_time(sizes, model) == pytest.approx(seq_cell(t, c))


def test_worked_numbers_of_section_four() -> None:
    # Cooley (t=0.5, c=1): gain of the best block size over file-level ~10 s on
    # 20-10G, over sequential ~200 s; on 10G-500M over sequential ~100 s.
    cooley = CostModel(0.5, 1.0)
    best_20 = block_level_time(DATASET_20_10G, 100 * MB, cooley)
    assert best_20 == pytest.approx(400.1)
    assert file_level_time(DATASET_20_10G, cooley) - best_20 == pytest.approx(9.9)
    assert sequential_time(DATASET_20_10G, cooley) - best_20 == pytest.approx(199.9)
    best_mixed = block_level_time(DATASET_10G_500M, 500 * MB, cooley)
    assert sequential_time(DATASET_10G_500M, cooley) - best_mixed == pytest.approx(104.5)
    # Rains (t=7, c=1): ~20 s over file-level and ~400 s over sequential on 20-10G.
    rains = CostModel(7.0, 1.0)
    best = block_level_time(DATASET_20_10G, 100 * MB, rains)
    assert file_level_time(DATASET_20_10G, rains) - best == pytest.approx(19.8)
    assert sequential_time(DATASET_20_10G, rains) - best == pytest.approx(399.8)


def test_split_blocks_shapes() -> None:
    blocks = split_blocks([0, 1, 9, 10, 11, 25], 10)
    assert blocks.tolist() == [1, 9, 10, 10, 1, 10, 10, 5]
    assert split_blocks([5, 25], 10, whole_files_up_to=5).tolist() == [5, 10, 10, 5]
    assert split_blocks([], 10).size == 0
    many = split_blocks(np.full(1_000_000, 3 * 2**20 + 1), 2**20)  # vectorised: a million files
    assert many.size == 4_000_000 and int(many.sum()) == 1_000_000 * (3 * 2**20 + 1)
    with pytest.raises(ValueError):
        split_blocks([10], 0)
    with pytest.raises(ValueError):
        split_blocks([-1], 10)


def test_lock_step_and_buffered_pipelines() -> None:
    # Two items: send 3 s, check 1 s; send 1 s, check 3 s.
    assert pipeline_time([3, 1], [1, 3]) == pytest.approx(3 + max(1, 1) + 3)
    assert pipeline_time([3, 1], [1, 3], buffered=True) == pytest.approx(7)
    # A long check, then a short send and a long one: lock step holds the long
    # send back until the long check ends; a queue lets it start at once.
    t, c = [1, 1, 5], [5, 1, 1]
    assert pipeline_time(t, c) == pytest.approx(1 + 5 + 5 + 1)
    assert pipeline_time(t, c, buffered=True) == pytest.approx(max(1 + 7, 2 + 2, 7 + 1))
    # Balanced alternation: both give the same answer.
    t, c = [1, 4, 1, 4], [4, 1, 4, 1]
    assert pipeline_time(t, c) == pytest.approx(1 + 4 + 1 + 4 + 1)
    assert pipeline_time(t, c, buffered=True) == pytest.approx(11)
    assert pipeline_time([], []) == 0.0
    rng = np.random.default_rng(2)
    for _ in range(50):
        t, c = rng.uniform(0, 5, 20), rng.uniform(0, 5, 20)
        lock, queue = pipeline_time(t, c), pipeline_time(t, c, buffered=True)
        assert max(t.sum(), c.sum()) <= queue <= lock <= (t + c).sum() + 1e-9
    with pytest.raises(ValueError):
        pipeline_time([1, 2], [1])


def test_checksum_threads_balance_section_3b() -> None:
    assert checksum_threads(0.5, 1.0, max_threads=12) == 2  # Cooley: 2 threads
    assert checksum_threads(7.0, 1.0, max_threads=12) == 1  # Rains: transfer-dominant
    assert checksum_threads(1.0, 1.0, max_threads=12) == 1
    assert checksum_threads(1.0, 3.5, max_threads=12) == 4
    assert checksum_threads(1.0, 3.0000001, max_threads=12) == 3
    assert checksum_threads(0.1, 5.0, max_threads=2) == 2  # capped by the cores
    assert checksum_threads(0.0, 5.0, max_threads=8) == 1
    # Two threads make Cooley's 20-10G pipeline ~2x faster, as Fig. 4 found.
    one = block_level_time(DATASET_20_10G, 500 * MB, CostModel(0.5, 1.0))
    two = block_level_time(DATASET_20_10G, 500 * MB, CostModel(0.5, 1.0, threads=2))
    assert one == pytest.approx(400.5) and two == pytest.approx(200.5)


def test_startup_overhead_eq_1() -> None:
    assert startup_overhead(t_blocks=120.0, t_whole=100.0, n_blocks=20) == pytest.approx(20 / 19)
    with pytest.raises(ValueError):
        startup_overhead(1.0, 1.0, 1)


def test_choose_verify_mode() -> None:
    plan = choose_verify_mode(DATASET_10G_500M, CostModel(0.5, 1.0), block_sizes=[100 * MB, 500 * MB], max_threads=2)
    assert (plan.mode, plan.threads) == ("block", 2)
    assert plan.seconds == min(plan.predictions.values())
    assert plan.seconds < plan.predictions["file"] < plan.predictions["sequential"]
    assert "block-level" in plan.reason
    # A large per-block overhead makes small blocks lose to whole files.
    costly = CostModel(1.0, 1.0, unit=MB, block_overhead=50.0)
    plan = choose_verify_mode([MB] * 10, costly, block_sizes=[MB // 100])
    assert plan.mode == "file" and plan.block_size == 0
    assert choose_verify_mode([0, 0], CostModel(1, 1)).mode == "sequential"
    with pytest.raises(ValueError):
        CostModel(-1, 1)
