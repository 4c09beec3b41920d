"""When a copy's bytes start and stop moving on an emulated link: start-up, body and tail.

    python -m benchmarks.timeline --profile wan50 --dataset tiny --reps 6
    python -m benchmarks.timeline --profile lan --dataset tiny --reps 6 --base /tmp/old-checkout --rsync
    python -m benchmarks.timeline --profile wan50 --dataset tiny --direction down --reps 6

Each run uploads the dataset (or with `--direction down` downloads it from the server side
into a fresh local directory) with `airflow-transfer copy --algorithm auto` against a new,
empty tuning store (first contact, as a user's first copy over a link meets it) into a fresh
directory of the benchmark's test bed (benchmarks/contenders/testbed.py), with progress lines
every 0.05 s read as they come. From them:

- `first_bytes_s`: the first progress line with bytes moved (process start = 0);
- `all_bytes_s`: the first line with every byte handed to the channels;
- `done_s`: the summary line (every file verified and renamed);
- `total_s`: the process's exit.

`--base DIR` runs the same command from another checkout of this repository (for instance
`git worktree add /tmp/base HEAD~1`) in turn with this one, so a change is measured against
what it changed, interleaved (`--base-python` runs it under another interpreter, to include
a change of interpreter); `--rsync` adds `rsync -a -e ssh` (its total only). Medians per
contender go to stdout and, with every run, to timeline.json in `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.contenders.airflow_transfer import bed_ssh_flags, cli_argv, sftp_url
from benchmarks.contenders.testbed import Testbed
from benchmarks.datasets import ensure

# Runs the command line of the checkout named by argv[1]: an editable install of this checkout
# would otherwise answer the import (its finder comes before sys.path).
_OTHER_CHECKOUT = (
    "import sys; root = sys.argv.pop(1); "
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
    "sys.path.insert(0, root); sys.argv[0] = 'airflow-transfer'; "
    "from airflow_transfer.cli import run; run()"
)


# A progress line: "1744/2000 files, 112.0 MiB/125.0 MiB (89%), 388 Mbit/s, ..." (docs/cli.md).
_PROGRESS = re.compile(r"^\d+/\d+ files, (?P<done>[\d.,]+ \S+)/(?P<total>[\d.,]+ \S+) \(")


def _timeline(lines: list[tuple[float, str]]) -> dict[str, float | None]:
    progress = [(t, m) for t, line in lines if (m := _PROGRESS.match(line))]
    moved = [(t, m["done"] != "0 B", m["done"] == m["total"]) for t, m in progress]
    return {
        "first_bytes_s": next((round(t, 3) for t, some, _ in moved if some), None),
        "all_bytes_s": next((round(t, 3) for t, _, whole in moved if whole), None),
        "done_s": next((round(t, 3) for t, line in lines if line.startswith("done:")), None),
    }


def _copy(bed: Testbed, argv_head: list[str], src: str, dst: str, store: Path) -> dict:
    argv = [
        *argv_head,
        "copy",
        src,
        dst,
        "--algorithm",
        "auto",
        "--json",
        "--no-skip",
        "--restart",
        "--transfer-key",
        uuid.uuid4().hex,
        "--progress-interval",
        "0.05",
        "--store",
        f"sqlite:///{store}",
        *bed_ssh_flags(bed),
    ]
    t0 = time.monotonic()
    proc = bed.link.run_in("src", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=bed.env(), text=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in proc.stderr:
            lines.append((time.monotonic() - t0, line.rstrip()))

    reader = threading.Thread(target=read)
    reader.start()
    out = proc.stdout.read()
    proc.wait()
    total = time.monotonic() - t0
    reader.join()
    if proc.returncode != 0:
        raise SystemExit(f"copy failed ({proc.returncode}): {lines[-3:]}")
    summary = json.loads(out.strip().splitlines()[-1])
    chunks = summary.get("chunks") or []
    return {
        **_timeline(lines),
        "total_s": round(total, 3),
        "chosen": " ".join(f"pp={c.get('pp')} cc={c.get('cc')}" for c in chunks),
        "transport": [c.get("transport") for c in chunks],
    }


def _rsync(bed: Testbed, src: str, dst: str) -> dict:
    ssh = shlex.join(["ssh", "-p", str(bed.port), *bed.ssh_options()])
    t0 = time.monotonic()
    bed.link.run("src", ["rsync", "-a", "-e", ssh, f"{src}/", f"{dst}/"], timeout=600)
    return {"total_s": round(time.monotonic() - t0, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="wan50")
    ap.add_argument("--dataset", default="tiny")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--base", help="another checkout of this repository, run in turn with this one")
    ap.add_argument(
        "--base-python",
        default=sys.executable,
        help="the interpreter the --base checkout runs under (a venv's python with this project's dependencies); "
        "default: this one",
    )
    ap.add_argument("--rsync", action="store_true", help="add rsync -a -e ssh")
    ap.add_argument("--direction", choices=("up", "down"), default="up", help="upload (default) or download")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    dataset = ensure(args.dataset)
    contenders: dict[str, list[str] | None] = {"this checkout": cli_argv()}
    if args.base:
        contenders[f"base ({args.base})"] = [args.base_python, "-c", _OTHER_CHECKOUT, str(Path(args.base).resolve())]
    if args.rsync:
        contenders["rsync -a -e ssh"] = None
    runs: list[dict] = []
    bed = Testbed(args.profile).up()
    try:
        for rep in range(args.reps):
            for name, head in contenders.items():
                if args.direction == "up":
                    landing = bed.fresh_remote_dir("upload")
                    src, dst = str(dataset.path), sftp_url(bed, landing)
                    rsync_src, rsync_dst = src, f"{bed.user}@{bed.host}:{landing}"
                else:  # the dataset cache is readable by the sshd's user (testbed.py)
                    landing = bed.fresh_local_dir("download")
                    src, dst = sftp_url(bed, dataset.path), str(landing)
                    rsync_src, rsync_dst = f"{bed.user}@{bed.host}:{dataset.path}", dst
                os.sync()  # the last run's dirty pages are written back before this one
                store = bed.work / f"store-{uuid.uuid4().hex}.db"  # empty: first contact every time
                run = _rsync(bed, rsync_src, rsync_dst) if head is None else _copy(bed, head, src, dst, store)
                landed = sum(len(files) for _, _, files in os.walk(landing))
                if landed != dataset.files:
                    raise SystemExit(f"{name} left {landed} of {dataset.files} files")
                runs.append({"contender": name, "rep": rep, **run})
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    finally:
        bed.down()
    medians = {}
    for name in contenders:
        mine = [r for r in runs if r["contender"] == name]
        medians[name] = {
            key: round(statistics.median(r[key] for r in mine), 3)
            for key in ("first_bytes_s", "all_bytes_s", "done_s", "total_s")
            if all(r.get(key) is not None for r in mine)
        }
        medians[name]["total_range_s"] = [min(r["total_s"] for r in mine), max(r["total_s"] for r in mine)]
        medians[name]["mbit"] = round(dataset.bytes * 8 / medians[name]["total_s"] / 1e6, 1)
    doc = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "profile": args.profile,
        "direction": args.direction,
        "dataset": {"name": args.dataset, "files": dataset.files, "bytes": dataset.bytes},
        "reps": args.reps,
        "python": sys.executable,
        "base": {"checkout": args.base, "python": args.base_python} if args.base else None,
        "medians": medians,
        "runs": runs,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "timeline.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(medians, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
