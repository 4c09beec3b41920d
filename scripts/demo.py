"""`make demo`: a real Airflow DAG run copying a generated dataset to a throwaway local sshd.

Steps: start OpenSSH sshd on 127.0.0.1 with generated keys; generate a small
dataset; migrate a SQLite Airflow home under .demo/; run the example DAG with
`airflow dags test`; print the transfer summary from XCom; check both sides'
hashes; stop the sshd.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.airflow_env import migrate, sftp_conn_env
from tests.support.data import make_tree, tree_digest
from tests.support.sshd import SSHServer, chown_to_user


def say(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="airflow-transfer-demo-"))
    os.chmod(work, 0o755)
    home = REPO / ".demo" / "airflow"
    server = None
    try:
        say("starting a throwaway OpenSSH sshd on 127.0.0.1 with generated keys")
        server = SSHServer(work / "sshd").start()
        say(f"sshd listening on {server.host}:{server.port} (login {server.user}, host key pinned in known_hosts)")
        src = make_tree(work / "dataset", small=300, big_mib=64, seed=42)
        remote = work / "remote"
        remote.mkdir()
        chown_to_user(remote, server.user)
        say(f"generated dataset: {src} (303 files, nested dirs, empty files and dirs, one 64 MiB file)")
        say(f"migrating Airflow metadata (SQLite) in {home}")
        env = migrate(home)
        env.update(sftp_conn_env("at_demo_sftp", server))
        conf = {"src": str(src), "dst": str(remote / "copy"), "conn_id": "at_demo_sftp"}
        say("running the example DAG: airflow dags test example_sftp_copy")
        proc = subprocess.run(
            [str(REPO / ".venv" / "bin" / "airflow"), "dags", "test", "example_sftp_copy", "-c", json.dumps(conf)],
            env=env,
            capture_output=True,
            text=True,
        )
        log = proc.stdout + proc.stderr
        for line in log.splitlines():
            if "Mbit/s" in line or "transfer summary" in line or line.startswith("  "):
                print("    " + _shown(line))
        if proc.returncode != 0:
            print(log[-5000:])
            say("DAG run FAILED")
            return 1
        summary = _xcom(env)
        say("XCom summary returned by the task:")
        print(json.dumps(summary, indent=2))
        same = tree_digest(src) == tree_digest(remote / "copy")
        say(f"sha256 of every file, source vs destination: {'IDENTICAL' if same else 'DIFFERENT'}")
        return 0 if same and not summary["failed"] else 1
    finally:
        if server is not None:
            server.stop()
            say("sshd stopped")
        shutil.rmtree(work, ignore_errors=True)


# What Airflow's log appends to every line: the logger's name and the source location.
_LOG_CONTEXT = re.compile(r"\s+\[[\w.]+\]\s+loc=\S+$")


def _shown(line: str, width: int = 200) -> str:
    """A task log line for the terminal: without the logger suffix, and cut at its end when long,
    so its timestamp and message stay readable."""
    line = _LOG_CONTEXT.sub("", line)
    return line if len(line) <= width else line[: width - 4] + " ..."


def _xcom(env: dict) -> dict:
    code = (
        "import json\n"
        "from airflow.models.xcom import XComModel\n"
        "from airflow.utils.session import create_session\n"
        "with create_session() as s:\n"
        "    x = s.query(XComModel).filter(XComModel.dag_id == 'example_sftp_copy', XComModel.key == 'return_value')"
        ".order_by(XComModel.timestamp.desc()).first()\n"
        "    print(json.dumps(x.value))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
