"""Many small files on loopback, both directions: airflow-transfer (bundles, and over SFTP one by one) against rsync.

    .venv/bin/python benchmarks/small_files.py [--reps 3] [--sets 2000x64k,20000x1k,100000x1k]
        [--directions up,down] [--skip "airflow-transfer --no-bundle"] [--out FILE]

Contenders: the default (`auto`), a fixed setting (`-c 4`: four connections, no
tuning) to tell the engine from the tuning, `--no-bundle` (uploads), and rsync.
Starts a real OpenSSH sshd on loopback, writes each file set once (NxSIZE, in
directories of 100 files: 100000x1k makes 1,000 directories), then copies it
with every contender, uploads and downloads, interleaved (A B C A B C ...),
each run into a fresh destination. The copies verify as by default (sha256);
rsync checks nothing beyond its own transfer checksum. Reports wall seconds
(process start to exit), files per second, the client's CPU (the process and
its children) per 1000 files and its peak RSS, and the whole machine's CPU
(client + sshd + helper + kernel, from /proc/stat, both cores) per 1000 files
and per GiB, with medians, and the machine's speed before and after (a plain Python loop
and SHA-256: benchmarks/run.py `host`). Writes benchmarks/results/small-files-loopback.json
(or --out).

No run creates files within minutes of a mass deletion (benchmarks/fs_settle.py says why:
on this VM's ext4 without a journal, creates right after deletions are several times
slower): a finished run's destination is moved to a trash directory, emptied before each
set, followed by a six-minute wait; then the set and each tool's program and libraries are
read once, untimed (this VM pages out what sat idle for a minute, and the first timed run,
ours, used to read them back alone).
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

from benchmarks.fs_settle import discard, settle, warm
from benchmarks.run import host
from tests.support.sshd import SSHServer, chown_to_user

CLI = REPO / ".venv" / "bin" / "airflow-transfer"
# Each contender's program and libraries, read back after a settle (benchmarks/fs_settle.py, warm).
WARM = [
    [str(REPO / ".venv" / "bin" / "python"), "-c", "import airflow_transfer.cli, airflow_transfer.job"],
    ["rsync", "--version"],
    ["ssh", "-V"],
]


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


def _run(argv: list[str], env: dict[str, str] | None = None) -> dict:
    """Wall time, the client's CPU (the process and its children) and peak RSS, the machine's CPU;
    `env`: the process's environment (default: this one's)."""
    # The previous run's dirty pages (rsync leaves its files unflushed) are written back before
    # this run starts, not during it: a copy that flushes its own files (syncfs) would otherwise
    # wait for another tool's data too. benchmarks/run.py does the same.
    os.sync()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errs:
        busy0, t0 = _busy_seconds(), time.monotonic()
        proc = subprocess.Popen(argv, stdout=out, stderr=errs, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        busy = _busy_seconds() - busy0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        errs.seek(0)
        printed, err = out.read().decode(errors="replace"), errs.read().decode(errors="replace")
    if proc.returncode != 0:
        print(err[-2000:], file=sys.stderr)
        raise SystemExit(f"{argv[:3]} failed with {proc.returncode}")
    row = {
        "seconds": round(wall, 3),
        "client_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "client_peak_rss_mb": round(usage.ru_maxrss / 1024),
        "machine_cpu_s": round(busy, 2),
    }
    return row | _tuning(printed)


def _tuning(printed: str) -> dict:
    """Our copies' channels per chunk and how auto chose them (their --json summary): a slow run
    is then told from a slow machine by what it ran with. Nothing for other tools."""
    last = printed.strip().splitlines()[-1] if printed.strip() else ""
    if not last.startswith("{"):
        return {}
    summary = json.loads(last)
    notes = (summary.get("tuning") or {}).get("notes") or []
    return {
        "cc": [c.get("cc") for c in summary.get("chunks") or []],
        "tuning_notes": [
            n
            for n in notes
            if n.startswith(("auto chose", "first contact: start", "first contact: ramp", "kept in the tuning library"))
        ],
    }


def _medians(rows: dict[str, list[dict]], count: int, size: int) -> dict:
    med = {}
    gib = count * size / (1 << 30)
    for cname, rs in rows.items():
        secs = statistics.median(r["seconds"] for r in rs)
        client = statistics.median(r["client_cpu_s"] for r in rs)
        machine = statistics.median(r["machine_cpu_s"] for r in rs)
        med[cname] = {
            "seconds": secs,
            "files_per_s": round(count / secs),
            "client_cpu_s_per_1000_files": round(1000 * client / count, 3),
            "machine_cpu_s_per_1000_files": round(1000 * machine / count, 3),
            "machine_cpu_s_per_gib": round(machine / gib, 1),
            "client_peak_rss_mb": max(r["client_peak_rss_mb"] for r in rs),
            "vs_rsync": None,
        }
    rsync = next((m for c, m in med.items() if c.startswith("rsync")), None)
    for m in med.values():
        m["vs_rsync"] = round(m["seconds"] / rsync["seconds"], 2) if rsync else None
    return med


def _parse(spec: str) -> tuple[int, int, str]:
    count, size = spec.lower().split("x")
    mult = {"k": 1024, "m": 1024 * 1024}.get(size[-1], 1)
    return int(count), int(size.rstrip("km")) * mult, spec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sets", default="2000x64k,20000x1k")
    ap.add_argument("--directions", default="up,down", help="up (uploads), down (downloads), or up,down (both)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "small-files-loopback.json"))
    ap.add_argument("--skip", default="", help="contenders to leave out, comma-separated names as printed")
    args = ap.parse_args()
    directions = [d.strip() for d in args.directions.split(",") if d.strip()]
    if not directions or set(directions) - {"up", "down"}:
        ap.error(f"--directions takes up, down or up,down (got {args.directions!r})")
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
    ident = ["--identity", str(sshd.client_key), "--known-hosts", str(sshd.known_hosts), "--store", store]
    remote = f"{sshd.user}@{sshd.host}"
    contenders = {
        "up": {
            "airflow-transfer (bundles)": lambda s, d: [
                str(CLI),
                "copy",
                s,
                sshd.url(d),
                *ident,
                "--restart",
                "--json",
            ],
            "airflow-transfer --no-bundle": lambda s, d: [
                str(CLI),
                "copy",
                s,
                sshd.url(d),
                "--no-bundle",
                *ident,
                "--restart",
            ],
            "airflow-transfer -c 4": lambda s, d: [str(CLI), "copy", s, sshd.url(d), "-c", "4", *ident, "--restart"],
            "rsync -a -e ssh": lambda s, d: ["rsync", "-a", "-e", ssh, f"{s}/", f"{remote}:{d}/"],
        },
        "down": {
            "airflow-transfer (bundles)": lambda s, d: [
                str(CLI),
                "copy",
                sshd.url(s),
                d,
                *ident,
                "--restart",
                "--json",
            ],
            "airflow-transfer -c 4": lambda s, d: [str(CLI), "copy", sshd.url(s), d, "-c", "4", *ident, "--restart"],
            "rsync -a -e ssh": lambda s, d: ["rsync", "-a", "-e", ssh, f"{remote}:{s}/", f"{d}/"],
        },
    }
    skip = {c.strip() for c in args.skip.split(",") if c.strip()}
    trash = work / "trash"
    # The machine's speed before and after (a plain Python loop, SHA-256): machines of this kind
    # differ, and the same one changes by the hour; figures from two runs compare only with it.
    out: dict = {"machine_cores": os.cpu_count(), "host_before": host(), "sets": {}}
    try:
        for spec in args.sets.split(","):
            count, size, name = _parse(spec)
            src = work / f"src-{name}"
            _make(src, count, size)
            settle(trash)
            warm([src], WARM)
            for direction in directions:
                runs = {c: build for c, build in contenders[direction].items() if c not in skip}
                key = f"{name} {direction}"
                rows: dict[str, list[dict]] = {c: [] for c in runs}
                for rep in range(args.reps):
                    for cname, build in runs.items():
                        dst = work / "remote" / f"{name}-{direction}-{rep}-{len(rows[cname])}"
                        dst.mkdir(parents=True)
                        chown_to_user(dst, sshd.user)
                        chown_to_user(dst.parent, sshd.user)
                        row = _run(build(str(src), str(dst)))
                        landed = sum(len(files) for _, _, files in os.walk(dst))
                        if landed != count:
                            raise SystemExit(f"{cname} left {landed} of {count} files on {key}")
                        rows[cname].append(row)
                        print(key, cname, rep, json.dumps(row), file=sys.stderr)
                        discard(dst, trash)
                out["sets"][key] = {
                    "files": count,
                    "file_bytes": size,
                    "direction": direction,
                    "runs": rows,
                    "median": _medians(rows, count, size),
                }
                print(json.dumps({key: out["sets"][key]["median"]}, indent=1))
            discard(src, trash)
        out["host_after"] = host()
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    finally:
        sshd.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
