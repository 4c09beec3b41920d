"""Markdown report and charts from benchmark results (benchmarks/run.py writes the inputs).

    python -m benchmarks.report                            # benchmarks/results/report.md + PNG charts
    python -m benchmarks.report --docs docs/benchmarks.md  # only refresh the results table in the docs

Inputs: `latest.json` (schema: docs/summary.md) and, when present,
`latest-details.json` (every run, failures, unavailable contenders, load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
BEGIN, END = "<!-- BEGIN RESULTS (python -m benchmarks.report --docs docs/benchmarks.md) -->", "<!-- END RESULTS -->"


def cell(run: dict) -> tuple[str, str, str]:
    """A run's cell of the matrix: (link, dataset, contender)."""
    return run["link"], run["dataset"], run["contender"]


def timed_out(run: dict) -> bool:
    """Whether a run was stopped at the time limit (older records only carry the partial rate)."""
    return bool(run.get("timed_out") or "partial_mbit" in run)


# The rows the per-cell comparison is about: our default and the reference peer.
AUTO = "airflow-transfer --algorithm auto"
RSYNC = "rsync -a -e ssh"
# auto's CPU (client + server) per 1000 files on `tiny`, as a multiple of rsync's, that the
# small-file work aims to stay within.
TINY_CPU_TARGET = 1.5


def cpu_rates(cpu_s: float, dataset: dict | None) -> tuple[float | None, float | None]:
    """CPU seconds (client + server) per GiB of payload and per 1000 files of `dataset`
    ({"files", "bytes"}, as latest-details.json records it); (None, None) when its size is not known."""
    if not dataset or not dataset.get("bytes") or not dataset.get("files"):
        return None, None
    return round(cpu_s / (dataset["bytes"] / 2**30), 3), round(cpu_s / (dataset["files"] / 1000), 3)


def row_cpu_rates(row: dict, details: dict) -> tuple[float | None, float | None]:
    """A latest.json row's CPU per GiB and per 1000 files: its own fields, or (rows written before
    they existed) derived from its `cpu_s` and the dataset's size in the details."""
    if row.get("cpu_s_per_gib") is not None and row.get("cpu_s_per_1000_files") is not None:
        return row["cpu_s_per_gib"], row["cpu_s_per_1000_files"]
    return cpu_rates(row["cpu_s"], details.get("datasets", {}).get(row["dataset"]))


def load(results: Path) -> tuple[dict, dict]:
    latest_path = results / "latest.json"
    try:
        latest = json.loads(latest_path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"benchmarks.report: {latest_path} not found: run `python -m benchmarks.run` first") from None
    try:
        details = json.loads((results / "latest-details.json").read_text())
    except FileNotFoundError:
        details = {}
    return latest, details


# Reading order for profiles and datasets (a matrix measured in pieces records them in the
# order the pieces asked for them): the shortest RTT last, the smallest files first.
PROFILE_ORDER = ("wan50", "wan100", "lan")
DATASET_ORDER = ("tiny", "small", "mixed", "medium", "large")


def _canonical(names: list[str], order: tuple[str, ...]) -> list[str]:
    base = [n.split("-")[0] for n in names]  # scaled or cut sets: "small-x0.1", "tiny-n10"
    return [n for _, n in sorted(zip(base, names), key=lambda t: order.index(t[0]) if t[0] in order else len(order))]


def _order(values: list[str], known: list[str]) -> list[str]:
    return sorted(set(values), key=lambda v: (known.index(v) if v in known else len(known), v))


def _dataset_label(name: str, details: dict) -> str:
    d = details.get("datasets", {}).get(name)
    if not d:
        return name
    return f"{name} ({d['files']} files, {d['bytes'] / 2**20:,.0f} MiB)"


def stopped_cells(details: dict) -> dict[tuple[str, str, str], dict]:
    """Cells with no finished run but one stopped at the time limit: (link, dataset, contender) ->
    that run, whose `partial_mbit` is the rate over the bytes that had landed when it was stopped."""
    finished = {cell(r) for r in details.get("runs", []) if r.get("ok")}
    out: dict[tuple[str, str, str], dict] = {}
    for r in details.get("runs", []):
        key = cell(r)
        if not r.get("ok") and timed_out(r) and key not in finished:
            out.setdefault(key, r)
    return out


def results_table(latest: dict, details: dict | None = None) -> str:
    """The results as Markdown: one table per link profile and dataset, fastest first; a cell
    stopped at the time limit is a row too, its rate marked as partial."""
    details = details or {}
    runs = latest.get("runs", [])
    stopped = stopped_cells(details)
    if not runs and not stopped:
        return "_No results yet: run `benchmarks/bench.sh quick`._\n"
    profile_order = _canonical(list(details.get("profiles", {})), PROFILE_ORDER)
    dataset_order = _canonical(list(details.get("datasets", {})), DATASET_ORDER)
    limit = details.get("timeout_s")
    out = [f"Measured {latest['date']} on {latest['machine']}, commit `{latest['commit'][:12]}`.", ""]
    if stopped:
        out += [
            f"A rate marked *stopped* is from a run stopped at the time limit"
            f"{f' ({limit:.0f} s)' if limit else ''}: the payload that had landed by then over the time "
            "taken. Such a contender is slower than the limit allows; its cell is run once, not repeated, "
            "and its files are not checked.",
            "",
        ]
    cells = [(r["link"], r["dataset"]) for r in runs] + [(k[0], k[1]) for k in stopped]
    for link in _order([c[0] for c in cells], profile_order):
        p = details.get("profiles", {}).get(link)
        link_desc = f"{link} ({p['rtt_ms']:g} ms RTT, {p['rate_mbit']:g} Mbit/s)" if p else link
        link_mbit = p["rate_mbit"] if p else None
        for dataset in _order([c[1] for c in cells if c[0] == link], dataset_order):
            rows = [r for r in runs if r["link"] == link and r["dataset"] == dataset]
            partial = [(name, r) for (lk, ds, name), r in stopped.items() if (lk, ds) == (link, dataset)]
            lines = [(r["median_mbit"], _row(r, details)) for r in rows]
            lines += [
                (r["partial_mbit"], _stopped_row(name, r, link_mbit or (rows[0]["link_mbit"] if rows else 0)))
                for name, r in partial
            ]
            out += [
                f"**{link_desc}, {_dataset_label(dataset, details)}**",
                "",
                "| contender | median Mbit/s | min - max | of link | CPU s (client+server) | CPU s/GiB "
                "| CPU s/1000 files | emulator CPU s | machine busy (cores) | peak RSS MB | verified | runs |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
            ]
            out += [line for _, line in sorted(lines, key=lambda t: -t[0])]
            out.append("")
    out += comparison_section(latest, details)
    problems = problems_section(details)
    if problems:
        out += problems
    return "\n".join(out)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(r: dict, details: dict) -> str:
    emu, busy = _median_of(details, r, "emulator_cpu_s"), _median_of(details, r, "machine_busy_cores")
    per_gib, per_kfiles = row_cpu_rates(r, details)
    return (
        f"| {r['contender']} | {r['median_mbit']:.1f} | {r['min_mbit']:.1f} - {r['max_mbit']:.1f} "
        f"| {r['median_mbit'] / r['link_mbit']:.0%} | {r['cpu_s']:.1f} | {_num(per_gib)} | {_num(per_kfiles, 2)} "
        f"| {'-' if emu is None else f'{emu:.1f}'} | {'-' if busy is None else f'{busy:.2f}'} "
        f"| {r['peak_rss_mb']:.0f} | {'content' if r['verified'] else 'sizes'} | {r['repetitions']} |"
    )


def _stopped_row(name: str, r: dict, link_mbit: float) -> str:
    share = f"{r['partial_mbit'] / link_mbit:.0%}" if link_mbit else "-"
    busy = r.get("machine_busy_cores")
    return (
        f"| {name} | {r['partial_mbit']:.1f} *stopped* | - | {share} "
        f"| {r.get('client_cpu_s', 0) + r.get('server_cpu_s', 0):.1f} | - | - | {r.get('emulator_cpu_s', 0):.1f} "
        f"| {'-' if busy is None else f'{busy:.2f}'} | {r.get('peak_rss_mb', 0):.0f} | not checked | 0 of 1 |"
    )


def _is_other_upload(name: str, details: dict) -> bool:
    """A row of another tool than airflow-transfer that uploads (the direction the cells compare)."""
    direction = details.get("contenders", {}).get(name, {}).get("direction", "upload")
    return not name.startswith("airflow-transfer") and direction == "upload"


def near_best(latest: dict, details: dict, within: float = 0.25) -> set[str]:
    """The other tools' upload rows whose median came within `within` (a fraction) of the best
    upload row of some cell, airflow-transfer's rows included in "best": the rule that chose
    the `matrix` contenders (benchmarks/contenders/__init__.py) from an earlier matrix."""
    best: dict[tuple[str, str], float] = {}
    uploads = [
        r
        for r in latest.get("runs", [])
        if details.get("contenders", {}).get(r["contender"], {}).get("direction", "upload") == "upload"
    ]
    for r in uploads:
        key = (r["link"], r["dataset"])
        best[key] = max(best.get(key, 0.0), r["median_mbit"])
    return {
        r["contender"]
        for r in uploads
        if _is_other_upload(r["contender"], details)
        and r["median_mbit"] >= (1 - within) * best[(r["link"], r["dataset"])]
    }


def comparison_section(latest: dict, details: dict) -> list[str]:
    """Per cell (profile x dataset): auto against the best other upload tool, and auto's CPU
    (client + server) per GiB and per 1000 files against rsync's; then, for the `tiny` cells,
    auto's CPU per 1000 files as a multiple of rsync's against TINY_CPU_TARGET."""
    runs = latest.get("runs", [])
    by_cell: dict[tuple[str, str], dict[str, dict]] = {}
    for r in runs:
        by_cell.setdefault((r["link"], r["dataset"]), {})[r["contender"]] = r
    if not any(AUTO in rows or RSYNC in rows for rows in by_cell.values()):
        return []
    links = _order([k[0] for k in by_cell], _canonical(list(details.get("profiles", {})), PROFILE_ORDER))
    datasets = _order([k[1] for k in by_cell], _canonical(list(details.get("datasets", {})), DATASET_ORDER))
    out = [
        "**`auto` per cell: against the best other tool (uploads), and its CPU against rsync's** "
        "(CPU is client + server seconds, the median run's, per GiB of payload and per 1000 files)",
        "",
        "| profile | dataset | auto Mbit/s | best other tool | its Mbit/s | auto / best | auto CPU s/GiB "
        "| rsync CPU s/GiB | auto CPU s/1000 files | rsync CPU s/1000 files | auto / rsync CPU |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ahead = compared = 0
    tiny: list[str] = []
    for link in links:
        for dataset in datasets:
            rows = by_cell.get((link, dataset))
            if not rows:
                continue
            auto, rsync = rows.get(AUTO), rows.get(RSYNC)
            others = [r for name, r in rows.items() if _is_other_upload(name, details)]
            best = max(others, key=lambda r: r["median_mbit"]) if others else None
            a_gib, a_kf = row_cpu_rates(auto, details) if auto else (None, None)
            r_gib, r_kf = row_cpu_rates(rsync, details) if rsync else (None, None)
            share = auto["median_mbit"] / best["median_mbit"] if auto and best else None
            cpu_ratio = a_kf / r_kf if a_kf is not None and r_kf else None
            if share is not None:
                compared += 1
                ahead += share >= 1.0
            out.append(
                f"| {link} | {dataset} | {_num(auto and auto['median_mbit'])} | {best['contender'] if best else '-'} "
                f"| {_num(best and best['median_mbit'])} | {'-' if share is None else f'{share:.2f}x'} "
                f"| {_num(a_gib)} | {_num(r_gib)} | {_num(a_kf, 2)} | {_num(r_kf, 2)} "
                f"| {'-' if cpu_ratio is None else f'{cpu_ratio:.2f}x'} |"
            )
            if dataset.split("-")[0] == "tiny" and cpu_ratio is not None:
                verdict = "within" if cpu_ratio <= TINY_CPU_TARGET else "above"
                rate = f" (auto moved {auto['median_mbit'] / auto['link_mbit']:.0%} of the link)" if auto else ""
                tiny.append(
                    f"- {link} {dataset}: auto {a_kf:.2f} CPU s per 1000 files, rsync {r_kf:.2f}: "
                    f"{cpu_ratio:.2f}x rsync's, {verdict} the {TINY_CPU_TARGET:g}x target{rate}"
                )
    out.append("")
    if compared:
        out += [f"`auto` at or above the best other tool in {ahead} of {compared} cells.", ""]
    if tiny:
        out += [
            f"On `tiny`, auto's CPU (client + server) per 1000 files as a multiple of rsync's "
            f"(target: at most {TINY_CPU_TARGET:g}x):",
            "",
            *tiny,
            "",
        ]
    return out


def _median_of(details: dict, row: dict, field: str) -> float | None:
    """Median of `field` over a cell's successful runs; None when no run recorded it (older runs)."""
    values = [
        r[field]
        for r in details.get("runs", [])
        if r.get("ok") and field in r and cell(r) == (row["link"], row["dataset"], row["contender"])
    ]
    return statistics.median(values) if values else None


def problems_section(details: dict) -> list[str]:
    out: list[str] = []
    failed = [r for r in details.get("runs", []) if not r.get("ok") and not timed_out(r)]
    if failed:
        out += ["Runs that failed (not in the medians above):", ""]
        for r in failed:
            out.append(f"- {r['link']} {r['dataset']} rep {r['rep']}, {r['contender']}: {r['error']}")
        out.append("")
    stopped = [r for r in details.get("runs", []) if not r.get("ok") and timed_out(r)]
    if stopped:
        out += ["Runs stopped at the time limit (their cells are not repeated):", ""]
        for r in stopped:
            out.append(
                f"- {r['link']} {r['dataset']} rep {r['rep']}, {r['contender']}: {r['error']} "
                f"(had moved {r['partial_mbit']:.1f} Mbit/s when stopped)"
            )
        out.append("")
    if details.get("unavailable"):
        out += ["Contenders that could not run:", ""]
        out += [f"- {name}: {reason}" for name, reason in details["unavailable"].items()]
        out.append("")
    out += coverage_section(details)
    out += hosts_section(details)
    return out


# Two machines whose plain-Python loop differs by more than this are "of different speed":
# the engine's per-file and per-block work is Python, and on 2 cores it binds the CPU-bound cells.
SPEED_SPREAD = 1.2


def hosts_section(details: dict) -> list[str]:
    """Which machines the runs came from, and which cells mix machines of different speed.
    Runs recorded before the `host` field existed are counted as one unknown group."""
    runs = details.get("runs", [])
    if not runs:
        return []
    hosts: dict[str, dict] = {}
    for r in runs:
        h = r.get("host") or {"id": "not recorded"}
        entry = hosts.setdefault(h["id"], {**h, "runs": 0, "first": r.get("date", ""), "last": r.get("date", "")})
        entry["runs"] += 1
        entry["first"], entry["last"] = min(entry["first"], r.get("date", "")), max(entry["last"], r.get("date", ""))
    lines = [
        "Machines the runs came from (each call of `benchmarks.run` records its machine's boot id and a "
        "CPU reading taken before any link carries load):",
        "",
    ]
    for hid, h in sorted(hosts.items(), key=lambda kv: kv[1]["first"]):
        speed = (
            f"plain Python loop {h['python_loop_ms']:.0f} ms, SHA-256 {h['sha256_mb_s']:.0f} MB/s"
            if "python_loop_ms" in h
            else "no CPU reading (runs made before it was recorded)"
        )
        lines.append(f"- {hid}: {h['runs']} runs, {h['first']} to {h['last']}; {speed}")
    mixed, unknown = mixed_speed_cells(runs)
    if mixed or unknown:
        lines += [
            "",
            f"Cells whose successful repetitions came from machines more than "
            f"{SPEED_SPREAD - 1:.0%} apart in plain-Python speed: {len(mixed)}; cells with repetitions "
            f"from more than one machine where one has no CPU reading: {unknown}. The min-max range of these "
            "cells may include the machines' difference.",
        ]
    return lines + [""]


def mixed_speed_cells(runs: list[dict]) -> tuple[list[tuple[str, str, str]], int]:
    """(cells whose successful runs came from machines of different speed, number of cells with
    runs from several machines of which at least one has no CPU reading)."""
    per_cell: dict[tuple[str, str, str], dict[str, float | None]] = {}
    for r in runs:
        if r.get("ok"):
            h = r.get("host") or {"id": "not recorded"}
            per_cell.setdefault(cell(r), {})[h["id"]] = h.get("python_loop_ms")
    mixed, unknown = [], 0
    for key, machines in per_cell.items():
        if len(machines) < 2:
            continue
        speeds = [v for v in machines.values() if v]
        if len(speeds) < len(machines):
            unknown += 1
        if len(speeds) >= 2 and max(speeds) / min(speeds) > SPEED_SPREAD:
            mixed.append(key)
    return mixed, unknown


def coverage(details: dict) -> dict[tuple[str, str, str], str]:
    """Every cell of the matrix asked for (profile x dataset x contender) that is not complete,
    with why: a contender that cannot run here, or repetitions not yet made (the matrix is run in
    time-budgeted pieces). A cell stopped at the time limit is complete with its one run."""
    reps = details.get("reps") or 0
    counts: dict[tuple[str, str, str], int] = {}
    for r in details.get("runs", []):
        key = cell(r)
        counts[key] = counts.get(key, 0) + 1
    stopped = {cell(r) for r in details.get("runs", []) if not r.get("ok") and timed_out(r)}
    unavailable = details.get("unavailable", {})
    missing: dict[tuple[str, str, str], str] = {}
    for link in _canonical(list(details.get("profiles", {})), PROFILE_ORDER):
        for dataset in _canonical(list(details.get("datasets", {})), DATASET_ORDER):
            for name in details.get("contenders", {}):
                key = (link, dataset, name)
                have = counts.get(key, 0)
                if have >= reps or key in stopped:
                    continue
                missing[key] = (
                    f"cannot run here: {unavailable[name]}"
                    if name in unavailable
                    else "not run yet"
                    if not have
                    else f"{have} of {reps} repetitions made; the rest not run yet"
                )
    return missing


def coverage_summary(details: dict) -> str:
    """One line: how much of the matrix asked for has a figure, and how much has every repetition."""
    cells = [
        (lk, ds, c)
        for lk in details.get("profiles", {})
        for ds in details.get("datasets", {})
        for c in details.get("contenders", {})
    ]
    if not cells:
        return ""
    missing = coverage(details)
    measured = {cell(r) for r in details.get("runs", []) if r.get("ok") or timed_out(r)}
    with_figure = sum(1 for c in cells if c in measured)
    complete = sum(1 for c in cells if c not in missing)
    return (
        f"{len(details.get('profiles', {}))} profiles x {len(details.get('datasets', {}))} datasets x "
        f"{len(details.get('contenders', {}))} contenders = {len(cells)} cells: {with_figure} have a figure, "
        f"{complete} are complete ({details.get('reps')} repetitions, or one run stopped at the time limit), "
        f"{len(cells) - with_figure} not run yet"
    )


def coverage_section(details: dict) -> list[str]:
    """The incomplete cells, grouped by profile and dataset so a matrix run in pieces stays readable."""
    missing = coverage(details)
    if not missing:
        return []
    names = list(details.get("contenders", {}))
    groups: dict[tuple[str, str, str], list[str]] = {}
    for (link, dataset, name), why in missing.items():
        groups.setdefault((link, dataset, why), []).append(name)
    lines = []
    for (link, dataset, why), who in groups.items():
        listed = f"all {len(who)} contenders" if len(who) == len(names) > 1 else "; ".join(who)
        lines.append(f"- {link} / {dataset}: {why}: {listed}")
    stopped = details.get("stopped")
    head = (
        "Cells of the matrix with fewer runs than asked for"
        + (f" ({stopped})" if stopped else "")
        + "; `make bench` (`--resume`) continues the matrix:"
    )
    return [head, "", *lines, ""]


def draw_charts(latest: dict, details: dict, results: Path) -> list[Path]:
    """One PNG per link profile: median throughput per contender (min-max whiskers), a panel per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    runs = latest.get("runs", [])
    # A cell stopped at the time limit is drawn as a hatched bar at the rate it had reached.
    partial = [
        {
            "link": lk,
            "dataset": ds,
            "contender": c,
            "median_mbit": r["partial_mbit"],
            "min_mbit": r["partial_mbit"],
            "max_mbit": r["partial_mbit"],
            "stopped": True,
        }
        for (lk, ds, c), r in stopped_cells(details).items()
    ]
    profiles = details.get("profiles", {})
    for link in _order([r["link"] for r in runs + partial], _canonical(list(profiles), PROFILE_ORDER)):
        mine = [r for r in runs + partial if r["link"] == link]
        datasets = _order([r["dataset"] for r in mine], _canonical(list(details.get("datasets", {})), DATASET_ORDER))
        contenders = _order([r["contender"] for r in mine], list(details.get("contenders", {})))
        height = 1.0 + 0.28 * len(contenders)
        fig, axes = plt.subplots(
            1, len(datasets), figsize=(5.2 * len(datasets) + 4.5, height), sharey=True, squeeze=False
        )
        rate = profiles.get(link, {}).get("rate_mbit") or next(r["link_mbit"] for r in mine if "link_mbit" in r)
        for ax, dataset in zip(axes[0], datasets):
            by_name = {r["contender"]: r for r in mine if r["dataset"] == dataset}
            ys = list(range(len(contenders)))
            med = [by_name[c]["median_mbit"] if c in by_name else 0 for c in contenders]
            lo = [by_name[c]["median_mbit"] - by_name[c]["min_mbit"] if c in by_name else 0 for c in contenders]
            hi = [by_name[c]["max_mbit"] - by_name[c]["median_mbit"] if c in by_name else 0 for c in contenders]
            colors = ["#1f6fb4" if c.startswith("airflow-transfer") else "#9a9a9a" for c in contenders]
            bars = ax.barh(ys, med, xerr=[lo, hi], color=colors, ecolor="#333333", capsize=2)
            for y, c, m, bar in zip(ys, contenders, med, bars):
                if c in by_name and by_name[c].get("stopped"):
                    bar.set_hatch("////")
                    bar.set_alpha(0.6)
                    ax.text(m + rate * 0.01, y, f"{m:.0f} (stopped)", va="center", fontsize=6)
                elif c in by_name:
                    ax.text(m + rate * 0.01, y, f"{m:.0f}", va="center", fontsize=6)
                else:
                    ax.text(rate * 0.01, y, "not run yet / failed", va="center", fontsize=7, color="#aa0000")
            ax.axvline(rate, color="#cc5500", linestyle="--", linewidth=1)
            ax.set_xlim(0, rate * 1.05)
            ax.set_title(_dataset_label(dataset, details), fontsize=9)
            ax.set_xlabel("payload Mbit/s (dashed: link rate; hatched: stopped at the time limit)", fontsize=8)
            ax.tick_params(labelsize=7)
        axes[0][0].set_yticks(range(len(contenders)))
        axes[0][0].set_yticklabels(contenders, fontsize=7)
        axes[0][0].invert_yaxis()  # shared y: the first contender on top in every panel
        p = details.get("profiles", {}).get(link, {})
        fig.suptitle(
            f"{link} ({p.get('rtt_ms', '?')} ms RTT, {p.get('rate_mbit', rate):g} Mbit/s) - "
            f"{latest['date']} - commit {latest['commit'][:10]}\n{latest['machine']}",
            fontsize=8,
        )
        fig.tight_layout()
        path = results / f"throughput-{link}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made


def write_report(results: Path = RESULTS, charts: bool = True) -> Path:
    """Writes results/report.md (and throughput-<profile>.png); returns the report's path."""
    latest, details = load(results)
    pngs = draw_charts(latest, details, results) if charts and (latest.get("runs") or stopped_cells(details)) else []
    loads = [r["load_avg_1m"] for r in details.get("runs", []) if "load_avg_1m" in r]
    lines = [
        "# Benchmark report: airflow-transfer and the alternatives on the emulated WAN",
        "",
        f"- date: {latest['date']}",
        f"- machine: {latest['machine']}",
        f"- commit: `{latest['commit']}`",
    ]
    commits = sorted({r["commit"][:12] for r in details.get("runs", []) if r.get("commit")})
    if len(commits) > 1:
        lines.append(f"- the matrix was measured in pieces, at commits {', '.join(commits)} (each run records its own)")
    for name, p in details.get("profiles", {}).items():
        lines.append(
            f"- link profile `{name}`: {p['rtt_ms']:g} ms RTT, {p['rate_mbit']:g} Mbit/s "
            "(userspace emulator, docs/testbed.md; payload ceiling about 96.5 % of the rate)"
        )
    if details:
        lines.append(
            f"- repetitions: {details.get('reps')} interleaved (A B C A B C ...); destination checked by "
            f"{'content digest (xxh3-128)' if details.get('verify') == 'hash' else 'names and sizes'} "
            f"after every run; time limit {details.get('timeout_s', 0):.0f} s per run"
        )
        lines.append(f"- command: `python -m benchmarks.run {' '.join(details.get('argv', []))}`")
    summary = coverage_summary(details)
    if summary:
        lines.append(f"- coverage: {summary}")
    if loads:
        lines.append(
            f"- 1-minute load average at the start of each run: {min(loads):.1f} - {max(loads):.1f} "
            f"on {_cores(latest['machine'])} cores"
        )
    if details.get("note"):
        lines += ["", f"> {details['note']}"]
    lines += [
        "",
        "CPU is client + server seconds, also per GiB of payload and per 1000 files; the link "
        "emulator's own CPU is its own column. Machine busy "
        "is the average number of cores busy during the run (/proc/stat, so kernel work for the TUN "
        "devices and TCP stacks counts too): near the core count, the run was CPU-bound. RSS is the "
        "client's peak. `verified`: `content` = every file's digest matched, `sizes` = names and sizes "
        "only. What each contender is and how it is configured: docs/benchmarks.md.",
        "",
    ]
    lines.append(results_table(latest, details))
    for png in pngs:
        lines += [f"![throughput {png.stem}]({png.name})", ""]
    contenders = details.get("contenders", {})
    if contenders:
        lines += ["## Contenders", ""]
        lines += [f"- **{name}** ({c['direction']}): {c['description']}" for name, c in contenders.items()]
        lines.append("")
    path = results / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path


def _cores(machine: str) -> str:
    for part in machine.split(","):
        if part.strip().endswith("cores"):
            return part.strip().split()[0]
    return "?"


def refresh_docs(doc: Path, results: Path = RESULTS) -> None:
    """Replaces the generated block of `doc` with the current results table."""
    latest, details = load(results)
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"benchmarks.report: {doc} has no results markers ({BEGIN} ... {END}): add them first")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = results_table(latest, details)
    note = details.get("note")
    if note:
        body = f"> {note}\n\n{body}"
    doc.write_text(f"{head}{BEGIN}\n{body.rstrip()}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--no-charts", action="store_true")
    ap.add_argument("--docs", type=Path, help="refresh the results block of this Markdown file (and nothing else)")
    args = ap.parse_args(argv)
    if args.docs:
        refresh_docs(args.docs, args.results)
        print(f"refreshed {args.docs}", file=sys.stderr)
        return 0
    path = write_report(args.results, charts=not args.no_charts)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
