"""The generalisation benchmark's own logic (benchmarks/generalize.py), without a network:
the seeded draw, the dataset sizes, the grid, the run plan, the ratios and the dry run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import generalize as gen
from benchmarks.datasets import KIB, MIB

REPO = Path(__file__).resolve().parents[1]


def test_the_draw_is_deterministic_for_a_seed() -> None:
    assert gen.draw(6, 20261125) == gen.draw(6, 20261125)
    assert gen.draw(6) == gen.draw(6, gen.DEFAULT_SEED)
    assert gen.draw(6, 1) != gen.draw(6, 2)
    # A longer draw starts with the shorter one: --pairs 1 --only 0 is pair 0 of the default run.
    assert gen.draw(6)[:1] == gen.draw(1)


@pytest.mark.parametrize("seed", [gen.DEFAULT_SEED, 0, 1, 7, 12345, 2**40 + 3])
def test_six_pairs_cover_all_four_distributions(seed: int) -> None:
    pairs = gen.draw(6, seed)
    assert {p.distribution for p in pairs} == set(gen.DISTRIBUTIONS)
    assert [p.index for p in pairs] == list(range(6))


def test_drawn_figures_stay_in_their_ranges() -> None:
    pairs = [p for seed in range(20) for p in gen.draw(50, seed)]
    assert all(5.0 <= p.rtt_ms <= 200.0 for p in pairs)
    assert all(100.0 <= p.rate_mbit <= 1000.0 for p in pairs)
    assert all(0.5 <= p.queue_bdp <= 2.0 for p in pairs)
    # Log-uniform: as many draws under the geometric middle as over it (about half each).
    low_rtt = sum(p.rtt_ms < (5 * 200) ** 0.5 for p in pairs) / len(pairs)
    low_rate = sum(p.rate_mbit < (100 * 1000) ** 0.5 for p in pairs) / len(pairs)
    assert 0.4 < low_rtt < 0.6 and 0.4 < low_rate < 0.6
    assert all(p.queue_bytes >= gen.MIN_QUEUE_BYTES for p in pairs)


def test_over_one_ssh_window_per_rtt() -> None:
    # 100 ms at 200 Mbit/s: 2.5 MB in flight, over 2 MiB; at 160 Mbit/s 2.0 MB, under it.
    assert gen.Pair(0, 100.0, 200.0, 1.0, "bimodal", 1).over_ssh_window
    assert not gen.Pair(0, 100.0, 160.0, 1.0, "bimodal", 1).over_ssh_window


@pytest.mark.parametrize("distribution", gen.DISTRIBUTIONS)
def test_sizes_are_deterministic_and_fill_the_target(distribution: str) -> None:
    target = gen.target_bytes(300.0, 4.0)  # 150 MB
    sizes, capped = gen.file_sizes(distribution, target, 99)
    assert (sizes, capped) == gen.file_sizes(distribution, target, 99)
    assert sizes != gen.file_sizes(distribution, target, 100)[0]
    assert not capped
    assert abs(sum(sizes) - target) <= 256 * KIB  # at most the last file's floor over, or rounding


def test_sizes_follow_each_distribution() -> None:
    target = 2 * 10**9
    small, _ = gen.file_sizes("uniform-small", target, 5)
    assert all(16 * KIB <= s <= 256 * KIB for s in small)
    logn, _ = gen.file_sizes("lognormal", target, 5)
    assert all(KIB <= s <= 256 * MIB for s in logn)
    assert 128 * KIB < sorted(logn)[len(logn) // 2] < 512 * KIB  # median about 256 KiB
    bimodal, _ = gen.file_sizes("bimodal", target, 5)
    large = [s for s in bimodal[:-1] if s >= 32 * MIB]
    assert all(32 * KIB <= s <= 128 * KIB or 32 * MIB <= s <= 128 * MIB for s in bimodal[:-1])
    assert 0.1 < len(large) / len(bimodal) < 0.3
    few, _ = gen.file_sizes("few-large", target, 5)
    assert 4 <= len(few) <= 8
    assert max(few) / min(few) <= 4.0


def test_the_file_count_is_capped() -> None:
    sizes, capped = gen.file_sizes("uniform-small", 10**12, 3)
    assert len(sizes) == gen.MAX_FILES and capped
    sizes, capped = gen.file_sizes("uniform-small", 10**6, 3, max_files=2)
    assert len(sizes) == 2 and capped


def test_the_full_grid_has_at_least_18_distinct_settings() -> None:
    full = gen.grid("full")
    assert len(full) >= 18 and len(set(full)) == len(full)
    assert all(pp in (1, 8, 32) and p in (1, 4) and cc in (1, 4, 8, 16, 32) for pp, p, cc in full)
    assert {p for _, p, _ in full} == {1, 4}
    assert 0 < len(gen.grid("quick")) < len(full)
    with pytest.raises(ValueError):
        gen.grid("huge")


def test_the_plan_runs_auto_second_after_auto_cold_in_every_repetition() -> None:
    settings = gen.grid("quick")
    plan = gen.plan_runs(settings, reps=2)
    assert len(plan) == 2 * (3 + len(settings))
    for rep in (1, 2):
        kinds = [kind for r, kind, _, _ in plan if r == rep]
        assert kinds.index(gen.AUTO_COLD) < kinds.index(gen.AUTO_SECOND)
        assert kinds.count(gen.GRID) == len(settings) and kinds.count(gen.RSYNC) == 1
    assert [kind for _, kind, _, _ in gen.plan_runs(settings, 1, skip_grid=True)] == [
        gen.AUTO_COLD,
        gen.AUTO_SECOND,
        gen.RSYNC,
    ]


def run(kind: str, name: str, mbit: float | None, rep: int = 1, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"contender": name, "kind": kind, "rep": rep, "ok": mbit is not None}
    if mbit is not None:
        rec["mbit"] = mbit
    else:
        rec["error"] = "exited 1: boom"
    rec.update(extra)
    return rec


def grid_run(pp: int, p: int, cc: int, mbit: float | None, rep: int = 1, **extra: Any) -> dict[str, Any]:
    return run(gen.GRID, gen.setting_name(pp, p, cc), mbit, rep, setting={"pp": pp, "p": p, "cc": cc}, **extra)


def test_pair_summary_takes_the_best_grid_setting_as_the_oracle() -> None:
    runs = [
        run(gen.AUTO_COLD, "auto cold", 300.0),
        run(gen.AUTO_SECOND, "auto second", 420.0),
        run(gen.RSYNC, "rsync", 150.0),
        grid_run(8, 1, 4, 250.0),
        grid_run(32, 1, 16, 400.0),
        grid_run(1, 1, 4, None),  # failed: not a candidate
        grid_run(8, 4, 8, None, timed_out=True, partial_mbit=900.0),  # stopped: loses to any finished run
    ]
    s = gen.pair_summary(runs)
    assert s["oracle"]["setting"] == "fixed pp=32 p=1 cc=16" and s["oracle"]["mbit"] == 400.0
    assert (s["oracle"]["pp"], s["oracle"]["p"], s["oracle"]["cc"]) == (32, 1, 16)
    assert s["ratios"]["auto_cold/oracle"] == {"ratio": 0.75, "stopped": False}
    assert s["ratios"]["auto_second/oracle"]["ratio"] == 1.05
    assert s["ratios"]["auto_cold/rsync"]["ratio"] == 2.0
    assert s["ratios"]["auto_second/rsync"]["ratio"] == 2.8
    assert s["grid_finished"] == 2 and s["grid_settings"] == 4


def test_the_oracle_candidates_are_the_best_settings_of_the_earlier_grid() -> None:
    earlier = [grid_run(8, 1, 4, 250.0), grid_run(32, 1, 16, 400.0), grid_run(1, 1, 4, 475.0)]
    earlier += [grid_run(8, 4, 8, None, timed_out=True, partial_mbit=900.0), grid_run(1, 1, 8, None)]
    assert gen.oracle_candidates(earlier, 2) == [(1, 1, 4), (32, 1, 16)]


def test_re_measured_settings_alone_value_the_oracle() -> None:
    # A single lucky run (475) found the candidate; its three repetitions say 380. The oracle is
    # the best median of the re-measured settings, not the single runs they were chosen from.
    runs = [run(gen.AUTO_SECOND, "auto second", 370.0), grid_run(1, 1, 4, 475.0), grid_run(32, 1, 16, 400.0)]
    runs += [grid_run(1, 1, 4, m, rep, recheck=True) for rep, m in ((1, 380.0), (2, 350.0), (3, 390.0))]
    runs += [grid_run(32, 1, 16, m, rep, recheck=True) for rep, m in ((1, 300.0), (2, 360.0), (3, 320.0))]
    s = gen.pair_summary(runs)
    assert s["oracle"]["setting"] == "fixed pp=1 p=1 cc=4" and s["oracle"]["mbit"] == 380.0
    assert s["oracle"]["runs"] == 3
    assert s["ratios"]["auto_second/oracle"]["ratio"] == round(370 / 380, 3)


def test_oracle_top_needs_an_earlier_grid() -> None:
    with pytest.raises(SystemExit):
        gen.parse_args(["--oracle-top", "3"])


def test_pair_summary_medians_over_repetitions_and_missing_figures() -> None:
    runs = [
        run(gen.AUTO_COLD, "auto cold", 100.0, 1),
        run(gen.AUTO_COLD, "auto cold", 300.0, 2),
        run(gen.AUTO_COLD, "auto cold", 200.0, 3),
        run(gen.AUTO_SECOND, "auto second", None),  # failed every time: no figure, no ratio
        run(gen.RSYNC, "rsync", None, timed_out=True, partial_mbit=50.0),
    ]
    s = gen.pair_summary(runs)
    assert s["auto_cold"] == {"mbit": 200.0, "stopped": False, "runs": 3}
    assert s["oracle"] is None and s["auto_second"] is None
    assert s["ratios"]["auto_cold/oracle"] is None and s["ratios"]["auto_second/rsync"] is None
    assert s["ratios"]["auto_cold/rsync"] == {"ratio": 4.0, "stopped": True}


def test_overall_median_and_worst_pair() -> None:
    def summary(cold: float, second: float | None) -> dict[str, Any]:
        ratios: dict[str, dict[str, Any] | None] = {key: None for key, _, _ in gen.RATIOS}
        ratios["auto_cold/oracle"] = {"ratio": cold, "stopped": False}
        if second is not None:
            ratios["auto_second/oracle"] = {"ratio": second, "stopped": False}
        return {"ratios": ratios}

    o = gen.overall({0: summary(0.9, 1.0), 1: summary(0.6, None), 2: summary(1.2, 0.8), 3: summary(0.95, 0.9)})
    assert o["auto_cold/oracle"] == {"pairs": 4, "median": 0.925, "worst": {"pair": 1, "ratio": 0.6}, "below_1": 3}
    assert o["auto_second/oracle"]["median"] == 0.9 and o["auto_second/oracle"]["worst"] == {"pair": 2, "ratio": 0.8}
    assert o["auto_cold/rsync"] == {"pairs": 0, "median": None, "worst": None}


def test_losses_are_written_as_plainly_as_wins() -> None:
    assert gen.fmt_ratio({"ratio": 0.84, "stopped": False}) == "0.84 (below)"
    assert gen.fmt_ratio({"ratio": 1.123, "stopped": False}) == "1.12 (above)"
    assert gen.fmt_ratio({"ratio": 0.998, "stopped": True}) == "1.00 (par, stopped run)"
    assert gen.fmt_ratio(None) == "n/a"


def test_the_markdown_report_has_the_table_and_the_summary() -> None:
    pair = gen.draw(1)[0]
    sizes, capped = gen.file_sizes(pair.distribution, gen.target_bytes(pair.rate_mbit, 2.0), pair.data_seed)
    doc = gen.pair_doc(pair, sizes, capped)
    doc["runs"] = [
        run(gen.AUTO_COLD, "auto cold", 80.0, tuning_source="unknown (adapting by measurement)", exit_status=0),
        run(gen.AUTO_SECOND, "auto second", 120.0, tuning_notes=["a | note"], exit_status=0),
        run(gen.RSYNC, "rsync", 100.0, exit_status=0),
        grid_run(8, 1, 8, 110.0, exit_status=0, seconds=3.0),
        grid_run(1, 1, 4, None, exit_status=1),
    ]
    doc["summary"] = gen.pair_summary(doc["runs"])
    result = {
        "argv": ["--pairs", "1"],
        "date": "2026-11-25T00:00:00Z",
        "commit": "0" * 40,
        "machine": "test",
        "seed": gen.DEFAULT_SEED,
        "pairs_drawn": 1,
        "only": None,
        "seconds": 2.0,
        "reps": 1,
        "grid": {"name": "quick", "settings": []},
        "skip_grid": False,
        "timeout_s": 60.0,
        "pairs": [doc],
        "summary": gen.overall({0: doc["summary"]}),
    }
    md = gen.markdown(result)
    assert "| auto cold / oracle | auto second / oracle | rsync Mbit/s |" in md
    assert "0.73 (below)" in md and "1.09 (above)" in md  # 80/110 and 120/110
    assert "0.80 (below)" in md and "1.20 (above)" in md  # against rsync's 100
    assert "pp=8 p=1 cc=8" in md and "FAILED: exited 1: boom" in md and "a / note" in md
    assert "| auto_cold/oracle | 1 | 0.73 | pair 0: 0.73 | 1 |" in md
    assert gen.pair_table(doc).startswith(f"pair {pair.index}: ")
    json.dumps(result)  # the JSON output is plain data
    # Written after every run: before any pair is summarised, too.
    doc.pop("summary")
    early = gen.markdown({**result, "summary": gen.overall({})})
    assert "| auto_cold/oracle | 0 | n/a | n/a | |" in early and "auto cold" in early


def test_datasets_are_generated_once_and_reused(tmp_path: Path) -> None:
    pair = gen.Pair(0, 10.0, 100.0, 1.0, "uniform-small", 4242)
    sizes, _ = gen.file_sizes(pair.distribution, 600 * KIB, pair.data_seed)
    ds = gen.ensure_dataset(pair, sizes, tmp_path)
    assert ds.bytes == sum(sizes) and ds.files == len(sizes)
    first = next(iter(ds.manifest))
    stamp = os.stat(ds.path / first).st_mtime_ns
    again = gen.ensure_dataset(pair, sizes, tmp_path)
    assert again.manifest == ds.manifest and os.stat(again.path / first).st_mtime_ns == stamp


def test_dry_run_exits_0_and_moves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.generalize", "--dry-run", "--out", str(out), "--cache", str(tmp_path / "c")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"seed {gen.DEFAULT_SEED}" in done.stdout
    assert all(name in done.stdout for name in gen.DISTRIBUTIONS)
    assert "over one SSH window per RTT" in done.stdout
    assert not out.exists() and not (tmp_path / "c").exists()


def test_bad_options_are_refused() -> None:
    with pytest.raises(SystemExit):
        gen.parse_args(["--pairs", "2", "--only", "2"])
    with pytest.raises(SystemExit):
        gen.parse_args(["--reps", "0"])
    assert gen.parse_args(["--seconds", "3"]).timeout == 60.0
    assert gen.parse_args([]).timeout == 120.0


def test_grid_from_takes_only_the_grid_runs_of_the_same_draw(tmp_path):
    prev = {
        "seed": 7,
        "seconds": 12,
        "commit": "abc123",
        "date": "2026-11-25T23:29:00Z",
        "pairs": [
            {
                "index": 0,
                "runs": [
                    {"kind": gen.AUTO_COLD, "contender": "auto cold", "mbit": 1.0},
                    {"kind": gen.GRID, "contender": "fixed pp=8 p=1 cc=8", "mbit": 2.0},
                ],
            }
        ],
    }
    path = tmp_path / "prev.json"
    path.write_text(json.dumps(prev))
    got = gen.load_grid(path, 7, 12)
    assert [r["contender"] for r in got["runs"][0]] == ["fixed pp=8 p=1 cc=8"]
    assert got["source"]["commit"] == "abc123"
    with pytest.raises(SystemExit, match="different draw"):
        gen.load_grid(path, 8, 12)
