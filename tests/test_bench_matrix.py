"""The benchmark matrix's bookkeeping (benchmarks/run.py plan, benchmarks/report.py coverage):
which runs a budgeted, resumed call makes next, and what the report says about the cells
that have no full set of repetitions. Pure functions over run records; no link needed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from benchmarks.contenders import MATRIX, all_contenders, lftp, select
from benchmarks.report import (
    DATASET_ORDER,
    PROFILE_ORDER,
    _canonical,
    coverage,
    coverage_section,
    coverage_summary,
    hosts_section,
    mixed_speed_cells,
    near_best,
    results_table,
    write_report,
)
from benchmarks.run import host, plan, resume_warning, summarise

REPO = Path(__file__).resolve().parents[1]


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


def test_the_wide_group_leaves_out_the_diagnostic_rows() -> None:
    everything = all_contenders()
    matrix = select(everything, "wide")
    names = {c.name for c in matrix}
    assert "rsync -a -e ssh" in names and "OpenSSH scp -r" in names and "OpenSSH sftp -b (put -r)" in names
    assert "airflow-transfer untuned (pp=1 p=1 cc=1)" in names
    assert {c.direction for c in matrix} == {"upload", "download"}
    assert not any("--verify-mode file" in n or "(openssh)" in n or "one SFTP channel" in n for n in names)
    assert 0 < len(matrix) < len(everything)


def test_the_matrix_group_is_auto_the_tools_near_the_best_of_the_earlier_matrix_and_lftp() -> None:
    # The rule, applied to the matrix the selection was drawn from (kept in its own folder when
    # latest.json is replaced): every other tool within 25 % of a cell's best, plus auto and lftp.
    earlier = REPO / "benchmarks" / "results" / "matrix-2026-11-25"
    latest = json.loads((earlier / "latest.json").read_text())
    details = json.loads((earlier / "latest-details.json").read_text())
    near = near_best(latest, details, within=0.25)
    lftp_row = "lftp mirror -R --parallel=16 --use-pget-n=4"
    assert set(MATRIX) == near | {"airflow-transfer --algorithm auto", lftp_row}
    assert {
        "rsync -a -e ssh",
        "fsspec sshfs put (file list)",
        "rclone --transfers 16 chunk 255k (hash check off)",
    } <= near
    # A tighter rule picks fewer: the function measures, it does not list everything.
    assert near_best(latest, details, within=0.05) < near
    chosen = select(all_contenders(), "matrix")
    assert [c.name for c in chosen] == [n for n in MATRIX if n in {c.name for c in chosen}]
    assert {c.name for c in chosen} == set(MATRIX) and {c.direction for c in chosen} == {"upload"}
    # The other groups stay reachable by name, as bench.sh's extra options pass them.
    assert [c.name for c in select(all_contenders(), "lftp")] == [
        lftp_row,
        "lftp download mirror --parallel=16 --use-pget-n=4",
    ]


def test_lftp_runs_over_the_testbeds_ssh_options_with_the_host_key_pinned() -> None:
    ssh = [
        "ssh",
        "-a",
        "-x",
        "-F",
        "/w/ssh_config",
        "-i",
        "/w/key dir/id",
        "-o",
        "UserKnownHostsFile=/w/known_hosts",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
    ]
    up = lftp.script(ssh, "attest", "10.9.0.2", 2222, "/data/tiny", '/remote/a "b"', reverse=True)
    commands = up.split("; ")
    setting, value = commands[0].split(" ", 2)[1:]
    assert setting == "sftp:connect-program"
    # lftp's quoting undone, then the shell's: exactly the ssh argv given, the spaced path one word.
    assert shlex.split(value[1:-1].replace('\\"', '"')) == ssh
    assert "set sftp:auto-confirm no" in commands and "set net:max-retries 1" in commands
    assert commands[-2] == "open sftp://attest:@10.9.0.2:2222"
    assert commands[-1] == 'mirror -R --parallel=16 --use-pget-n=4 "/data/tiny" "/remote/a \\"b\\""'
    down = lftp.script(ssh, "attest", "10.9.0.2", 2222, "/remote/tiny", "/local", reverse=False)
    assert down.split("; ")[-1] == 'mirror --parallel=16 --use-pget-n=4 "/remote/tiny" "/local"'
    assert lftp.quote("a\\b") == '"a\\\\b"'


def test_latest_json_rows_carry_cpu_per_gib_and_per_1000_files() -> None:
    runs = [run("lan", "tiny", "A", rep) for rep in (1, 2, 3)]
    runs[1]["client_cpu_s"] = 3.0  # one run at 4 s, two at 2 s: the median is 2 s
    runs.append(run("lan", "other", "A", 1))
    rows = {r["dataset"]: r for r in summarise(runs, {"tiny": {"files": 2000, "bytes": 2000 * 65536}})}
    tiny = rows["tiny"]
    assert tiny["cpu_s"] == 2.0
    assert tiny["cpu_s_per_gib"] == 2.0 / (2000 * 65536 / 2**30) and tiny["cpu_s_per_1000_files"] == 1.0
    # A dataset whose size is not recorded: the fields are there, null.
    assert rows["other"]["cpu_s_per_gib"] is None and rows["other"]["cpu_s_per_1000_files"] is None


def test_report_compares_auto_with_the_best_other_tool_and_its_cpu_with_rsyncs(tmp_path: Path) -> None:
    auto, rsync, sshfs = "airflow-transfer --algorithm auto", "rsync -a -e ssh", "fsspec sshfs put (file list)"
    tiny = {"files": 2000, "bytes": 2000 * 65536}
    details = {
        "profiles": {"wan50": {"rtt_ms": 50.0, "rate_mbit": 500.0}, "lan": {"rtt_ms": 1.0, "rate_mbit": 1000.0}},
        "datasets": {"tiny": tiny, "large": {"files": 2, "bytes": 2**30}},
        "contenders": {
            auto: {"direction": "upload", "description": "a"},
            rsync: {"direction": "upload", "description": "r"},
            sshfs: {"direction": "upload", "description": "s"},
            "rclone download": {"direction": "download", "description": "d"},
        },
        "reps": 1,
        "runs": [],
    }

    def row(link: str, dataset: str, name: str, mbit: float, cpu: float) -> dict:
        link_mbit = details["profiles"][link]["rate_mbit"]
        return {
            "dataset": dataset,
            "link": link,
            "contender": name,
            "repetitions": 1,
            "median_mbit": mbit,
            "min_mbit": mbit,
            "max_mbit": mbit,
            "link_mbit": link_mbit,
            "cpu_s": cpu,
            "peak_rss_mb": 50.0,
            "verified": True,
        }

    rows = [
        row("wan50", "tiny", auto, 350.0, 3.0),
        row("wan50", "tiny", rsync, 200.0, 2.0),
        row("wan50", "tiny", "rclone download", 400.0, 9.0),  # a download is not an upload cell's best
        row("lan", "tiny", auto, 300.0, 8.0),
        row("lan", "tiny", rsync, 400.0, 2.0),
        row("lan", "large", auto, 700.0, 6.0),
        row("lan", "large", sshfs, 800.0, 5.0),
    ]
    rows[0].update(cpu_s_per_gib=24.0, cpu_s_per_1000_files=1.5)  # a new row: its own fields are used
    latest = {"date": "2026-11-26T00:00:00Z", "machine": "test", "commit": "0" * 40, "runs": rows}
    table = results_table(latest, details)
    assert "| CPU s (client+server) | CPU s/GiB | CPU s/1000 files |" in table
    # Older rows without the fields: derived from cpu_s and the dataset's size (8 s / 0.122 GiB, 8 s / 2).
    assert f"| {auto} | 300.0 | 300.0 - 300.0 | 30% | 8.0 | 65.5 | 4.00 |" in table
    assert "| wan50 | tiny | 350.0 | rsync -a -e ssh | 200.0 | 1.75x | 24.0 | 16.4 | 1.50 | 1.00 | 1.50x |" in table
    assert "| lan | tiny | 300.0 | rsync -a -e ssh | 400.0 | 0.75x | 65.5 | 16.4 | 4.00 | 1.00 | 4.00x |" in table
    assert f"| lan | large | 700.0 | {sshfs} | 800.0 | 0.88x | 6.0 | - | 3000.00 | - | - |" in table
    assert "`auto` at or above the best other tool in 1 of 3 cells." in table
    assert "- wan50 tiny: auto 1.50 CPU s per 1000 files, rsync 1.00: 1.50x rsync's, within the 1.5x target" in table
    assert "- lan tiny: auto 4.00 CPU s per 1000 files, rsync 1.00: 4.00x rsync's, above the 1.5x target" in table
    assert "(auto moved 70% of the link)" in table
    (tmp_path / "latest.json").write_text(json.dumps(latest))
    (tmp_path / "latest-details.json").write_text(json.dumps(details))
    report = write_report(tmp_path, charts=False).read_text()
    assert "auto / rsync CPU" in report and "within the 1.5x target" in report


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


def test_a_resumed_call_says_what_it_keeps_that_a_fresh_matrix_would_not() -> None:
    head = "a" * 40
    runs = [{**run("lan", "tiny", "A", 1), "commit": head}, {**run("lan", "tiny", "B", 1), "commit": "b" * 40}]
    warning = resume_warning(runs, ["A"], head)
    assert "runs of 1 contenders not selected now (e.g. 'B')" in warning
    assert "other commits than aaaaaaaaaaaa (bbbbbbbbbbbb)" in warning and "BENCH_RESTART=1" in warning
    assert resume_warning(runs[:1], ["A", "B"], head) == ""
