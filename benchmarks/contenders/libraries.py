"""Python libraries a DAG author would call instead: Airflow's SFTPHook and fsspec's sshfs.

Each runs in a fresh Python process inside `src` (benchmarks/contenders/_worker.py)
that times only the transfer call (connections included, imports not) and
reports its own CPU and peak RSS.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from benchmarks.contenders.base import AVAILABLE, Availability, Contender, ContenderFailed, Usage, missing

REPO = Path(__file__).resolve().parents[2]
CONN_ID = "bench_sftp"


class _Library(Contender):
    kind = ""
    module = ""
    install_hint = ""

    def available(self) -> Availability:
        if importlib.util.find_spec(self.module) is None:
            return missing(f"Python module {self.module} is not installed: {self.install_hint}")
        return AVAILABLE

    def args(self, dataset_dir: Path, remote_dir: Path) -> dict:
        raise NotImplementedError

    def run(self, dataset_dir: Path, remote_dir: Path) -> float:
        args = {"kind": self.kind, **self.args(dataset_dir, remote_dir)}
        done = self.measure([sys.executable, "-m", "benchmarks.contenders._worker", json.dumps(args)])
        try:
            own = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ContenderFailed(f"worker printed no measurements: {done.tail()}") from None
        self.usage = Usage(own["cpu_s"], own["peak_rss_mb"])
        return float(own["seconds"])

    def env(self) -> dict[str, str]:
        bed = self._bed()
        return bed.env(
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **self.extra_env()
        )

    def extra_env(self) -> dict[str, str]:
        return {}


class AirflowSFTPHook(_Library):
    kind = "hook"
    module = "airflow.providers.sftp"
    install_hint = "`uv pip install -p .venv/bin/python apache-airflow-providers-sftp`"

    def __init__(self, workers: int = 4, diagnostic: bool = False) -> None:
        super().__init__()
        self.workers = workers
        self.diagnostic = diagnostic
        self.name = f"Airflow SFTPHook.store_directory_concurrently ({workers} workers, compression off)"
        self.description = (
            f"`SFTPHook.store_directory_concurrently(workers={workers})` from "
            "apache-airflow-providers-sftp: a thread and a paramiko connection per worker, "
            "files dealt round-robin; connection extra `compress: false` (the hook compresses by "
            "default), host key pinned"
        )

    def landing(self, dataset_dir: Path, remote_dir: Path) -> Path:
        return remote_dir / "data"  # the hook refuses an existing target and creates it itself

    def args(self, dataset_dir: Path, remote_dir: Path) -> dict:
        return {
            "conn_id": CONN_ID,
            "local": str(dataset_dir),
            "remote": str(remote_dir / "data"),
            "workers": self.workers,
        }

    def extra_env(self) -> dict[str, str]:
        bed = self._bed()
        conn = {
            "conn_type": "sftp",
            "host": bed.host,
            "port": bed.port,
            "login": bed.user,
            "extra": {
                "key_file": str(bed.key),
                "compress": "false",
                "host_key": bed.host_key_pub,
                "no_host_key_check": "false",
                "look_for_keys": "false",
            },
        }
        home = bed.home / "airflow"
        home.mkdir(exist_ok=True)
        return {
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn),
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }


class Sshfs(_Library):
    kind = "sshfs"
    module = "sshfs"
    install_hint = "`uv pip install -p .venv/bin/python sshfs` (benchmarks/bench.sh does)"
    name = "fsspec sshfs put (file list)"
    description = (
        "`SSHFileSystem.put(local_files, remote_paths)` from the `sshfs` package (asyncssh): one "
        "connection, fsspec's default batch of concurrent file copies, directories made first"
    )

    max_sessions: int | None = None

    def args(self, dataset_dir: Path, remote_dir: Path) -> dict:
        bed = self._bed()
        return {
            "local": str(dataset_dir),
            "remote": str(remote_dir),
            "host": bed.host,
            "port": bed.port,
            "user": bed.user,
            "key": str(bed.key),
            "known_hosts": str(bed.known_hosts),
            "max_sessions": self.max_sessions,
        }


class SshfsOneChannel(Sshfs):
    """sshfs with its SFTP channel pool cut to one (max_sessions counts its 2 shell channels): separates
    what one SSH connection carries from what its several SFTP channels add."""

    max_sessions = 3
    diagnostic = True
    name = "sshfs one SFTP channel (fsspec, max_sessions 3)"
    description = (
        "as `fsspec sshfs put (file list)`, with `max_sessions=3`: one SFTP channel on the one "
        "connection instead of 8, each channel under the server's own window"
    )


def contenders() -> list[Contender]:
    # 8 workers is the matrix row; one per core shows what the hook gives with its threads not oversubscribed.
    return [
        AirflowSFTPHook(workers=os.cpu_count() or 2, diagnostic=True),
        AirflowSFTPHook(workers=8),
        Sshfs(),
        SshfsOneChannel(),
    ]
