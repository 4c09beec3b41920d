"""A throwaway Airflow home (SQLite metadata, no examples), migrated once per session.

DAGs run in a subprocess so Airflow's configuration, read at import time,
comes from this environment and never leaks into other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_RUNNER = r"""
import importlib.util, json, sys
path, dag_id, conf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
spec = importlib.util.spec_from_file_location("dagmod", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
dag = next(v for v in vars(mod).values() if getattr(v, "dag_id", None) == dag_id)
dr = dag.test(run_conf=conf)
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
with create_session() as s:
    # mapped task instances get "[map_index]" after the task id
    mi = lambda m: f"[{m}]" if m is not None and m >= 0 else ""
    xcoms = {f"{x.task_id}{mi(x.map_index)}.{x.key}": x.value for x in
             s.query(XComModel).filter(XComModel.dag_id == dr.dag_id, XComModel.run_id == dr.run_id)}
    tis = s.query(TaskInstance).filter(TaskInstance.dag_id == dr.dag_id, TaskInstance.run_id == dr.run_id).all()
    states = {f"{ti.task_id}{mi(ti.map_index)}": str(ti.state) for ti in tis}
    tries = {f"{ti.task_id}{mi(ti.map_index)}": ti.try_number for ti in tis}
print("@@RESULT@@" + json.dumps({"state": str(dr.state), "xcom": xcoms, "tasks": states, "tries": tries}, default=str))
"""


def airflow_env(home: Path) -> dict:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "PYTHONPATH": str(REPO),
    }


def migrate(home: Path) -> dict:
    env = airflow_env(home)
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return env


def _result(line: str) -> dict:
    # The JSON object only: a process the run left behind (OpenLineage emits DAG events from a
    # process pool) may write to the same stdout right after it, before the newline.
    return json.JSONDecoder().raw_decode(line[len("@@RESULT@@") :])[0]


def run_dag(
    env: dict, dag_file: Path, dag_id: str, conf: dict, extra_env: dict | None = None, timeout: float = 600
) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(dag_file), dag_id, json.dumps(conf)],
        env={**env, **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log = proc.stdout + proc.stderr
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            return _result(line), log
    raise AssertionError(f"dag.test() gave no result (exit {proc.returncode}):\n{log[-6000:]}")


class RunningDag:
    """A dag.test() run in the background whose output can be waited on while it runs."""

    def __init__(self, proc: subprocess.Popen) -> None:
        import threading

        self.proc, self.lines = proc, []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait_for(self, text: str, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: any(text in line for line in self.lines) or self.proc.poll() is not None, timeout
            ) and any(text in line for line in self.lines)

    def result(self, timeout: float = 600) -> tuple[dict, str]:
        self.proc.wait(timeout)
        self._reader.join(10)
        log = "".join(self.lines)
        for line in self.lines:
            if line.startswith("@@RESULT@@"):
                return _result(line), log
        raise AssertionError(f"dag.test() gave no result (exit {self.proc.returncode}):\n{log[-6000:]}")


def start_dag(env: dict, dag_file: Path, dag_id: str, conf: dict, extra_env: dict | None = None) -> RunningDag:
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, str(dag_file), dag_id, json.dumps(conf)],
        env={**env, **(extra_env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return RunningDag(proc)


def sftp_conn_env(name: str, sshd) -> dict:
    conn = {
        "conn_type": "sftp",
        "host": sshd.host,
        "port": sshd.port,
        "login": sshd.user,
        "extra": {"key_file": str(sshd.client_key), "known_hosts": str(sshd.known_hosts)},
    }
    return {f"AIRFLOW_CONN_{name.upper()}": json.dumps(conn)}
