"""airflow-transfer against the tools users would pick instead, side by side on the emulated WAN.

    python -m benchmarks.run --profile wan50 --datasets small,large --contenders all --reps 3
    python -m benchmarks.run --profile lan --datasets tiny --files 20 --reps 1 --contenders airflow-transfer,openssh
    python -m benchmarks.run --profile wan50,wan100,lan --datasets all --reps 3 --resume --budget-min 45

Needs root (network namespaces). For each link profile: bring up the link
and an sshd in `dst`; for each dataset, repeat the contenders interleaved
(A B C A B C ...) so that drift in the machine's load spreads over all of
them; after each run check the destination against the dataset's manifest
and empty it. Writes `latest.json` (exactly the schema of docs/summary.md),
`latest-details.json` (every run, failures, unavailable
contenders, the load average), `report.md` and charts: see docs/benchmarks.md.

The full matrix (3 profiles x 5 datasets x every contender x 3 repetitions)
needs hours of a quiet machine, more than one sitting: `--resume` keeps the
runs already in `latest-details.json` and runs only the missing ones, and
`--budget-min` stops starting new runs after that many minutes, so repeated
`make bench` calls complete the matrix; the report lists what is still
missing and each run records the commit it measured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.contenders import all_contenders, select
from benchmarks.contenders.base import Contender, ContenderFailed, landed_bytes, verify_tree
from benchmarks.contenders.testbed import Testbed
from benchmarks.datasets import DATASETS, DEFAULT_CACHE, Dataset, ensure, resolve
from benchmarks.report import cell, cpu_rates, timed_out, write_report
from benchmarks.wan.link import PROFILES

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- provenance ------------------------------------------------------------------
def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, Linux {platform.release()}"


def host(loops: int = 2_000_000, hash_mib: int = 64) -> dict:
    """Which machine this call ran on and how fast its CPU is, measured before any link
    carries load. Machines of one kind differ (a plain Python loop ran 2x slower on one of
    them), and a matrix measured over several sessions mixes them: the report says which
    cells' repetitions came from machines of different speed."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = platform.node()
    loop_s = hash_s = float("inf")
    block = os.urandom(1 << 20)
    for _ in range(3):  # best of three: the least disturbed reading
        t0 = time.perf_counter()
        sum(i * i for i in range(loops))
        t1 = time.perf_counter()
        h = hashlib.sha256()
        for _ in range(hash_mib):
            h.update(block)
        t2 = time.perf_counter()
        loop_s, hash_s = min(loop_s, t1 - t0), min(hash_s, t2 - t1)
    return {
        "id": boot,
        "python_loop_ms": round(loop_s * 1e3 * 2_000_000 / loops, 1),
        "sha256_mb_s": round(hash_mib * 2**20 / hash_s / 1e6, 1),
    }


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# -- one run -----------------------------------------------------------------------
def one_run(bed: Testbed, contender: Contender, dataset: Dataset, rep: int, content_check: bool) -> dict:
    """Moves `dataset` once with `contender`; returns the run's record (ok or not)."""
    if contender.direction == "upload":
        local, remote = dataset.path, bed.fresh_remote_dir("upload")
    else:
        local, remote = bed.fresh_local_dir("download"), dataset.path
    landing = contender.landing(local, remote)
    os.sync()  # the previous run's dirty pages are not written back during this one
    record = {
        "link": bed.profile,
        "dataset": dataset.name,
        "contender": contender.name,
        "direction": contender.direction,
        "rep": rep,
        "ok": False,
        "load_avg_1m": os.getloadavg()[0],
    }
    server0, emu0 = bed.server_cpu(), bed.emulator_cpu()
    try:
        busy0 = machine_cpu()
        seconds = contender.run(local, remote)
        record.update(
            seconds=seconds, mbit=dataset.bytes * 8 / seconds / 1e6, machine_busy_cores=busy_cores(busy0, machine_cpu())
        )
        summary = getattr(contender, "last_summary", None)
        if summary:  # what the tuning chose, chunk by chunk: the report's explanation of a rate
            record.update(
                job_seconds=summary.get("seconds"), chunks=summary.get("chunks"), ssh_client=summary.get("ssh_client")
            )
        bed.wait_server_idle()
        record.update(verified=verify_tree(dataset, landing, content=content_check), ok=True)
    except ContenderFailed as exc:
        record["error"] = str(exc)
        if contender.last is not None and contender.last.timed_out:
            # How far it got, for the report: bytes that had arrived when it was stopped.
            record["timed_out"] = True
            record["partial_mbit"] = landed_bytes(landing) * 8 / contender.last.seconds / 1e6
    finally:
        bed.wait_server_idle()
        record.update(
            client_cpu_s=contender.usage.cpu_s,
            server_cpu_s=bed.server_cpu() - server0,
            emulator_cpu_s=bed.emulator_cpu() - emu0,
            peak_rss_mb=contender.usage.peak_rss_mb,
        )
        # Moved aside, not deleted: the next run's creates would pay for it (benchmarks/fs_settle.py).
        bed.discard(remote if contender.direction == "upload" else local)
    return record


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat: kernel work for the TUN devices and
    TCP stacks runs in softirq context, charged to no process the run accounts for."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user
    return total - idle, total


def busy_cores(before: tuple[float, float], after: tuple[float, float]) -> float:
    """How many of the machine's cores were busy on average between two machine_cpu() readings."""
    span = after[1] - before[1]
    return round((after[0] - before[0]) / span * (os.cpu_count() or 1), 2) if span > 0 else 0.0


# -- aggregation -----------------------------------------------------------------------
def summarise(runs: list[dict], datasets: dict[str, dict] | None = None) -> list[dict]:
    """One row per (dataset, link, contender) over its successful runs (latest.json's `runs`: docs/summary.md).
    `datasets` (name -> {"files", "bytes"}, as in latest-details.json) gives the CPU per GiB and per 1000
    files; a dataset it does not know gets null there."""
    datasets = datasets or {}
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["dataset"], r["link"], r["contender"]), []).append(r)
    rows = []
    for (dataset, link, contender), rs in groups.items():
        ok = [r for r in rs if r["ok"]]
        if not ok:
            continue
        mbit = [r["mbit"] for r in ok]
        cpu = statistics.median(r["client_cpu_s"] + r["server_cpu_s"] for r in ok)
        per_gib, per_kfiles = cpu_rates(cpu, datasets.get(dataset))
        rows.append(
            {
                "dataset": dataset,
                "link": link,
                "contender": contender,
                "repetitions": len(ok),
                "median_mbit": round(statistics.median(mbit), 2),
                "min_mbit": round(min(mbit), 2),
                "max_mbit": round(max(mbit), 2),
                "link_mbit": PROFILES[link][1],
                "cpu_s": round(cpu, 2),
                "peak_rss_mb": round(max(r["peak_rss_mb"] for r in ok), 1),
                "verified": all(r["verified"] for r in ok),
                "cpu_s_per_gib": per_gib,
                "cpu_s_per_1000_files": per_kfiles,
            }
        )
    return rows


def write_results(out: Path, meta: dict, runs: list[dict], details: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    latest = {
        "date": meta["date"],
        "machine": meta["machine"],
        "commit": meta["commit"],
        "runs": summarise(runs, details.get("datasets")),
    }
    for name, doc in (("latest.json", latest), ("latest-details.json", {**details, "runs": runs})):
        tmp = out / f".{name}.tmp"
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, out / name)


# -- the matrix ----------------------------------------------------------------------------
def _compile_project() -> None:
    """Bytecode for the project's own modules, as a pip install writes it: the editable
    checkout has none where PYTHONDONTWRITEBYTECODE is set, and every CLI run would then
    compile about 120 modules (0.09 s per run on this machine) that the libraries measured
    beside it, compiled in site-packages, never pay."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "airflow_transfer"), quiet=2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="wan50", help=f"comma list of {', '.join(PROFILES)} (default wan50)")
    ap.add_argument("--datasets", default="small,large", help="comma list of tiny, small, mixed, medium, large, or all")
    ap.add_argument(
        "--scale", type=float, default=1.0, help="move this fraction of each dataset's bytes (quick runs; default 1)"
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the runs already in the results directory and run only the missing ones",
    )
    ap.add_argument(
        "--budget-min",
        type=float,
        default=0.0,
        help="start no new run after this many minutes (0 = no limit; at least one run is made); "
        "--resume continues later",
    )
    ap.add_argument(
        "--contenders",
        default="all",
        help="all, or comma list of name prefixes / groups "
        "(airflow-transfer, rclone, openssh, airflow, sshfs, lftp, "
        "uploads, downloads, matrix: the set `make bench` runs, wide: the 2026-11-25 matrix's set)",
    )
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each contender (default 3)")
    ap.add_argument("--files", type=int, help="use only this many files of each dataset (development)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is stopped (default 900)")
    ap.add_argument(
        "--verify",
        choices=["hash", "size"],
        default="hash",
        help="check destinations by content digest (default) or by names and sizes only",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="results directory (default benchmarks/results)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="dataset cache directory")
    ap.add_argument("--no-charts", action="store_true", help="write report.md without PNG charts")
    ap.add_argument("--note", default="", help="a sentence for the report (e.g. what else ran on the machine)")
    ap.add_argument("--list", action="store_true", help="list the contenders and whether they can run, then exit")
    args = ap.parse_args(argv)

    try:
        profiles = [p.strip() for p in args.profile.split(",") if p.strip()]
        for p in profiles:
            if p not in PROFILES:
                raise ValueError(f"--profile: unknown profile {p!r}; choose from {', '.join(PROFILES)}")
        names = [d.strip() for d in args.datasets.split(",") if d.strip()]
        specs = resolve(list(DATASETS) if names == ["all"] else names, args.files, args.scale)
        contenders = select(all_contenders(), args.contenders)
        if args.reps < 1:
            raise ValueError("--reps must be at least 1")
    except ValueError as exc:
        say(f"benchmarks.run: {exc}")
        return 2

    unavailable: dict[str, str] = {}
    runnable: list[Contender] = []
    for c in contenders:
        avail = c.available()
        if avail:
            runnable.append(c)
        else:
            unavailable[c.name] = avail.reason
    if args.list:
        for c in contenders:
            state = f"cannot run: {unavailable[c.name]}" if c.name in unavailable else "ok"
            print(f"{c.name} [{c.direction}] - {state}")
        return 0
    for name, reason in unavailable.items():
        say(f"benchmarks.run: skipping {name}: {reason}")
    _compile_project()
    if os.geteuid() != 0:
        say(
            "benchmarks.run: needs root (network namespaces, TUN devices): run it as root, e.g. "
            "`sudo benchmarks/bench.sh quick`"
        )
        return 2
    for c in runnable:
        c.timeout = args.timeout

    datasets = [ensure(spec, args.cache) for spec in specs]  # all generated before any link carries load
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "commit": commit(),
        "host": host(),
    }
    details = {
        **meta,
        "note": args.note,
        "argv": sys.argv[1:] if argv is None else argv,
        "profiles": {p: {"rtt_ms": PROFILES[p][0], "rate_mbit": PROFILES[p][1]} for p in profiles},
        "datasets": {d.name: {"files": d.files, "bytes": d.bytes} for d in datasets},
        "contenders": {c.name: {"direction": c.direction, "description": c.description} for c in contenders},
        "unavailable": unavailable,
        "verify": args.verify,
        "reps": args.reps,
        "timeout_s": args.timeout,
    }
    runs: list[dict] = []
    if args.resume:
        runs, details = resume(args.out, details)
        details["unavailable"] = {
            k: v for k, v in details["unavailable"].items() if k not in {c.name for c in runnable}
        }
    stopped_cells = {cell(r) for r in runs if timed_out(r)}
    todo = plan(profiles, [d.name for d in datasets], args.reps, [c.name for c in runnable], runs)
    total = len(todo)
    if args.resume:
        say(
            f"benchmarks.run: resuming: {len(runs)} earlier runs kept, {total} to run"
            + (
                f" ({len(stopped_cells)} cells were stopped at the time limit once and are not repeated)"
                if stopped_cells
                else ""
            )
        )
        warning = resume_warning(runs, [c.name for c in contenders], meta["commit"])
        if warning:
            say(f"benchmarks.run: {warning}")
    by_name = {c.name: c for c in runnable}
    by_dataset = {d.name: d for d in datasets}
    done = made = 0
    t_start = time.monotonic()
    stopped = ""
    # One link per (repetition, profile): breadth first, so a budgeted call fills every cell's
    # first run before any cell's second, and the report has a figure for as many cells as it can.
    for rep in range(1, args.reps + 1):
        for profile in profiles:
            mine = [(d, c) for (r, p, d, c) in todo if (r, p) == (rep, profile)]
            if stopped or not any((profile, d, c) not in stopped_cells for d, c in mine):
                continue
            rtt, rate = PROFILES[profile]
            say(
                f"benchmarks.run: {profile} (repetition {rep}): bringing up the link ({rtt:g} ms, {rate:g} Mbit/s) "
                "and sshd"
            )
            with Testbed(profile) as bed:
                for c in runnable:
                    c.prepare(bed)
                for dname, cname in mine:
                    if stopped:
                        break
                    if (profile, dname, cname) in stopped_cells:
                        done += 1
                        say(
                            f"[{done}/{total}] {profile} {dname} rep {rep}/{args.reps} {cname}: skipped, an earlier "
                            "run was stopped at the time limit (one run places a contender that slow)"
                        )
                        continue
                    # At least one run per call, so repeated calls always make progress.
                    if args.budget_min and made and time.monotonic() - t_start > args.budget_min * 60:
                        stopped = (
                            f"time budget of {args.budget_min:g} min reached after {done} runs; "
                            f"{total - done} left for the next `--resume`"
                        )
                        say(f"benchmarks.run: {stopped}")
                        break
                    done += 1
                    made += 1
                    c, dataset = by_name[cname], by_dataset[dname]
                    prefix = (
                        f"[{done}/{total} {time.monotonic() - t_start:6.0f}s] {profile} {dname} "
                        f"rep {rep}/{args.reps} {cname}"
                    )
                    say(f"{prefix} ...")
                    rec = one_run(bed, c, dataset, rep, args.verify == "hash")
                    rec.update(
                        commit=meta["commit"],
                        host=meta["host"],
                        date=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    )
                    runs.append(rec)
                    cpu = f"cpu {rec['client_cpu_s']:.1f}+{rec['server_cpu_s']:.1f} s"
                    if rec["ok"]:
                        say(
                            f"{prefix}: {rec['mbit']:.1f} Mbit/s ({rec['mbit'] / rate:.0%} of link) in "
                            f"{rec['seconds']:.1f} s, {cpu}, rss {rec['peak_rss_mb']:.0f} MB, "
                            f"{'hash-verified' if rec['verified'] else 'sizes checked'}"
                        )
                    elif timed_out(rec):
                        say(
                            f"{prefix}: stopped at the {args.timeout:.0f} s limit, "
                            f"{rec.get('partial_mbit', 0.0):.1f} Mbit/s over what had landed (not checked)"
                        )
                    else:
                        say(f"{prefix}: FAILED: {rec['error']}")
                    if timed_out(rec):
                        stopped_cells.add(cell(rec))
                    details["finished"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    write_results(args.out, meta, runs, details)
    details["stopped"] = stopped
    if not runs:
        say("benchmarks.run: nothing ran")
    write_results(args.out, meta, runs, details)
    report = write_report(args.out, charts=not args.no_charts)
    say(
        f"benchmarks.run: {len(runs)} runs in {time.monotonic() - t_start:.0f} s; results in "
        f"{args.out / 'latest.json'}, report {report}"
    )
    return exit_status(runs)


def exit_status(runs: list[dict]) -> int:
    """0 unless a run failed: a run stopped at the time limit is a documented outcome (the
    contender is placed by its partial rate), so `make bench` must not report it as an error."""
    not_ok = [r for r in runs if not r["ok"]]
    failed = [r for r in not_ok if not timed_out(r)]
    if len(not_ok) > len(failed):
        say(
            f"benchmarks.run: {len(not_ok) - len(failed)} runs stopped at the time limit; the report shows their partial rate"
        )
    if not failed:
        return 0
    say(
        f"benchmarks.run: {len(failed)} runs FAILED (error in latest-details.json): "
        + "; ".join(sorted({f"{r['link']} {r['dataset']} {r['contender']}" for r in failed}))
    )
    return 1


def plan(
    profiles: list[str], datasets: list[str], reps: int, contenders: list[str], runs: list[dict]
) -> list[tuple[int, str, str, str]]:
    """The runs still to make, as (rep, profile, dataset, contender), in the order they run:
    repetition by repetition (breadth first), then profile, dataset, and the contenders
    interleaved (A B C, A B C). A run already in `runs` is not made again; nor is any later
    repetition of a cell one of whose runs was stopped at the time limit: that contender is
    slower than the limit allows, and one stopped run (with the rate it had reached) places it."""
    have = {(r["rep"], *cell(r)) for r in runs}
    stopped = {cell(r) for r in runs if timed_out(r)}
    return [
        (rep, p, d, c)
        for rep in range(1, reps + 1)
        for p in profiles
        for d in datasets
        for c in contenders
        if (rep, p, d, c) not in have and (p, d, c) not in stopped
    ]


def resume_warning(runs: list[dict], selected: list[str], head: str) -> str:
    """What a resumed call keeps that a fresh matrix would not: runs of contenders this call
    did not select (they stay rows of the report) and runs measured at other commits."""
    others = sorted({r["contender"] for r in runs} - set(selected))
    older = sorted({r["commit"][:12] for r in runs if r.get("commit") and r["commit"] != head})
    parts = []
    if others:
        parts.append(f"runs of {len(others)} contenders not selected now (e.g. {others[0]!r}) stay in the report")
    if older:
        parts.append(f"kept runs were measured at other commits than {head[:12]} ({', '.join(older[:5])})")
    if not parts:
        return ""
    return "; ".join(parts) + ": for a fresh matrix of one commit, run without --resume (BENCH_RESTART=1 make bench)"


def resume(out: Path, details: dict) -> tuple[list[dict], dict]:
    """Earlier runs from `out` and the details merged with this invocation's (the union of
    profiles, datasets and contenders, so the report knows the whole matrix asked for)."""
    try:
        old = json.loads((out / "latest-details.json").read_text())
    except (FileNotFoundError, ValueError):
        return [], details
    merged = dict(details)
    for key in ("profiles", "datasets", "contenders", "unavailable"):
        merged[key] = {**old.get(key, {}), **details.get(key, {})}
    merged["started"] = old.get("started", old.get("date", details["date"]))
    return old.get("runs", []), merged


if __name__ == "__main__":
    sys.exit(main())
