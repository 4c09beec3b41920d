"""What asking for a fall-back protocol costs while the preferred one is healthy.

    .venv/bin/python benchmarks/fallback_overhead.py --reps 3 [--files 400] [--link wan50] [-- extra copy args]

Starts a real OpenSSH sshd and a pyftpdlib FTP server on loopback (or, with
--link wan50, both in the dst namespace of the emulated 50 ms / 500 Mbit/s
link, the copy running in src; needs root, as `make test`'s WAN tests), writes N
files of 64-512 KiB, then uploads them with the real `airflow-transfer copy`
command, with and without `--alt-protocols ftp://...`, interleaved (A B A B
...), each run into a fresh destination directory. Reports seconds, Mbit/s,
SSH connections the server accepted ("Accepted publickey" lines in sshd's
log), SFTP sessions, summary bytes_moved against the bytes of the dataset,
and the highest percentage a progress line showed; medians over the repetitions. Writes
benchmarks/results/fallback-overhead.json (loopback) or fallback-overhead-wan50.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.data import write_random
from tests.support.servers import FTPServer
from tests.support.sshd import SSHServer, chown_to_user

CLI = REPO / ".venv" / "bin" / "airflow-transfer"


def _count(path: Path, since: int, pattern: str) -> int:
    with open(path, "rb") as f:
        f.seek(since)
        return len(re.findall(pattern.encode(), f.read()))


def _progress_pct(err: str) -> int | None:
    """The highest percentage of bytes done any progress line showed (`... (NN%), ...`)."""
    pcts = [int(m.group(1)) for m in re.finditer(r"B \((\d+)%\)", err)]
    return max(pcts) if pcts else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--link", choices=("loopback", "wan50"), default="loopback")
    ap.add_argument("extra", nargs="*", help="more arguments for every copy (after --)")
    args = ap.parse_args()
    tb = None
    cli = [str(CLI)]
    if args.link == "wan50":
        from tests.support.wan import WanTestbed

        tb = WanTestbed.start(rtt_ms=50, rate_mbit=500)
        work, sshd = tb.base, tb.sshd
        assert sshd is not None
        ftp = FTPServer(root="/", host=tb.link.dst_addr, port=2121, netns=tb.link.dst_ns, run_as=sshd.user)
        ftp.start(netrc_dir=work)
        cli = ["ip", "netns", "exec", tb.link.src_ns, sys.executable, "-m", "airflow_transfer.cli"]
    else:
        work = Path(tempfile.mkdtemp(prefix="at-fbbench-"))
        os.chmod(work, 0o755)
        sshd = SSHServer(work / "sshd").start()
        ftp = FTPServer(root="/", run_as="attest" if os.geteuid() == 0 else None).start(netrc_dir=work)
    try:
        rnd = random.Random(42)
        total = 0
        for i in range(args.files):
            size = rnd.randint(64 * 1024, 512 * 1024)
            write_random(work / "src" / f"d{i % 8}" / f"f{i:04d}.bin", size, seed=100 + i)
            total += size
        for d in [work / "src", *(work / "src").iterdir()]:
            os.chmod(d, 0o755)
        remote = work / "remote"
        remote.mkdir()
        chown_to_user(remote, sshd.user)
        env = {**os.environ, "NETRC": str(ftp.netrc_path), "PYTHONPATH": str(REPO)}
        variants = {"plain": [], "alt-ftp": ["--alt-protocols", f"ftp://{ftp.user}@{ftp.host}:{ftp.port}"]}
        results: dict[str, list[dict]] = {k: [] for k in variants}
        commands = {}
        for rep in range(args.reps):
            for name, more in variants.items():
                dst = remote / f"{name}-{rep}"
                dst.mkdir()
                chown_to_user(dst, sshd.user)
                cmd = [
                    *cli,
                    "copy",
                    str(work / "src"),
                    sshd.url(str(dst)),
                    "--identity",
                    str(sshd.client_key),
                    "--known-hosts",
                    str(sshd.known_hosts),
                    "--store",
                    f"sqlite:///{work}/store.db",
                    "--progress-interval",
                    "0.5",
                    "--json",
                    *more,
                    *args.extra,
                ]
                commands[name] = " ".join(cmd)
                mark_auth = sshd.log_file.stat().st_size
                mark_sftp = sshd.sftp_log.stat().st_size
                t0 = time.monotonic()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=REPO)
                wall = time.monotonic() - t0
                if proc.returncode != 0:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{name} run {rep} failed")
                s = json.loads(proc.stdout)
                time.sleep(0.3)  # sftp-server's log lines reach the file through a pipe
                row = {
                    "seconds": s["seconds"],
                    "wall": round(wall, 3),
                    "mbit": s["throughput_mbit"],
                    "ssh_connections": _count(sshd.log_file, mark_auth, r"Accepted publickey"),
                    "sftp_sessions": _count(sshd.sftp_log, mark_sftp, r"session opened"),
                    "bytes": s["bytes"],
                    "bytes_moved": s["bytes_moved"],
                    "progress_max_pct": _progress_pct(proc.stderr),
                    "protocols": s.get("protocols"),
                    "switches": len(s.get("protocol_switches", [])),
                }
                results[name].append(row)
                print(name, rep, json.dumps(row), file=sys.stderr)
        out = {
            "link": args.link,
            "files": args.files,
            "bytes": total,
            "reps": args.reps,
            "commands": commands,
            "runs": results,
            "median": {
                k: {
                    f: statistics.median(r[f] for r in v)
                    for f in ("seconds", "wall", "mbit", "ssh_connections", "sftp_sessions")
                }
                for k, v in results.items()
            },
        }
        print(json.dumps(out["median"], indent=1))
        name = "fallback-overhead.json" if args.link == "loopback" else f"fallback-overhead-{args.link}.json"
        dest = REPO / "benchmarks" / "results" / name
        dest.write_text(json.dumps(out, indent=1) + "\n")
    finally:
        ftp.stop()
        if tb is not None:
            tb.close()
        else:
            sshd.stop()
            subprocess.run(["rm", "-rf", str(work)])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
