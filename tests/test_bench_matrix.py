"""The benchmark matrix's bookkeeping (benchmarks/run.py plan, benchmarks/report.py coverage):
which runs a budgeted, resumed call makes next, and what the report says about the cells
that have no full set of repetitions. Pure functions over run records; no link needed."""

from __future__ import annotations

from pathlib import Path

from benchmarks.contenders import all_contenders, select
from benchmarks.report import (
    DATASET_ORDER,
    PROFILE_ORDER,
    _canonical,
    coverage,
    coverage_section,
    coverage_summary,
    hosts_section,
    mixed_speed_cells,
    results_table,
    write_report,
)
from benchmarks.run import host, plan


def run(link: str, dataset: str, contender: str, rep: int, ok: bool = True, partial: float | None = None) -> dict:
    r = {
        "link": link,
        "dataset": dataset,
        "contender": contender,
        "rep": rep,
        "ok": ok,
        "client_cpu_s": 1.0,
        "server_cpu_s": 1.0,
        "emulator_cpu_s": 0.5,
        "peak_rss_mb": 50.0,
    }
    if ok:
        r.update(mbit=100.0 + rep, seconds=10.0, verified=True)
    else:
        r["error"] = "stopped after 120 s" if partial is not None else "exit status 1: boom"
    if partial is not None:
        r.update(timed_out=True, partial_mbit=partial)
    return r


def test_plan_is_breadth_first_and_keeps_contenders_interleaved() -> None:
    todo = plan(["wan50", "lan"], ["small", "large"], 2, ["A", "B"], [])
    assert todo[:4] == [
        (1, "wan50", "small", "A"),
        (1, "wan50", "small", "B"),
        (1, "wan50", "large", "A"),
        (1, "wan50", "large", "B"),
    ]
    # Every cell's first repetition comes before any cell's second.
    first_second = next(i for i, t in enumerate(todo) if t[0] == 2)
    assert all(t[0] == 1 for t in todo[:first_second]) and first_second == 8 and len(todo) == 16


def test_plan_skips_runs_made_and_cells_stopped_at_the_time_limit() -> None:
    runs = [
        run("wan50", "small", "A", 1),
        run("wan50", "small", "B", 1, ok=False, partial=12.5),
        run("wan50", "large", "A", 1, ok=False),
    ]  # a failure (not a stop) is retried in later reps
    todo = plan(["wan50"], ["small", "large"], 3, ["A", "B"], runs)
    assert (1, "wan50", "small", "A") not in todo and (2, "wan50", "small", "A") in todo
    assert not [t for t in todo if t[2:] == ("small", "B")]
    assert (1, "wan50", "large", "A") not in todo and (2, "wan50", "large", "A") in todo
    assert len(todo) == 2 + 2 + 3  # small A reps 2-3, large A reps 2-3, large B reps 1-3


def details_for(runs: list[dict], reps: int = 3) -> dict:
    return {
        "profiles": {"wan50": {"rtt_ms": 50.0, "rate_mbit": 500.0}, "lan": {"rtt_ms": 1.0, "rate_mbit": 1000.0}},
        "datasets": {"small": {"files": 1000, "bytes": 2**30}, "large": {"files": 2, "bytes": 2**30}},
        "contenders": {
            "A": {"direction": "upload", "description": "a"},
            "B": {"direction": "upload", "description": "b"},
        },
        "unavailable": {},
        "reps": reps,
        "timeout_s": 120.0,
        "runs": runs,
    }


def test_coverage_says_why_each_incomplete_cell_is_missing() -> None:
    runs = [run("wan50", "small", c, rep) for c in "AB" for rep in (1, 2, 3)]
    runs += [run("wan50", "large", "A", 1), run("wan50", "large", "B", 1, ok=False, partial=20.0)]
    details = details_for(runs)
    missing = coverage(details)
    assert ("wan50", "small", "A") not in missing
    assert ("wan50", "large", "B") not in missing  # stopped once: complete with that run
    assert missing[("wan50", "large", "A")] == "1 of 3 repetitions made; the rest not run yet"
    assert missing[("lan", "small", "A")] == "not run yet"
    text = "\n".join(coverage_section(details))
    assert "- lan / small: not run yet: all 2 contenders" in text
    assert "continues the matrix" in text
    assert coverage_summary(details).startswith(
        "2 profiles x 2 datasets x 2 contenders = 8 cells: 4 have a figure, 3 are complete"
    )
    details["unavailable"] = {"B": "rclone is not installed"}
    assert coverage(details)[("lan", "large", "B")] == "cannot run here: rclone is not installed"


def test_a_stopped_cell_is_a_row_with_its_partial_rate(tmp_path: Path) -> None:
    import json

    runs = [run("wan50", "large", "A", rep) for rep in (1, 2, 3)]
    runs.append(run("wan50", "large", "B", 1, ok=False, partial=20.0))
    runs.append(run("wan50", "small", "B", 1, ok=False, partial=7.25))  # a dataset with only a stopped cell
    details = details_for(runs)
    latest = {
        "date": "2026-11-24T00:00:00Z",
        "machine": "test",
        "commit": "0" * 40,
        "runs": [
            {
                "dataset": "large",
                "link": "wan50",
                "contender": "A",
                "repetitions": 3,
                "median_mbit": 102.0,
                "min_mbit": 101.0,
                "max_mbit": 103.0,
                "link_mbit": 500.0,
                "cpu_s": 2.0,
                "peak_rss_mb": 50.0,
                "verified": True,
            }
        ],
    }
    table = results_table(latest, details)
    assert "| B | 20.0 *stopped* | - | 4% |" in table
    assert "| B | 7.2 *stopped* |" in table and "small (1000 files" in table
    assert table.index("| A | 102.0") < table.index("| B | 20.0")  # fastest first, stopped rows included
    assert "Runs stopped at the time limit" in table and "Runs that failed" not in table
    (tmp_path / "latest.json").write_text(json.dumps(latest))
    (tmp_path / "latest-details.json").write_text(json.dumps(details))
    report = write_report(tmp_path, charts=False).read_text()  # charts need matplotlib, a benchmark-only install
    assert "coverage: 2 profiles x 2 datasets x 2 contenders = 8 cells: 3 have a figure" in report


def test_the_matrix_group_leaves_out_the_diagnostic_rows() -> None:
    everything = all_contenders()
    matrix = select(everything, "matrix")
    names = {c.name for c in matrix}
    assert "rsync -a -e ssh" in names and "OpenSSH scp -r" in names and "OpenSSH sftp -b (put -r)" in names
    assert "airflow-transfer untuned (pp=1 p=1 cc=1)" in names
    assert {c.direction for c in matrix} == {"upload", "download"}
    assert not any("--verify-mode file" in n or "(openssh)" in n or "one SFTP channel" in n for n in names)
    assert 0 < len(matrix) < len(everything)


def test_tables_follow_reading_order_whatever_order_the_pieces_ran_in() -> None:
    assert _canonical(["large", "tiny-n10", "small", "other"], DATASET_ORDER) == ["tiny-n10", "small", "large", "other"]
    assert _canonical(["lan", "wan100", "wan50"], PROFILE_ORDER) == ["wan50", "wan100", "lan"]


def test_host_reading_is_a_real_measurement() -> None:
    h = host(loops=200_000, hash_mib=4)
    assert len(h["id"]) == 8 and h["python_loop_ms"] > 0 and h["sha256_mb_s"] > 0


def test_report_names_cells_whose_repetitions_mix_machines_of_different_speed() -> None:
    fast = {"id": "aaaa1111", "python_loop_ms": 100.0, "sha256_mb_s": 900.0}
    near = {"id": "bbbb2222", "python_loop_ms": 110.0, "sha256_mb_s": 880.0}
    slow = {"id": "cccc3333", "python_loop_ms": 200.0, "sha256_mb_s": 500.0}
    runs = [
        {**run("wan50", "small", "A", 1), "date": "2026-11-24T10:00:00Z"},  # no host: older record
        {**run("wan50", "small", "A", 2), "host": fast, "date": "2026-11-25T10:00:00Z"},
        {**run("wan50", "small", "B", 1), "host": fast, "date": "2026-11-25T10:01:00Z"},
        {**run("wan50", "small", "B", 2), "host": near, "date": "2026-11-25T11:00:00Z"},
        {**run("wan50", "large", "A", 1), "host": fast, "date": "2026-11-25T10:02:00Z"},
        {**run("wan50", "large", "A", 2), "host": slow, "date": "2026-11-26T10:00:00Z"},
        {**run("wan50", "large", "B", 2, ok=False), "host": slow, "date": "2026-11-26T10:01:00Z"},
        {**run("wan50", "large", "B", 1), "host": fast, "date": "2026-11-25T10:03:00Z"},
    ]
    mixed, unknown = mixed_speed_cells(runs)
    # 10 % apart is the same speed; a failed run does not count; 2x apart is mixed.
    assert mixed == [("wan50", "large", "A")] and unknown == 1
    text = "\n".join(hosts_section(details_for(runs)))
    assert "- not recorded: 1 runs, 2026-11-24T10:00:00Z" in text
    assert "- cccc3333: 2 runs, 2026-11-26T10:00:00Z to 2026-11-26T10:01:00Z; plain Python loop 200 ms" in text
    assert "more than 20% apart in plain-Python speed: 1;" in text and "no CPU reading: 1." in text
