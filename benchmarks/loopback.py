"""Loopback engine benchmark: one 512 MiB file and 2000 x 64 KiB files, cc=1 and cc=8.

    make bench-loopback        (or: .venv/bin/python benchmarks/loopback.py --reps 3)

Client and a real OpenSSH sshd share this machine's cores, so these figures
are the engine's CPU-bound ceiling, not a network measurement. Runs are
interleaved (A B C D A B C D ...) and medians reported with min and max.
Writes benchmarks/results/loopback.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.ssh import SSHTarget
from tests.support.data import write_random
from tests.support.sshd import SSHServer, chown_to_user


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", type=int, default=8)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="at-bench-"))
    os.chmod(work, 0o755)
    server = SSHServer(work / "sshd").start()
    try:
        print("generating datasets ...", file=sys.stderr)
        write_random(work / "large" / "one.bin", 512 * 1024 * 1024, seed=1)
        for i in range(2000):
            write_random(work / "tiny" / f"d{i % 20}" / f"f{i:04d}.bin", 64 * 1024, seed=10 + i)
        remote = work / "remote"
        remote.mkdir()
        chown_to_user(remote, server.user)
        target = SSHTarget(
            host=server.host,
            port=server.port,
            username=server.user,
            key_filenames=[str(server.client_key)],
            known_hosts=[str(server.known_hosts)],
        )
        cases = [
            (ds, direction, cc) for ds in ("large", "tiny") for direction in ("upload", "download") for cc in (1, 8)
        ]
        # Downloads read what the upload wrote: seed the remote copies once.
        for ds in ("large", "tiny"):
            run_copy(
                CopyRequest(
                    Endpoint("file", str(work / ds)),
                    Endpoint("sftp", str(remote / f"seed-{ds}"), target),
                    TransferParams(pp=8, cc=4),
                    skip_existing=False,
                )
            )
        results: dict = {c: [] for c in cases}
        for rep in range(args.reps):
            for ds, direction, cc in cases:
                params = TransferParams(pp=args.pp, p=1, cc=cc)
                if direction == "upload":
                    dst_path = remote / "out"
                    src, dst = Endpoint("file", str(work / ds)), Endpoint("sftp", str(dst_path), target)
                else:
                    dst_path = work / "down"
                    src, dst = Endpoint("sftp", str(remote / f"seed-{ds}"), target), Endpoint("file", str(dst_path))
                shutil.rmtree(dst_path, ignore_errors=True)
                subprocess.run(["sync"])
                t0 = time.monotonic()
                summary = run_copy(CopyRequest(src, dst, params, skip_existing=False))
                secs = time.monotonic() - t0
                assert not summary["failed"], summary["failed"][:3]
                mib_s = summary["bytes"] / secs / 2**20
                results[(ds, direction, cc)].append(mib_s)
                print(f"rep {rep + 1}: {ds:5s} {direction:8s} cc={cc}  {mib_s:7.1f} MiB/s", file=sys.stderr)
                shutil.rmtree(dst_path, ignore_errors=True)
        rows = []
        print("\ndataset  direction  cc  pp  median MiB/s  (min-max)")
        for (ds, direction, cc), vals in results.items():
            med = statistics.median(vals)
            label = "1 x 512 MiB" if ds == "large" else "2000 x 64 KiB"
            print(f"{label:14s} {direction:8s} {cc:2d}  {args.pp}  {med:8.1f}  ({min(vals):.1f}-{max(vals):.1f})")
            rows.append(
                {
                    "dataset": label,
                    "direction": direction,
                    "cc": cc,
                    "pp": args.pp,
                    "p": 1,
                    "repetitions": len(vals),
                    "median_mib_s": round(med, 1),
                    "min_mib_s": round(min(vals), 1),
                    "max_mib_s": round(max(vals), 1),
                }
            )
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        out = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machine": f"{platform.node()} {os.cpu_count()} cores",
            "commit": commit,
            "link": "loopback (client and OpenSSH 9.2 sshd on the same 2 cores)",
            "settings": f"verification on (sha256, destination read back by the remote helper), journal on, "
            f"p=1, pp={args.pp}",
            "runs": rows,
        }
        (REPO / "benchmarks" / "results").mkdir(parents=True, exist_ok=True)
        (REPO / "benchmarks" / "results" / "loopback.json").write_text(json.dumps(out, indent=2) + "\n")
        return 0
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
