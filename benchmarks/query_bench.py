"""Attribute-based access on the emulated WAN: the analog of paper 004, Table 4.

    python -m benchmarks.query_bench --quick            # 10k and 50k records, one run each (smoke)
    python -m benchmarks.query_bench                    # 10k ... 10M records, 3 runs each (median)

Needs root (network namespaces). A climate-like table (latitude, longitude,
time, temperature, humidity, pressure; ~34 bytes per CSV record) is written
as CSV and as Parquet (row groups of 64k records) on the remote host (`dst`
namespace, real OpenSSH sshd); the client in `src` runs paper 004's query
`select temperature, time where humidity > 50` over the link three ways:

- copy+filter: copy the whole CSV file (`airflow-transfer copy`), then filter it locally;
- query CSV:   `airflow-transfer query` on the CSV file (every byte is read, once, with read-ahead);
- query Parquet: `airflow-transfer query` on the Parquet file (only the three needed column chunks).

Each run is a separate process in `src` measured by the testbed (wall time,
peak RSS); bytes read from the source come from the tool's own summary.
Writes benchmarks/results/query.json, query.md and query.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SIZES = [10_000, 50_000, 150_000, 375_000, 1_000_000, 10_000_000]
QUICK_SIZES = [10_000, 50_000]
SELECT, WHERE = "temperature,time", "humidity > 50"
METHODS = ("copy+filter", "query CSV", "query Parquet")
RSS_LIMIT_MB = 500
# Paper 004, Table 4 (SOAP over TCP vs DSTP over UDT, seconds), for the report only.
PAPER = {
    10_000: (0.65, 0.21),
    50_000: (2.57, 0.72),
    150_000: (11.13, 2.05),
    375_000: (51.18, 5.01),
    1_000_000: (352.10, 13.43),
}

# Copy the whole file with the project's own engine, then run the same query on the local copy.
_COPY_THEN_FILTER = r"""
import contextlib, io, json, os, sys
from airflow_transfer import cli
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.query.run import QueryRequest, run_query
src, workdir, ssh = sys.argv[1], sys.argv[2], sys.argv[3:]
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    code = cli.main(["copy", src, workdir, "--verify", "none", "-p", "4", "--json", *ssh])
if code:
    sys.exit(code)
copied = json.loads(buf.getvalue())
local = os.path.join(workdir, os.path.basename(src))
s = run_query(QueryRequest(Endpoint("file", local), Endpoint("file", os.path.join(workdir, "out.parquet")),
                           select=%r, where=%r))
s["bytes_read"] = copied["bytes"]
s["seconds"] = copied["seconds"] + s["seconds"]
print(json.dumps(s))
""" % (SELECT.split(","), WHERE)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_data(directory: Path, records: int) -> tuple[Path, Path]:
    """CSV and Parquet of `records` rows, written in slices so 10M rows need little memory."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from tests.support.climate import climate_table

    csv_path, pq_path = directory / f"climate-{records}.csv", directory / f"climate-{records}.parquet"
    if csv_path.exists() and pq_path.exists():
        return csv_path, pq_path
    step = 1_000_000
    pw = cw = None
    # Written under temporary names: an interrupted run never leaves a short file to be reused.
    tmp_csv, tmp_pq = csv_path.with_suffix(".csv.tmp"), pq_path.with_suffix(".parquet.tmp")
    try:
        for start in range(0, records, step):
            t = climate_table(min(step, records - start), seed=start // step, start=start, compact=True)
            if pw is None:
                pw = pq.ParquetWriter(tmp_pq, t.schema)
                cw = pcsv.CSVWriter(tmp_csv, t.schema)
            pw.write_table(t, row_group_size=65536)
            cw.write_table(t)
    finally:
        if pw is not None:
            pw.close()
            cw.close()
    for tmp, final in ((tmp_csv, csv_path), (tmp_pq, pq_path)):
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    return csv_path, pq_path


def run_one(bed, method: str, csv_path: Path, pq_path: Path, timeout: float) -> dict:
    ssh = ["--identity", str(bed.key), "--known-hosts", str(bed.known_hosts)]
    url = lambda p: f"sftp://{bed.user}@{bed.host}:{bed.port}{p}"
    work = bed.fresh_local_dir("query-run")
    py = sys.executable
    if method == "copy+filter":
        argv = [py, "-c", _COPY_THEN_FILTER, url(csv_path), str(work), *ssh]
    else:
        src = csv_path if method == "query CSV" else pq_path
        argv = [
            py,
            "-m",
            "airflow_transfer.cli",
            "query",
            url(src),
            str(work / "out.parquet"),
            "--select",
            SELECT,
            "--where",
            WHERE,
            "--json",
            *ssh,
        ]
    m = bed.run(argv, timeout=timeout, env=bed.env(PYTHONPATH=str(REPO)), cwd=REPO)
    row = {
        "method": method,
        "seconds": round(m.seconds, 3),
        "peak_rss_mb": round(m.peak_rss_mb, 1),
        "cpu_s": round(m.cpu_s, 2),
        "ok": m.returncode == 0 and not m.timed_out,
    }
    if row["ok"]:
        s = json.loads(m.stdout.strip().splitlines()[-1])
        row.update(bytes_read=s["bytes_read"], rows_out=s["rows"], sha256=s["sha256"], tool_s=s["seconds"])
    else:
        row["error"] = "timed out" if m.timed_out else m.tail()
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10k and 50k records, one run each")
    ap.add_argument("--sizes", help="comma-separated record counts (default: the paper's, plus 10M)")
    ap.add_argument("--reps", type=int, default=None, help="runs per method and size (median reported)")
    ap.add_argument("--profile", default="wan50")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (QUICK_SIZES if args.quick else SIZES)
    reps = args.reps or (1 if args.quick else 3)
    if os.geteuid() != 0:
        say("query_bench: needs root (network namespaces): run it with sudo")
        return 1
    sys.path.insert(0, str(REPO))
    from benchmarks.contenders.testbed import Testbed
    from benchmarks.run import commit, machine

    data_dir = Path(os.environ.get("AIRFLOW_TRANSFER_BENCH_DATA", "/var/tmp/airflow-transfer-bench/query-data"))
    data_dir.mkdir(parents=True, exist_ok=True)
    for p in (data_dir, data_dir.parent):
        os.chmod(p, 0o755)
    load = os.getloadavg()[0]
    runs: list[dict] = []
    with Testbed(args.profile) as bed:
        for records in sizes:
            t0 = time.monotonic()
            csv_path, pq_path = make_data(data_dir, records)
            say(
                f"{records} records: CSV {csv_path.stat().st_size} B, Parquet {pq_path.stat().st_size} B "
                f"(ready in {time.monotonic() - t0:.1f}s)"
            )
            got: dict[str, list[dict]] = {m: [] for m in METHODS}
            for _ in range(reps):
                for method in METHODS:  # interleaved: drift in load spreads over all three
                    row = run_one(bed, method, csv_path, pq_path, args.timeout)
                    got[method].append(row)
                    say(
                        f"  {method:14s} {row['seconds']:8.2f}s  read {row.get('bytes_read', '-')} B  "
                        f"RSS {row['peak_rss_mb']} MB  {'ok' if row['ok'] else row.get('error')}"
                    )
            # Outputs differ in row-group layout (CSV blocks vs Parquet row groups): compare row counts.
            counts = {r.get("rows_out") for rows in got.values() for r in rows if r["ok"]}
            for method, rows in got.items():
                ok = [r for r in rows if r["ok"]]
                runs.append(
                    {
                        "records": records,
                        "method": method,
                        "csv_bytes": csv_path.stat().st_size,
                        "parquet_bytes": pq_path.stat().st_size,
                        "repetitions": len(rows),
                        "ok": len(ok),
                        "median_s": statistics.median(r["seconds"] for r in ok) if ok else None,
                        "min_s": min((r["seconds"] for r in ok), default=None),
                        "max_s": max((r["seconds"] for r in ok), default=None),
                        "median_tool_s": statistics.median(r["tool_s"] for r in ok) if ok else None,
                        "bytes_read": ok[0]["bytes_read"] if ok else None,
                        "rows_out": ok[0]["rows_out"] if ok else None,
                        "peak_rss_mb": max((r["peak_rss_mb"] for r in ok), default=None),
                        "same_result": len(counts) == 1,
                        "errors": [r["error"] for r in rows if not r["ok"]],
                    }
                )
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "commit": commit(),
        "link": args.profile,
        "query": f"select {SELECT} where {WHERE}",
        "reps": reps,
        "quick": bool(args.quick),
        "load_at_start": round(load, 2),
        "command": "python -m benchmarks.query_bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "query.json").write_text(json.dumps(result, indent=1) + "\n")
    chart = draw(result, args.out / "query.png")
    (args.out / "query.md").write_text(report(result, chart))
    say(f"wrote {args.out / 'query.json'}, query.md{' and query.png' if chart else ''}")
    failed = [r for r in runs if r["ok"] < r["repetitions"] or not r["same_result"]]
    big = [
        r
        for r in runs
        if r["records"] >= 10_000_000 and r["method"].startswith("query") and (r["peak_rss_mb"] or 0) >= RSS_LIMIT_MB
    ]
    return 1 if failed or big else 0


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.1f}"


def report(result: dict, chart: Path | None) -> str:
    runs = result["runs"]
    by = {(r["records"], r["method"]): r for r in runs}
    sizes = sorted({r["records"] for r in runs})
    lines = [
        "# Attribute-based access over the emulated WAN (paper 004, Table 4 analog)",
        "",
        f"- date: {result['date']}",
        f"- machine: {result['machine']}",
        f"- commit: `{result['commit']}`",
        f"- link: `{result['link']}`; query: `{result['query']}`",
        f"- runs: {result['reps']} per method and size, interleaved; median shown"
        f"{' (quick run: indicative only)' if result['quick'] else ''}; 1-minute load at start "
        f"{result['load_at_start']}",
        f"- command: `{result['command']}`",
        "",
        "Seconds per query, end to end (process start to exit: interpreter start, imports, SSH "
        "connection and the work), and in parentheses the tool's own `seconds` (from connecting to "
        "the committed output; for copy+filter the copy's plus the local filter's). copy+filter "
        "copies the whole CSV file with `airflow-transfer copy` and filters it locally; the query "
        "columns run `airflow-transfer query` against the remote file. Paper columns: the paper's "
        "SOAP/TCP and DSTP/UDT times on its 2004 testbed (for the shape, not a like-for-like comparison).",
        "",
        "| records | CSV MB | Parquet MB | copy+filter s | query CSV s | query Parquet s | rows out "
        "| paper SOAP s | paper DSTP s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        cells = []
        for m in METHODS:
            r = by.get((n, m))
            cells.append(
                "failed" if r is None or r["median_s"] is None else f"{r['median_s']:.2f} ({r['median_tool_s']:.2f})"
            )
        any_r = next(r for r in runs if r["records"] == n)
        outs = [by[(n, m)]["rows_out"] for m in METHODS if by.get((n, m)) and by[(n, m)]["rows_out"] is not None]
        rows_out = f"{outs[0]:,}" if outs else "-"
        soap, dstp = PAPER.get(n, ("-", "-"))
        lines.append(
            f"| {n:,} | {_mb(any_r['csv_bytes'])} | {_mb(any_r['parquet_bytes'])} | "
            + " | ".join(cells)
            + f" | {rows_out} | {soap} | {dstp} |"
        )
    lines += [
        "",
        "Bytes read from the source (MB, the tool's own accounting) and peak RSS of the client process:",
        "",
        "| records | copy+filter MB | query CSV MB | query Parquet MB | Parquet read / Parquet file "
        "| peak RSS MB (copy / CSV / Parquet) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        rs = [by.get((n, m)) for m in METHODS]
        frac = "-"
        if rs[2] and rs[2]["bytes_read"]:
            frac = f"{rs[2]['bytes_read'] / rs[2]['parquet_bytes'] * 100:.0f} %"
        rss = " / ".join("-" if r is None or r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:.0f}" for r in rs)
        lines.append(f"| {n:,} | " + " | ".join(_mb(r and r["bytes_read"]) for r in rs) + f" | {frac} | {rss} |")
    ten = [r for r in runs if r["records"] >= 10_000_000 and r["method"].startswith("query")]
    if ten:
        worst = max((r["peak_rss_mb"] or 0) for r in ten)
        lines += [
            "",
            f"Memory: the 10M-record queries peaked at {worst:.0f} MB RSS "
            f"({'under' if worst < RSS_LIMIT_MB else 'OVER'} the {RSS_LIMIT_MB} MB limit).",
        ]
    bad = [r for r in runs if r["errors"] or not r["same_result"]]
    if bad:
        lines += ["", "Problems:", ""]
        for r in bad:
            what = "; ".join(e[:200] for e in r["errors"]) or "the three methods returned different row counts"
            lines.append(f"- {r['records']:,} records, {r['method']}: {what}")
    else:
        lines += ["", "All three methods returned the same number of rows at every size."]
    if chart:
        lines += ["", f"![query times and bytes]({chart.name})"]
    return "\n".join(lines) + "\n"


def draw(result: dict, path: Path) -> Path | None:
    try:
        import matplotlib
    except ImportError:
        say("query_bench: matplotlib is missing, no chart (pip install -e '.[bench]')")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"copy+filter": "#9a9a9a", "query CSV": "#e08a1e", "query Parquet": "#1f6fb4"}
    styles = {"copy+filter": "--", "query CSV": "-", "query Parquet": "-"}
    for m in METHODS:
        pts = sorted(
            (r["records"], r["median_s"], r["bytes_read"])
            for r in runs
            if r["method"] == m and r["median_s"] is not None
        )
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] for p in pts], marker="o", label=m, color=colors[m], linestyle=styles[m])
        ax2.plot(
            xs,
            [p[2] / 1e6 for p in pts],
            marker="s" if m == "copy+filter" else "o",
            markersize=7 if m == "copy+filter" else 4,
            label=m,
            color=colors[m],
            linestyle=styles[m],
        )
    paper = sorted(PAPER.items())
    ax1.plot(
        [k for k, _ in paper], [v[1] for _, v in paper], linestyle=":", color="#555555", label="paper 004 DSTP/UDT"
    )
    for ax, label in ((ax1, "seconds (median, end to end)"), (ax2, "MB read from the source")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records")
        ax.set_ylabel(label)
        ax.grid(True, which="both", linewidth=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"select temperature, time where humidity > 50 over {result['link']} - {result['date']} - "
        f"commit {result['commit'][:10]}",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
