"""The verdicts of `make papers` effects 4 (PCP/MC vs Globus) and 5 (adaptive vs fixed cc) on synthetic records.

Charts are stubbed out: importing matplotlib alone would take most of this file's time budget
(the smoke runs of `python -m benchmarks.papers --quick` draw them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.papers import e4_pcp_mc_globus as e4
from benchmarks.papers import e5_adaptive_cc as e5
from benchmarks.papers.common import IN_PART, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, Record

MIB = 1 << 20


def record(effect: str, case: str, params: dict[str, Any], mbit: float, chunks: list[dict], rep: int = 1) -> Record:
    result = {"ok": True, "mbit": mbit, "seconds": 10.0, "summary": {"chunks": chunks}}
    return Record(effect, case, rep, params, result, "abc", "2026-01-01T00:00:00Z", {})


def chunk(cid: str, pp: int, p: int, cc: int, files: int, size: int, mbit: float, start: float = 0.0) -> dict:
    return {"id": cid, "files": files, "bytes": files * size, "pp": pp, "p": p, "cc": cc, "seconds": 1.0} | {
        "throughput_mbit": mbit,
        "start_s": start,
    }


def e4_records(rates: dict[tuple[str, str], dict[str, float]]) -> list[Record]:
    """Two runs per (link, shape, algorithm), at 0.98x and 1.02x the given median."""
    out = []
    for (link, shape), by_algo in rates.items():
        for algo, mbit in by_algo.items():
            params = {"link": link, "shape": shape, "algorithm": algo, "dataset": f"e4-{shape}"}
            chunks = (
                [chunk("globus.001", 21, 2, 2, 160, 4 * MIB, mbit)]
                if algo == "globus"
                else [chunk(f"{algo}.1", 8, 1, 8, 160, 4 * MIB, mbit)]
            )
            for rep, f in ((1, 0.98), (2, 1.02)):
                out.append(record("e4_pcp_mc_globus", f"{link}-{shape}-{algo}", params, mbit * f, chunks, rep))
    return out


def test_e4_both_algorithms_ahead_in_most_cells_is_reproduced() -> None:
    recs = e4_records(
        {
            ("wan50", "small"): {"pcp": 300, "mc": 420, "globus": 415},
            ("wan50", "medium"): {"pcp": 400, "mc": 410, "globus": 300},
            ("wan50", "large"): {"pcp": 375, "mc": 378, "globus": 317},
            ("wan100", "small"): {"pcp": 320, "mc": 360, "globus": 280},
        }
    )
    verdict, why = e4.judge(e4.cell_figures(recs))
    assert verdict == REPRODUCED
    assert "PCP beats Globus in 3 of 4 cells" in why and "1.05x" in why


def test_e4_ties_everywhere_are_not_reproduced() -> None:
    recs = e4_records({("wan50", s): {"pcp": 400, "mc": 405, "globus": 400} for s in ("small", "medium", "large")})
    assert e4.judge(e4.cell_figures(recs))[0] == NOT_REPRODUCED


def test_e4_only_mc_ahead_is_in_part() -> None:
    recs = e4_records(
        {
            ("wan50", "small"): {"pcp": 300, "mc": 420, "globus": 380},
            ("wan50", "medium"): {"pcp": 290, "mc": 410, "globus": 300},
            ("wan50", "large"): {"pcp": 300, "mc": 378, "globus": 317},
        }
    )
    assert e4.judge(e4.cell_figures(recs))[0] == IN_PART


def test_e4_nothing_complete_is_not_measured_and_render_says_what_is_missing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(e4, "_chart", lambda cells, charts: ["e4-pcp-mc-globus.png"])
    recs = e4_records({("wan50", "small"): {"pcp": 300, "mc": 420}})
    assert e4.judge(e4.cell_figures(recs))[0] == NOT_MEASURED
    section = e4.render(recs, tmp_path)
    assert section.verdict == NOT_MEASURED
    assert "wan50-small-globus" in section.why
    assert section.charts == ["e4-pcp-mc-globus.png"]


def test_e4_globus_connections_and_window_model() -> None:
    small = record("e4", "x", {}, 300, [chunk("globus.001", 21, 2, 2, 160, 4 * MIB, 300)])
    large = record("e4", "x", {}, 300, [chunk("globus.001", 6, 8, 2, 2, 512 * MIB, 300)])
    # 4 MiB files are not split over p = 2 (ranges of 4 MiB at least); 512 MiB files are, 8 ways.
    assert e4.connections(small) == 2
    assert e4.connections(large) == 16
    # Two 2 MiB windows per 100 ms RTT: 335.5 Mbit/s, under wan100's payload ceiling; on wan50 the link binds.
    assert round(e4.window_bound(2, "wan100"), 1) == 335.5
    assert e4.window_bound(2, "wan50") == e4.PAYLOAD_CEILING["wan50"]


def e5_records(fixed: dict[str, dict[int, float]], adaptive: dict[str, float]) -> list[Record]:
    out = []
    for shape, by_cc in fixed.items():
        for cc, mbit in by_cc.items():
            params = {"shape": shape, "algorithm": "fixed", "pp": 8, "p": 1, "cc": cc}
            out.append(
                record("e5_adaptive_cc", f"{shape}-cc{cc}", params, mbit, [chunk("fixed", 8, 1, cc, 500, MIB, mbit)])
            )
    for shape, mbit in adaptive.items():
        chunks = [chunk(f"acc.{i}", 6, 1, cc, 63, MIB, mbit, start=i) for i, cc in enumerate((2, 3, 4, 3, 4))]
        out.append(
            record("e5_adaptive_cc", f"{shape}-adaptive", {"shape": shape, "algorithm": "adaptive-cc"}, mbit, chunks)
        )
    return out


SWEEP = {1: 200.0, 2: 350.0, 4: 410.0, 8: 415.0, 16: 390.0}


def test_e5_close_to_the_oracle_on_both_datasets_is_reproduced(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(e5, "_charts", lambda figs, charts: [])
    recs = e5_records({"1mb": SWEEP, "random": SWEEP}, {"1mb": 400.0, "random": 380.0})
    section = e5.render(recs, tmp_path)
    assert section.verdict == REPRODUCED
    assert "best fixed (cc 8, 415)" in section.why
    assert "cc by chunk 2 -> 3 -> 4 -> 3 -> 4" in section.why
    assert "| 1 MiB files | acc.0 | 63 |" in section.notes


def test_e5_short_on_one_dataset_is_in_part_and_on_both_not_reproduced() -> None:
    one = e5_records({"1mb": SWEEP, "random": SWEEP}, {"1mb": 400.0, "random": 300.0})
    assert e5.judge(e5.dataset_figures(one))[0] == IN_PART
    both = e5_records({"1mb": SWEEP, "random": SWEEP}, {"1mb": 250.0, "random": 300.0})
    verdict, why = e5.judge(e5.dataset_figures(both))
    assert verdict == NOT_REPRODUCED
    assert "0.60x the best" in why and "falls short" in why


def test_e5_one_dataset_alone_cannot_be_reproduced_and_nothing_is_not_measured() -> None:
    only = e5_records({"1mb": SWEEP}, {"1mb": 410.0})
    verdict, why = e5.judge(e5.dataset_figures(only))
    assert verdict == IN_PART and "missing): random" in why
    assert e5.judge(e5.dataset_figures(e5_records({"1mb": SWEEP}, {})))[0] == NOT_MEASURED


def test_e4_pcp_probe_share_counts_every_chunk_but_the_rest() -> None:
    run = record(
        "e4",
        "x",
        {},
        300,
        [chunk("s1.001", 4, 1, 3, 10, MIB, 60), chunk("s1.rest.L3", 4, 1, 12, 30, MIB, 220)],
    )
    assert e4.probe_share(run) == 0.25
    assert e4.probe_share(None) is None


def test_e5_a_partial_sweep_names_no_oracle() -> None:
    partial = e5_records({"1mb": {1: 130.0}, "random": SWEEP}, {"1mb": 170.0, "random": 400.0})
    figs = {f["shape"]: f for f in e5.dataset_figures(partial)}
    assert figs["1mb"]["best"] is None and figs["1mb"]["vs_best"] is None
    assert e5.judge(list(figs.values()))[0] == IN_PART
