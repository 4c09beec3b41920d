"""Effect 6's model and verdict on synthetic records (no testbed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.papers import e6_integrity as e6
from benchmarks.papers.common import IN_PART, NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, Record

MIB = 1024 * 1024
SIZES = [128 * MIB] * 4
BLOCKS = sum(SIZES) // (8 * MIB)  # 64


def _record(
    cid: str, seconds: float, rep: int = 1, c_probe: tuple[float, float] = (0.2, 0.4), start: float = 0.0
) -> Record:
    case = next(c for c in e6.cases(False) if c.id == cid)
    result: dict[str, Any] = {
        "ok": True,
        "seconds": seconds,
        "bytes": sum(SIZES),
        "transfer_s": seconds - start,
        "file_sizes": SIZES,
        "verify": {"c_block_helper_s": None},
        "helpers": case.params["threads"],
        "helper_read_bytes": sum(SIZES) if case.params["mode"] != "none" else 0,
    }
    if cid == "none":
        per_byte = [c / (8 * MIB) for c in c_probe]
        result["c_probe"] = {
            "balanced": {"disk_s_per_byte": per_byte[0], "mem_s_per_byte": 1e-9},
            "checksum-bound": {"disk_s_per_byte": per_byte[1], "mem_s_per_byte": 1e-9},
            "fsync": {"s_per_byte": 1e-9},
        }
    return Record(e6.EFFECT, cid, rep, dict(case.params), result, "abc", "2026-01-01", {})


def _set(**seconds: float) -> list[Record]:
    return [_record(cid.replace("_", "-"), s) for cid, s in seconds.items()]


def _fig(recs: list[Record]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, float]]]:
    return e6.figures(recs), e6.tc(recs)


# t = 0.2 s per block (12.8 s unverified), c = 0.2 s (balanced) and 0.4 s (checksum-bound):
# the model says sequential 25.6, file 16.0, block 13.0; c ~ 2t: 1 thread 25.8, 2 threads 13.0.
IDEAL = {
    "none": 12.8,
    "sequential": 25.6,
    "file": 16.0,
    "block": 13.0,
    "block_cb_t1": 25.8,
    "block_cb_t2": 13.0,
    "block_cb_t4": 12.9,
}


def test_model_matches_table_i_for_equal_files() -> None:
    recs = _set(**IDEAL)
    fig = e6.figures(recs)
    assert abs(fig["sequential"]["predicted"] - BLOCKS * 0.4) < 1e-6  # n (t + c)
    assert abs(fig["file"]["predicted"] - (5 * 3.2)) < 1e-6  # T1 + 3 max(T, C) + C4, T = C = 3.2 s
    assert abs(fig["block"]["predicted"] - (BLOCKS * 0.2 + 0.2)) < 1e-6  # n t + c
    assert abs(fig["block-cb-t1"]["predicted"] - (BLOCKS * 0.4 + 0.2)) < 1e-6  # n c + t
    assert abs(fig["block-cb-t2"]["predicted"] - (BLOCKS * 0.2 + 0.2)) < 1e-6  # c / 2 = t


def test_pipelined_as_the_model_says_is_reproduced() -> None:
    verdict, why = e6.judge(*_fig(_set(**IDEAL)))
    assert verdict == REPRODUCED, why
    assert "1.97x" in why and "1.5x" in why


def test_no_gain_over_sequential_is_not_reproduced() -> None:
    # The regime was not built (c tiny): all modes alike, threads useless.
    flat = {k: 12.8 * f for k, f in {"none": 1, "sequential": 1.05, "file": 1.03, "block": 1.02}.items()}
    flat |= {"block_cb_t1": 13.2, "block_cb_t2": 13.1, "block_cb_t4": 13.1}
    verdict, why = e6.judge(*_fig(_set(**flat)))
    assert verdict == NOT_REPRODUCED, why


def test_gain_with_a_model_miss_is_only_in_part() -> None:
    # Block beats sequential 1.6x, but file-level runs 40 % over its prediction.
    verdict, why = e6.judge(*_fig(_set(**(IDEAL | {"file": 22.4, "block": 16.0}))))
    assert verdict == IN_PART
    assert "file +40%" in why


def test_threads_without_gain_is_in_part() -> None:
    verdict, why = e6.judge(*_fig(_set(**(IDEAL | {"block_cb_t2": 24.0}))))
    assert verdict == IN_PART
    assert "below the 1.5x threshold" in why


def test_partial_and_empty_records(tmp_path: Path, monkeypatch) -> None:
    # matplotlib is a benchmark extra, not installed for `make test`: the chart's input is checked instead
    drawn: list[dict[str, Any]] = []
    monkeypatch.setattr(e6, "_chart", lambda fig, charts: drawn.append(fig) or "e6-integrity.png")
    verdict, why = e6.judge(*_fig(_set(none=12.8, sequential=25.6)))
    assert verdict == NOT_MEASURED and "Not measured yet" in why
    assert e6.render([], tmp_path).verdict == NOT_MEASURED
    section = e6.render(_set(none=12.8, sequential=25.6, block=13.0), tmp_path)
    assert section.verdict == IN_PART  # the headline holds; the thread comparison is missing
    assert "block-cb-t1" in section.notes
    assert section.charts == ["e6-integrity.png"]
    assert len(drawn) == 1 and {"none", "sequential", "block"} <= set(drawn[0])


def test_failed_runs_are_left_out() -> None:
    recs = _set(**IDEAL)
    bad = _record("block", 99.0, rep=2)
    bad.result.update(ok=False, error="exit 1")
    fig = e6.figures([*recs, bad])
    assert fig["block"]["measured"] == 13.0 and fig["block"]["runs"] == 1


def test_the_fixed_start_is_not_overlapped_with_checksums() -> None:
    # 2 s of start before the first block moves: t comes from the other 12.8 s, and every
    # prediction adds the 2 s rather than spreading them over the blocks.
    recs = [_record("none", 14.8, start=2.0), _record("block-cb-t1", 27.8), _record("sequential", 27.6)]
    fig = e6.figures(recs)
    assert abs(fig["block-cb-t1"]["predicted"] - (2.0 + BLOCKS * 0.4 + 0.2)) < 1e-6
    assert abs(fig["sequential"]["predicted"] - (2.0 + BLOCKS * 0.4)) < 1e-6
