"""Effects 1-3 of `make papers` (pipelining vs RTT, eq. 4, p vs cc): verdicts from synthetic records."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.papers import e1_pp_rtt as e1
from benchmarks.papers import e2_pp_eq4 as e2
from benchmarks.papers import e3_p_cc as e3
from benchmarks.papers.common import IN_PART, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, Case, Record

KIB, MIB = 1024, 1024 * 1024


@pytest.fixture(autouse=True)
def no_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Charts need matplotlib (seconds to import); the smoke run draws them, these tests judge."""
    for mod, name in ((e1, "e1-pp-vs-rtt.png"), (e2, "e2-pp-vs-eq4.png"), (e3, "e3-p-vs-cc.png")):
        monkeypatch.setattr(mod, "_chart", lambda *a, _n=name: _n)


def records(cases: list[Case], rate, reps: int = 2) -> list[Record]:
    """One record per case and repetition, its transfer-phase rate `rate(case, rep)` (None = failed)."""
    out = []
    for rep in range(1, reps + 1):
        for c in cases:
            mbit = rate(c, rep)
            result = {"ok": mbit is not None, "chunk_mbit": mbit, "chunk_s": 1.0}
            result.update(split_min_bytes=8 * MIB, range_min_bytes=4 * MIB)  # as e3.measure records them
            out.append(Record(c.effect, c.id, rep, dict(c.params), result, "abc", "2026-01-01T00:00:00Z", {}))
    return out


# -- effect 1 -------------------------------------------------------------------------------------
def e1_rate(gain_at: dict[str, float]):
    """pp 1 at 10 Mbit/s; the rate climbs to gain_at[link] x 10 by pp 8 and stays."""

    def rate(c: Case, rep: int) -> float:
        link, pp = str(c.profile), c.params["pp"]
        return 10.0 * min(gain_at[link], 1 + (gain_at[link] - 1) * (pp - 1) / 7) + rep * 0.01

    return rate


def test_e1_gain_growing_with_rtt_and_large_is_reproduced(tmp_path: Path) -> None:
    sec = e1.render(records(e1.cases(False), e1_rate({"lan": 1.5, "wan50": 8, "wan100": 14})), tmp_path)
    assert sec.verdict == REPRODUCED
    assert "wan100 14.0x" in sec.why and "4x" in sec.why
    assert sec.charts == ["e1-pp-vs-rtt.png"]


def test_e1_gain_not_growing_with_rtt_is_not_reproduced() -> None:
    assert e1.judge({"lan": 3.0, "wan50": 2.0, "wan100": 1.5})[0] == NOT_REPRODUCED
    # flat (within the 10 % tolerance) is not growing; small WAN gains on top of that: not reproduced
    assert e1.judge({"lan": 3.0, "wan50": 2.8, "wan100": 2.9})[0] == NOT_REPRODUCED
    # flat but large: in part; growing but small: in part
    assert e1.judge({"lan": 5.0, "wan50": 5.0, "wan100": 5.0})[0] == IN_PART
    assert e1.judge({"lan": 1.2, "wan50": 2.0, "wan100": 3.0})[0] == IN_PART
    # large but shrinking from wan50 to wan100
    assert e1.judge({"lan": 2.0, "wan50": 10.0, "wan100": 6.0})[0] == IN_PART


def test_e1_partial_and_empty_records(tmp_path: Path) -> None:
    only_lan = [c for c in e1.cases(False) if c.profile == "lan"]
    sec = e1.render(records(only_lan, e1_rate({"lan": 2.0})), tmp_path)
    assert sec.verdict == NOT_MEASURED and "wan50-pp1" in sec.notes
    assert e1.render([], Path("/nonexistent")).verdict == NOT_MEASURED


def test_e1_failed_runs_are_left_out_and_named(tmp_path: Path) -> None:
    rate = e1_rate({"lan": 1.5, "wan50": 8, "wan100": 14})
    recs = records(e1.cases(False), lambda c, rep: None if (c.id == "wan100-pp32" and rep == 2) else rate(c, rep))
    sec = e1.render(recs, tmp_path)
    assert sec.verdict == REPRODUCED and "wan100-pp32 (rep 2)" in sec.notes


# -- effect 2 -------------------------------------------------------------------------------------
def e2_rate(knee: dict[int, int]):
    """Rate linear in pp up to knee[size], flat after (a plateau with 1 % wiggle)."""

    def rate(c: Case, rep: int) -> float:
        pp, k = c.params["pp"], knee[c.params["size"]]
        return 100.0 * min(pp, k) / k * (1 + 0.01 * (pp % 3 == 0))

    return rate


def test_e2_best_pp_is_the_smallest_within_five_percent() -> None:
    assert e2.best_pp({1: 10.0, 2: 19.0, 4: 96.0, 8: 100.0, 16: 99.0}) == 4
    assert e2.best_pp({1: 10.0, 2: 19.0, 4: 90.0, 8: 100.0}) == 8


def test_e2_knees_at_the_window_bdp_are_reproduced(tmp_path: Path) -> None:
    knees = {size: e2.predictions(size)["window"] for size in e2.SETS}  # 32, 8, 2
    sec = e2.render(records(e2.cases(False), e2_rate(knees)), tmp_path)
    assert sec.verdict == REPRODUCED
    assert "window-limited" in sec.why


def test_e2_knees_far_from_eq4_are_not_reproduced_and_some_are_partial() -> None:
    assert e2.judge({64 * KIB: 4, 256 * KIB: 32, 1 * MIB: 16})[0] == NOT_REPRODUCED
    verdict, why, follows = e2.judge({64 * KIB: 32, 256 * KIB: 2, 1 * MIB: 16})
    assert verdict == IN_PART and follows in e2.EQ4
    assert e2.judge({})[0] == NOT_MEASURED


def test_e2_link_bdp_is_chosen_when_it_fits_better() -> None:
    link = {size: e2.predictions(size)["link"] for size in e2.SETS}  # 48, 12, 3
    assert e2.judge(link)[2] == "link"


# -- effect 3 -------------------------------------------------------------------------------------
def e3_rate(small_p: float, large_p: float, small_cc: float):
    """p 1 / cc 1 at 100 Mbit/s; any larger knob multiplies it by the given factor."""

    def rate(c: Case, rep: int) -> float:
        kind, p, cc = c.params["set"], c.params["p"], c.params["cc"]
        if p == 1 and cc == 1:
            return 100.0
        if kind == "large":
            return 100.0 * large_p
        return 100.0 * (small_p if p > 1 else small_cc)

    return rate


def test_e3_paper_pattern_is_reproduced(tmp_path: Path) -> None:
    sec = e3.render(records(e3.cases(False), e3_rate(small_p=0.97, large_p=1.4, small_cc=2.5)), tmp_path)
    assert sec.verdict == REPRODUCED
    assert sec.charts == ["e3-p-vs-cc.png"]
    assert "from 8 MiB up" in sec.notes and "under 8 MiB" in sec.why  # the split rule is stated, not hidden


def test_e3_verdicts_follow_the_thresholds() -> None:
    assert e3.judge(e3.ratios(_rates(small_p=1.5, large_p=1.0, small_cc=1.0)))[0] == NOT_REPRODUCED
    assert e3.judge(e3.ratios(_rates(small_p=1.0, large_p=1.05, small_cc=3.0)))[0] == IN_PART
    assert e3.judge({"small_p": None, "large_p": None, "cc_over_p": None})[0] == NOT_MEASURED


def test_e3_missing_large_set_is_said(tmp_path: Path) -> None:
    small = [c for c in e3.cases(False) if c.params["set"] == "small"]
    sec = e3.render(records(small, e3_rate(1.0, 1.4, 2.5)), tmp_path)
    assert sec.verdict == IN_PART and "large_p" in sec.why and "large-p1" in sec.notes


def _rates(**k: float) -> dict[str, float]:
    rate = e3_rate(**k)
    return {c.id: rate(c, 1) for c in e3.cases(False)}
