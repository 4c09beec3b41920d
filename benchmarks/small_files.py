"""Many small files on loopback: airflow-transfer (bundles, and over SFTP one by one) against rsync.

    .venv/bin/python benchmarks/small_files.py [--reps 3] [--sets 2000x64k,20000x1k]

Starts a real OpenSSH sshd on loopback, writes each file set once (NxSIZE, in
directories of 100 files), then uploads it with every contender, interleaved
(A B C A B C ...), each run into a fresh destination. The copies verify as by
default (sha256); rsync checks nothing beyond its own transfer checksum. Reports
wall seconds, files per second, and CPU seconds per 1000 files: the client's
(this process's children) and the whole machine's (client + sshd + sink, from
/proc/stat, both cores), with medians. Writes benchmarks/results/small-files-loopback.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.sshd import SSHServer, chown_to_user

CLI = REPO / ".venv" / "bin" / "airflow-transfer"


def _busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot (user + nice + system + irq + softirq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _make(root: Path, count: int, size: int) -> None:
    block = os.urandom(size)
    for i in range(count):
        d = root / f"d{i // 100:04d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:06d}").write_bytes(block[i % 7 :] + block[: i % 7])  # distinct contents, same size
    for d in [root, *root.iterdir()]:
        os.chmod(d, 0o755)


def _parse(spec: str) -> tuple[int, int, str]:
    count, size = spec.lower().split("x")
    mult = {"k": 1024, "m": 1024 * 1024}.get(size[-1], 1)
    return int(count), int(size.rstrip("km")) * mult, spec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sets", default="2000x64k,20000x1k")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="at-small-"))
    os.chmod(work, 0o755)
    sshd = SSHServer(work / "sshd").start()
    ssh = shlex.join(
        [
            "ssh",
            "-p",
            str(sshd.port),
            "-i",
            str(sshd.client_key),
            "-o",
            f"UserKnownHostsFile={sshd.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
        ]
    )
    store = f"sqlite:///{work}/store.db"
    contenders = {
        "airflow-transfer (bundles)": lambda s, d: [
            str(CLI),
            "copy",
            s,
            sshd.url(d),
            "--identity",
            str(sshd.client_key),
            "--known-hosts",
            str(sshd.known_hosts),
            "--store",
            store,
            "--restart",
        ],
        "airflow-transfer --no-bundle": lambda s, d: [
            str(CLI),
            "copy",
            s,
            sshd.url(d),
            "--no-bundle",
            "--identity",
            str(sshd.client_key),
            "--known-hosts",
            str(sshd.known_hosts),
            "--store",
            store,
            "--restart",
        ],
        "rsync -a -e ssh": lambda s, d: ["rsync", "-a", "-e", ssh, f"{s}/", f"{sshd.user}@{sshd.host}:{d}/"],
    }
    out: dict = {"machine_cores": os.cpu_count(), "sets": {}}
    try:
        for spec in args.sets.split(","):
            count, size, name = _parse(spec)
            src = work / f"src-{name}"
            _make(src, count, size)
            rows: dict[str, list[dict]] = {c: [] for c in contenders}
            for rep in range(args.reps):
                for cname, build in contenders.items():
                    dst = work / "remote" / f"{name}-{len(rows[cname])}-{cname.split()[-1].strip('()')}"
                    dst.mkdir(parents=True)
                    chown_to_user(dst, sshd.user)
                    chown_to_user(dst.parent, sshd.user)
                    busy0, t0 = _busy_seconds(), time.monotonic()
                    before = os.times()
                    proc = subprocess.run(build(str(src), str(dst)), capture_output=True, text=True, timeout=1800)
                    wall = time.monotonic() - t0
                    after = os.times()
                    busy = _busy_seconds() - busy0
                    if proc.returncode != 0:
                        print(proc.stderr[-2000:], file=sys.stderr)
                        raise SystemExit(f"{cname} failed on {name}")
                    client = (after.children_user - before.children_user) + (
                        after.children_system - before.children_system
                    )
                    landed = sum(len(files) for _, _, files in os.walk(dst))
                    if landed != count:
                        raise SystemExit(f"{cname} left {landed} of {count} files on {name}")
                    row = {
                        "seconds": round(wall, 3),
                        "files_per_s": round(count / wall),
                        "client_cpu_s": round(client, 2),
                        "machine_cpu_s": round(busy, 2),
                    }
                    rows[cname].append(row)
                    print(name, cname, rep, json.dumps(row), file=sys.stderr)
                    shutil.rmtree(dst, ignore_errors=True)
            med = {}
            for cname, rs in rows.items():
                secs = statistics.median(r["seconds"] for r in rs)
                med[cname] = {
                    "seconds": secs,
                    "files_per_s": round(count / secs),
                    "client_cpu_s_per_1000_files": round(
                        1000 * statistics.median(r["client_cpu_s"] for r in rs) / count, 3
                    ),
                    "machine_cpu_s_per_1000_files": round(
                        1000 * statistics.median(r["machine_cpu_s"] for r in rs) / count, 3
                    ),
                    "vs_rsync": None,
                }
            rs_secs = med["rsync -a -e ssh"]["seconds"]
            for cname in med:
                med[cname]["vs_rsync"] = round(med[cname]["seconds"] / rs_secs, 2)
            out["sets"][name] = {"files": count, "file_bytes": size, "runs": rows, "median": med}
            print(json.dumps({name: med}, indent=1))
            shutil.rmtree(src, ignore_errors=True)
        (REPO / "benchmarks" / "results" / "small-files-loopback.json").write_text(json.dumps(out, indent=1) + "\n")
    finally:
        sshd.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
