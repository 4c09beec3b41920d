"""Run the real `airflow-transfer` command in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def summary(self) -> dict:
        return json.loads(self.out)


def ssh_args(sshd) -> list[str]:
    return ["--identity", str(sshd.client_key), "--known-hosts", str(sshd.known_hosts)]


def run_cli(*args: str, timeout: float = 300, env: dict | None = None) -> Run:
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_transfer.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def kill_cli_when(
    args: list[str], ready, timeout: float = 120, sig: signal.Signals = signal.SIGKILL, env: dict | None = None
) -> int:
    """Start `airflow-transfer ARGS`, send it `sig` (SIGKILL unless told) as soon as `ready()`
    holds and return its exit status; fails if it ended first."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_transfer.cli", *args],
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.005)
    assert proc.poll() is None, "the copy ended before it could be killed"
    os.kill(proc.pid, sig)
    return proc.wait(timeout=timeout)
