"""Effect 7 (Stork, paper 003): its verdict and timeline logic on synthetic records, no testbed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.papers import e7_stork as e7
from benchmarks.papers.common import IN_PART, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, Record

MIB = 1024 * 1024


def _rec(case: str, params: dict[str, Any], result: dict[str, Any], rep: int = 1) -> Record:
    return Record(e7.EFFECT, case, rep, params, result, "abc", "2026-01-01T00:00:00Z", {})


def _tuning(rates: dict[str, dict[str, float]], reps: int = 3) -> list[Record]:
    """Records of every (mode, link) in `rates` ({link: {mode: Mbit/s}}), `reps` each."""
    out = []
    for link, per_mode in rates.items():
        for mode, mbit in per_mode.items():
            for rep in range(1, reps + 1):
                result = {
                    "ok": True,
                    "mbit": mbit + rep,  # a little spread; the median is mbit + 2
                    "summary": {"chunks": [{"pp": 2, "p": 2, "cc": 2}]},
                    "row": {"streams": 2, "tcp_buffer": 3 * MIB, "bdp_bytes": 6 * MIB, "p": 2, "cc": 1},
                }
                out.append(_rec(f"{mode}-{link}", {"kind": "tuning", "mode": mode}, result, rep))
    return out


def _timeline(
    fallback_after: float = 0.5, probed_after: float = 1.0, switch_back: bool = True, ftp_mbit: float = 40.0
) -> dict[str, Any]:
    """A run of 30 s: sftp at 300 Mbit/s, outages at 5 s and 15 s lasting 4 s, ftp at `ftp_mbit`."""
    outages: list[dict[str, Any]] = []
    for fail in (5.0, 15.0):
        rec = fail + 4.0
        outages.append(
            {
                "failure": fail,
                "fallback": fail + fallback_after,
                "recovery": rec,
                "probed": rec + probed_after,
                "switchback": rec + 2.0 if switch_back else None,
            }
        )

    def on_ftp(t: float) -> bool:
        return any(o["fallback"] <= t < (o["switchback"] or 30.0) for o in outages)

    samples, fwd, rev, t = [], 0.0, 0.0, 0.0
    while t <= 30.0:
        samples.append([t, int(fwd), int(rev)])
        rate = ftp_mbit if on_ftp(t) else 300.0
        fwd += rate * 1e6 / 8 * 0.25
        rev += (rate if on_ftp(t) else 5.0) * 1e6 / 8 * 0.25
        t += 0.25
    return {
        "ok": True,
        "seconds": 30.0,
        "bytes": 768 * MIB,
        "bytes_moved": 780 * MIB,
        "verified_landing": True,
        "planned_outages": 2,
        "outages": outages,
        "samples": samples,
        "protocols": {"sftp": {"files": 40, "bytes_moved": 700 * MIB}, "ftp": {"files": 8, "bytes_moved": 80 * MIB}},
    }


def _fallback(result: dict[str, Any], rep: int = 1) -> Record:
    case = next(c for c in e7.cases(False) if c.params["kind"] == "fallback")
    return _rec(case.id, dict(case.params), result, rep)


@pytest.fixture(autouse=True)
def _no_drawing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The charts' names without matplotlib (seconds to import): the verdict is what is tested here."""
    monkeypatch.setattr(e7, "_tuning_chart", lambda tuning, charts: "e7-tuning.png")
    monkeypatch.setattr(e7, "_fallback_chart", lambda rec, charts: "e7-fallback.png")


GOOD = {
    "wan50": {"untuned": 200.0, "row": 220.0, "tuned": 380.0},
    "wan100": {"untuned": 120.0, "row": 200.0, "tuned": 300.0},
}
FLAT = {
    "wan50": {"untuned": 200.0, "row": 200.0, "tuned": 205.0},
    "wan100": {"untuned": 120.0, "row": 118.0, "tuned": 121.0},
}


def test_rate_between_reads_the_counter() -> None:
    samples = [[0.0, 0, 0], [1.0, 125_000_000 // 10, 0], [2.0, 2 * 125_000_000 // 10, 0]]
    assert e7.rate_between(samples, 0.0, 2.0) == 100.0
    assert e7.rate_between(samples, 0.0, 0.1) is None  # shorter than a bin
    assert e7.rate_between(samples, None, 2.0) is None


def test_good_tuning_and_timeline_reproduce(tmp_path: Path) -> None:
    recs = _tuning(GOOD) + [_fallback(_timeline(), rep) for rep in (1, 2)]
    section = e7.render(recs, tmp_path)
    assert section.verdict == REPRODUCED, section.why
    assert "1.5" in section.why and "wan100" in section.why
    assert section.charts == ["e7-tuning.png", "e7-fallback.png"]
    assert "| wan100 |" in section.table and "| 1.2 |" in section.table
    assert "Not measured yet" not in section.notes


def test_no_gain_and_no_switch_back_is_not_reproduced(tmp_path: Path) -> None:
    recs = _tuning(FLAT) + [_fallback(_timeline(switch_back=False))]
    section = e7.render(recs, tmp_path)
    assert section.verdict == NOT_REPRODUCED, section.why
    assert "no switch back" in section.why


def test_one_part_alone_is_in_part(tmp_path: Path) -> None:
    assert e7.render(_tuning(GOOD) + [_fallback(_timeline(fallback_after=20.0))], tmp_path).verdict == IN_PART
    assert e7.render(_tuning(FLAT) + [_fallback(_timeline())], tmp_path).verdict == IN_PART


def test_partial_records_say_what_is_missing(tmp_path: Path) -> None:
    section = e7.render(_tuning({"wan50": GOOD["wan50"]}), tmp_path)
    assert section.verdict == IN_PART  # one link and no fall-back run cannot reproduce the whole claim
    assert "not measured on wan100" in section.why and "Fall-back: not measured yet" in section.why
    assert "fallback-wan50" in section.notes and section.charts == ["e7-tuning.png"]
    assert e7.verdict([], [])[0] == NOT_MEASURED


def test_failed_copies_are_left_out() -> None:
    recs = _tuning(GOOD)
    for r in recs:
        if r.case == "tuned-wan100":
            r.result["ok"] = False
    rows = {t["link"]: t for t in e7.tuning_rows(recs)}
    assert rows["wan100"]["ratio"] is None and rows["wan50"]["ratio"] > 1.5
    assert e7.verdict(list(rows.values()), [])[0] == IN_PART


def test_timeline_judgement_names_the_first_fault() -> None:
    assert e7.timeline_judgement(_timeline())[0]
    late = e7.timeline_judgement(_timeline(fallback_after=20.0))
    assert not late[0] and "fell back 20.0 s" in late[1]
    unprobed = e7.timeline_judgement(_timeline(probed_after=9.0))
    assert not unprobed[0] and "no login" in unprobed[1]
    idle = e7.timeline_judgement(_timeline(ftp_mbit=0.0))
    assert not idle[0] and "nothing crossed the link while on FTP" in idle[1]
    short = _timeline()
    short["outages"] = short["outages"][:1]
    assert "1 of 2 failures injected" in e7.timeline_judgement(short)[1]
    wrong = {**_timeline(), "verified_landing": False}
    assert "byte-exact" in e7.timeline_judgement(wrong)[1]


def test_cases_fit_the_runner() -> None:
    full, quick = e7.cases(False), e7.cases(True)
    assert len({c.id for c in full}) == len(full) == 7
    assert {c.profile for c in full} == {"wan50", "wan100"}
    assert all(c.effect == e7.EFFECT for c in full + quick)
    fb = next(c for c in full if c.params["kind"] == "fallback")
    assert len(fb.params["fail_at"]) == 2  # the paper's Fig. 5.2 shows two outages
