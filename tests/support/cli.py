"""Run the real `airflow-transfer` command in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
