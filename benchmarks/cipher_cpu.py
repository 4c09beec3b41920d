"""Client CPU per byte for each SSH cipher choice: one 256 MiB upload over loopback.

    .venv/bin/python benchmarks/cipher_cpu.py [--reps 3]

Runs the engine against a throwaway OpenSSH sshd on 127.0.0.1 with
verification off, once per cipher setting, interleaved, and prints the median
client CPU seconds (all threads of this process) and MiB/s. Loopback shares
the cores between client and server, so MiB/s is indicative; CPU seconds are
the figure that decides the default (airflow_transfer/protocols/ssh.py).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import paramiko

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols import ssh
from airflow_transfer.protocols.endpoint import Endpoint
from tests.support.data import write_random
from tests.support.sshd import SSHServer, chown_to_user

SETTINGS = {
    "aes128-ctr + hmac-sha2-256 (paramiko's default)": ((), ()),
    "aes128-gcm (this project's default)": (("aes128-gcm@openssh.com",), ()),
    "aes128-ctr + hmac-sha2-256-etm": ((), ("hmac-sha2-256-etm@openssh.com",)),
}


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="at-cipher-"))
    os.chmod(work, 0o755)
    server = SSHServer(work / "sshd").start()
    base_ciphers, base_macs = paramiko.Transport._preferred_ciphers, paramiko.Transport._preferred_macs
    prefer = ssh._prefer_aead
    try:
        write_random(work / "src" / "one.bin", 256 << 20, seed=1)
        remote = work / "remote"
        remote.mkdir()
        chown_to_user(remote, server.user)
        target = ssh.SSHTarget(
            host=server.host,
            port=server.port,
            username=server.user,
            key_filenames=[str(server.client_key)],
            known_hosts=[str(server.known_hosts)],
        )
        ssh._prefer_aead = lambda transport: None  # each setting below decides the order itself
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in SETTINGS}
        for rep in range(args.reps):
            for name, (ciphers, macs) in SETTINGS.items():
                paramiko.Transport._preferred_ciphers = ciphers + tuple(c for c in base_ciphers if c not in ciphers)
                paramiko.Transport._preferred_macs = macs + tuple(m for m in base_macs if m not in macs)
                shutil.rmtree(remote / "out", ignore_errors=True)
                c0, t0 = cpu(), time.monotonic()
                run_copy(
                    CopyRequest(
                        Endpoint("file", str(work / "src")),
                        Endpoint("sftp", str(remote / "out"), target),
                        TransferParams(pp=8, cc=1),
                        skip_existing=False,
                        verify=None,
                        use_store=False,
                    )
                )
                secs, used = time.monotonic() - t0, cpu() - c0
                results[name].append((used, 256 / secs))
                print(f"rep {rep + 1}: {name}: client {used:.2f} CPU-s, {256 / secs:.0f} MiB/s", file=sys.stderr)
        print("\nsetting | client CPU-s per 256 MiB (median, min-max) | MiB/s (median)")
        for name, rows in results.items():
            c = [u for u, _ in rows]
            print(
                f"{name} | {statistics.median(c):.2f} ({min(c):.2f}-{max(c):.2f}) | "
                f"{statistics.median(r for _, r in rows):.0f}"
            )
    finally:
        ssh._prefer_aead = prefer
        paramiko.Transport._preferred_ciphers, paramiko.Transport._preferred_macs = base_ciphers, base_macs
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
