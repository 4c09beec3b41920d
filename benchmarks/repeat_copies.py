"""The same copy again and again against one store, as a scheduled job runs it: what the tuning
library learns copy after copy, and what the next copy pays for it, from two checkouts in turn.

    git worktree add /tmp/base <commit>
    .venv/bin/python benchmarks/repeat_copies.py --base /tmp/base [--set 100000x1k]
        [--direction up] [--copies 5] [--noise ON/OFF] [--seed-cc N] [--out FILE]

Starts a real OpenSSH sshd on loopback, writes the file set once (NxSIZE, in directories of 100
files), waits out benchmarks/fs_settle.py's settle, then copies it `--copies` times from each
checkout in turn (base, this, base, this, ...), each run with its own checkout on PYTHONPATH and
into a fresh destination. Unlike benchmarks/pairs.py, each checkout keeps one store for all its
runs: its first copy is a first contact, every later one starts from what the earlier ones left
in the tuning library. Prints, per run, the wall seconds (process start to exit), the machine's
CPU seconds (/proc/stat, all cores), the channels each chunk ran with and the level the library
kept; then per checkout the levels kept, copy after copy, and the medians of the copies after
the first. The copies verify as by default. `--noise 3/6`: another tenant's bursts, every core
kept busy for 3 s out of every 9 while the copies run (both checkouts meet the same bursts,
taking turns), so that the intervals of one copy read faster and slower than each other, as
they do on a shared host. `--seed-cc 16`: each store starts with a first contact's row at cc 16
for the link (as an earlier copy could have left it), so the first copy too starts from it. Writes benchmarks/results/repeat-copies.json (or --out).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.fs_settle import discard
from benchmarks.pairs import check_landed, checkout_copy, checkout_parser, checkouts_of, fresh_destination, prepared_set
from benchmarks.run import host
from benchmarks.small_files import _parse, _run
from tests.support.sshd import SSHServer

_KEPT = re.compile(r"^kept in the tuning library .*\bcc (\d+)$")


def kept_cc(notes: list[str]) -> int | None:
    """The level a copy left in the tuning library (its summary's note), None when it kept none."""
    for note in notes:
        found = _KEPT.match(note)
        if found:
            return int(found.group(1))
    return None


# A busy loop for `on` seconds, then `off` seconds asleep, until killed: one core's bursts (one per core).
_BURSTS = """
import sys, time
on, off = float(sys.argv[1]), float(sys.argv[2])
while True:
    end = time.monotonic() + on
    while time.monotonic() < end:
        pass
    time.sleep(off)
"""


def parse_noise(spec: str) -> tuple[float, float]:
    """(busy, idle) seconds of --noise ON/OFF; both must be positive."""
    try:
        on, off = (float(x) for x in spec.split("/"))
    except ValueError:
        raise SystemExit(f"--noise takes ON/OFF seconds, e.g. 3/3 (got {spec!r})") from None
    if not (on > 0 and off > 0):
        raise SystemExit(f"--noise: both ON and OFF must be above 0 (got {spec!r})")
    return on, off


def seed_library(store_url: str, sshd: SSHServer, direction: str, cc: int) -> None:
    """Leave in the store the row a first contact at `cc` would have left for this link (RTT 1 ms,
    75 Mbit/s: what copies of 100,000 x 1 KiB reached on loopback here)."""
    from airflow_transfer.protocols.endpoint import Endpoint
    from airflow_transfer.protocols.ssh import SSHTarget
    from airflow_transfer.store import open_store
    from airflow_transfer.tuning.library import remember_first_contact

    local, remote = Endpoint("file", "/"), Endpoint("sftp", "/", target=SSHTarget(host=sshd.host, port=sshd.port))
    src, dst = (local, remote) if direction == "up" else (remote, local)
    store = open_store(store_url)
    try:
        remember_first_contact(store, src, dst, {"rtt_ms": 1.0, "rate_mbit": 75.0, "cc": cc, "pp_level": 32})
    finally:
        store.close()


def _summary(rows: list[dict]) -> dict:
    later = rows[1:] or rows
    return {
        "kept_cc": [r.get("kept_cc") for r in rows],
        "seconds": [r["seconds"] for r in rows],
        "median_seconds_after_first": statistics.median(r["seconds"] for r in later),
        "median_machine_cpu_s_after_first": statistics.median(r["machine_cpu_s"] for r in later),
    }


def main() -> int:
    ap = checkout_parser("up")
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "repeat-copies.json"))
    ap.add_argument("--noise", default="", help="ON/OFF: keep every core busy ON seconds of every ON+OFF")
    ap.add_argument("--seed-cc", type=int, default=0, help="start each store with a first contact's row at this cc")
    args = ap.parse_args()
    noise = parse_noise(args.noise) if args.noise else None
    if args.copies < 2:
        raise SystemExit("--copies must be at least 2: the first copy is a first contact, the rest repeat it")
    checkouts = checkouts_of(args)
    work = Path(tempfile.mkdtemp(prefix="at-repeat-"))
    os.chmod(work, 0o755)
    sshd = SSHServer(work / "sshd").start()
    bursts: list[subprocess.Popen] | None = None
    try:
        count, _, name = _parse(args.set)
        src, trash = prepared_set(work, args)
        speed = {"before": host()}
        if noise is not None:
            bursts = [
                subprocess.Popen([sys.executable, "-c", _BURSTS, *(str(x) for x in noise)])
                for _ in range(os.cpu_count() or 1)
            ]
        rows: dict[str, list[dict]] = {c: [] for c in checkouts}
        for copy in range(args.copies):
            for cname, tree in checkouts.items():
                dst = fresh_destination(work, sshd.user)
                store = f"sqlite:///{work}/store-{cname}.db"  # one per checkout, kept for all its runs
                if copy == 0 and args.seed_cc > 0:
                    seed_library(store, sshd, args.direction, args.seed_cc)
                argv = checkout_copy(sshd, src, dst, args.direction, store, "--json")
                row = _run(argv, env={**os.environ, "PYTHONPATH": str(tree)})
                row["kept_cc"] = kept_cc(row.get("tuning_notes", []))
                check_landed(dst, count, cname)
                rows[cname].append(row)
                print(cname, copy, json.dumps(row), flush=True)
                discard(dst, trash)
        for proc in bursts or ():
            proc.kill()
            proc.wait()
        bursts = None
        speed["after"] = host()
        out = {
            "set": name,
            "direction": args.direction,
            "copies": args.copies,
            "noise": {"busy_s": noise[0], "idle_s": noise[1]} if noise else None,
            "seed_cc": args.seed_cc or None,
            "machine_cores": os.cpu_count(),
            "host": speed,
            "checkouts": {c: str(t) for c, t in checkouts.items()},
            "runs": rows,
            "summary": {c: _summary(rs) for c, rs in rows.items()},
        }
        for cname, summary in out["summary"].items():
            print(cname, json.dumps(summary))
        print("machine speed:", json.dumps(speed))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    finally:
        for proc in bursts or ():
            proc.kill()
        sshd.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
