"""Two checkouts of this repository, copying the same small files in turn: what one change did.

    git worktree add /tmp/base <commit>
    .venv/bin/python benchmarks/pairs.py --base /tmp/base [--set 100000x1k] [--direction down] [--pairs 4]

Starts a real OpenSSH sshd on loopback, writes the file set once (NxSIZE, in directories of
100 files), waits out benchmarks/fs_settle.py's settle, then runs `airflow-transfer copy`
from this checkout and from `--base` in turn (base, this, base, this, ...), each run with
its own checkout on PYTHONPATH, into a fresh destination and against a fresh store: no run
reads a tuning library another one filled, so both start from first contact. The copies
verify as by default. Prints each run and the medians of wall seconds (process start to
exit) and machine CPU seconds (/proc/stat, all cores), and the machine's speed before and
after (benchmarks/run.py `host`): pairs compare only with each other, on one machine in one
hour. Finished destinations go to a trash directory, never deleted between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.fs_settle import discard, settle, warm
from benchmarks.run import host
from benchmarks.small_files import _make, _parse, _run
from tests.support.sshd import SSHServer, chown_to_user


def fresh_destination(work: Path, user: str) -> Path:
    """An empty directory for one run, owned by the server's login user."""
    dst = work / "dst" / uuid.uuid4().hex
    dst.mkdir(parents=True)
    chown_to_user(dst, user)
    chown_to_user(dst.parent, user)
    return dst


def checkout_copy(sshd: SSHServer, src: Path, dst: Path, direction: str, store: str, *extra: str) -> list[str]:
    """`airflow-transfer copy` of src to dst ("up": onto the server) through whichever checkout is
    on PYTHONPATH: -P keeps the working directory off sys.path, so PYTHONPATH picks it."""
    up = direction == "up"
    source, target = (str(src), sshd.url(str(dst))) if up else (sshd.url(str(src)), str(dst))
    argv = [sys.executable, "-P", "-c", "import sys; from airflow_transfer.cli import run; sys.exit(run())"]
    argv += ["copy", source, target, "--identity", str(sshd.client_key), *extra]
    return argv + ["--known-hosts", str(sshd.known_hosts), "--restart", "--store", store]


def check_landed(dst: Path, count: int, who: str) -> None:
    landed = sum(len(files) for _, _, files in os.walk(dst))
    if landed != count:
        raise SystemExit(f"{who} left {landed} of {count} files")


def checkout_parser(direction: str) -> argparse.ArgumentParser:
    """The options of a run of this checkout against another: --base, --set, --direction, --no-settle."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="another checkout of this repository (git worktree add)")
    ap.add_argument("--set", default="100000x1k", help="NxSIZE, e.g. 2000x64k")
    ap.add_argument("--direction", choices=("up", "down"), default=direction)
    ap.add_argument("--no-settle", action="store_true", help="skip the settle: a smoke run, not figures")
    return ap


def checkouts_of(args: argparse.Namespace) -> dict[str, Path]:
    """{"base": --base, "this": this checkout}; --base must be a checkout of this repository."""
    base = Path(args.base).resolve()
    if not (base / "airflow_transfer" / "cli.py").is_file():
        raise SystemExit(f"--base {base}: not a checkout of this repository (no airflow_transfer/cli.py)")
    return {"base": base, "this": REPO}


def prepared_set(work: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """(the file set --set names, written once under work; the trash folder for finished
    destinations), after the settle and with the set and the copy's modules read back."""
    count, size, name = _parse(args.set)
    src, trash = work / f"src-{name}", work / "trash"
    _make(src, count, size)
    if args.no_settle:
        trash.mkdir()
    else:
        settle(trash)
    warm([src], [[sys.executable, "-c", "import airflow_transfer.cli, airflow_transfer.job"]])
    return src, trash


def main() -> int:
    ap = checkout_parser("down")
    ap.add_argument("--pairs", type=int, default=4)
    args = ap.parse_args()
    checkouts = checkouts_of(args)
    work = Path(tempfile.mkdtemp(prefix="at-pairs-"))
    os.chmod(work, 0o755)
    sshd = SSHServer(work / "sshd").start()
    try:
        count, size, name = _parse(args.set)
        src, trash = prepared_set(work, args)
        (work / "stores").mkdir()
        speed = {"before": host()}
        rows: dict[str, list[dict]] = {c: [] for c in checkouts}
        for rep in range(args.pairs):
            for cname, tree in checkouts.items():
                dst = fresh_destination(work, sshd.user)
                argv = checkout_copy(sshd, src, dst, args.direction, f"sqlite:///{work}/stores/{uuid.uuid4().hex}.db")
                row = _run(argv, env={**os.environ, "PYTHONPATH": str(tree)})
                check_landed(dst, count, cname)
                rows[cname].append(row)
                print(cname, rep, json.dumps(row), flush=True)
                discard(dst, trash)
        speed["after"] = host()
        for cname, rs in rows.items():
            secs = statistics.median(r["seconds"] for r in rs)
            cpu = statistics.median(r["machine_cpu_s"] for r in rs)
            runs = [r["seconds"] for r in rs]
            print(f"{cname} ({checkouts[cname]}): median {secs:.2f} s, machine CPU {cpu:.2f} s; runs {runs}")
        print("machine speed:", json.dumps(speed))
    finally:
        sshd.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
