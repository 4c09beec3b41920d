"""`make system-test`: the replication DAG on a real distributed Airflow 3 deployment.

Starts, in a throwaway AIRFLOW_HOME: a fresh PostgreSQL database for Airflow's
metadata and one for our store, CeleryExecutor with the local Redis as broker
(its own queue name, so other deployments on the same Redis are untouched), an
OpenSSH sshd as the instrument host, then scheduler, dag-processor, api-server,
triggerer and two Celery workers (concurrency 1 each, told apart by
[core] hostname_callable, so task instances record which worker ran them).

Runs example_instrument_replication and checks that: the run succeeded; its
mapped chunks ran on both workers; no more chunks ran at once than the link
pool allows; the archive equals the source byte for byte; the store's
transfer is `succeeded` with every chunk; and the archive Asset scheduled
example_science_pipeline, which succeeded. Stops everything it started and
drops its databases, also on failure (logs are kept under the printed dir).

    python tests/system/run_system_test.py [--keep] [--result tests/system/last-result.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import psycopg

from tests.support.data import make_tree, tree_digest, write_random
from tests.support.sshd import SSHServer, chown_to_user, free_port

PG = dict(host="127.0.0.1", port=5432, user="postgres", autocommit=True, connect_timeout=5)
DAG_ID = "example_instrument_replication"
PIPELINE_ID = "example_science_pipeline"
POOL, POOL_SLOTS, CHUNK_CC, CHUNKS = "at_system_link", 4, 2, 4


def log(msg: str) -> None:
    print(f"[system-test {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Deployment:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.tag = "at_sys_" + secrets.token_hex(4)
        self.home = base / "airflow-home"
        self.logs = base / "logs"
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.databases: list[str] = []
        self.sshd: SSHServer | None = None
        self.env: dict[str, str] = {}

    # -- setup ----------------------------------------------------------------------
    def create_db(self, name: str) -> str:
        with psycopg.connect(dbname="postgres", **PG) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"

    def prepare(self, data: Path, archive: Path, results: Path) -> None:
        self.home.mkdir(parents=True)
        self.logs.mkdir()
        self.sshd = SSHServer(self.base / "sshd").start()
        meta = self.create_db(self.tag + "_airflow")
        store = self.create_db(self.tag + "_store")
        self.api_port = free_port()
        conn = {
            "conn_type": "sftp",
            "host": self.sshd.host,
            "port": self.sshd.port,
            "login": self.sshd.user,
            "extra": {"key_file": str(self.sshd.client_key), "known_hosts": str(self.sshd.known_hosts)},
        }
        venv_bin = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.system.worker_name.get",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{self.api_port}",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta,
            # Airflow would pick asyncpg for its async engine; psycopg 3 does async itself
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": meta.replace("postgresql+psycopg", "postgresql+psycopg_async"),
            "AIRFLOW__CELERY__BROKER_URL": "redis://127.0.0.1:6379/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": "redis://127.0.0.1:6379/0",
            "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.tag,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store,
            "AIRFLOW__AIRFLOW_TRANSFER__STAGING_DIR": str(self.base / "staging"),
            "AIRFLOW_CONN_INSTRUMENT_SFTP": json.dumps(conn),
            # parse-time settings of the example DAGs
            "AT_INSTRUMENT_ARCHIVE": str(archive),
            "AT_INSTRUMENT_POOL": POOL,
            "AT_INSTRUMENT_CHUNK_CC": str(CHUNK_CC),
            "AT_INSTRUMENT_POLL": "1",
            "AT_INSTRUMENT_SCHEDULE": "",  # only the run this test triggers
            "AT_INSTRUMENT_CONN": "instrument_sftp",
            "AT_INSTRUMENT_SRC": str(data),
            "AT_PIPELINE_PRODUCTS": str(self.base / "products"),
            "AT_PIPELINE_CONN": "instrument_sftp",
            "AT_PIPELINE_RESULTS": str(results),
        }
        self.store_db = self.tag + "_store"
        self.meta_db = self.tag + "_airflow"

    def airflow(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return proc

    def start(self, name: str, *args: str, env: dict | None = None) -> None:
        out = open(self.logs / f"{name}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env={**self.env, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((name, proc))
        log(f"started {name} (pid {proc.pid})")

    def check_alive(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")

    # -- teardown -----------------------------------------------------------------------
    def stop(self) -> None:
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for _name, proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group: task subprocesses and celery children too
            except ProcessLookupError:
                pass
            proc.wait(10)
        log(f"stopped {len(self.procs)} Airflow processes")
        if self.sshd is not None:
            self.sshd.stop()
        for name in self.databases:
            try:
                with psycopg.connect(dbname="postgres", **PG) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:
                log(f"could not drop database {name}: {exc}")
        log(f"dropped databases {', '.join(self.databases)}")

    # -- queries ----------------------------------------------------------------------------
    def meta(self, query: str, *params):
        with psycopg.connect(dbname=self.meta_db, **PG) as conn:
            return conn.execute(query, params).fetchall()


def wait_for(what: str, fn, timeout: float, dep: Deployment, interval: float = 2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dep.check_alive()
        value = fn()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def max_overlap(intervals: list[tuple[dt.datetime, dt.datetime]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def run(base: Path) -> dict:
    t0 = time.monotonic()
    dep = Deployment(base)
    checks: list[tuple[str, bool, str]] = []
    try:
        data_root = base / "instrument-host"
        data = make_tree(data_root / "run-0001", small=400, seed=77)
        for i in range(4):
            write_random(data / "frames" / f"frame{i}.raw", (12 << 20) + 4096 * i, 900 + i)
        results = data_root / "results"
        results.mkdir()
        archive = base / "archive"
        dep.prepare(data, archive, results / "pipeline")
        chown_to_user(data_root, dep.sshd.user)
        os.chmod(base, 0o755)

        log(f"AIRFLOW_HOME {dep.home}, queue {dep.tag}, api-server port {dep.api_port}")
        dep.airflow("db", "migrate", timeout=600)
        dep.airflow("pools", "set", POOL, str(POOL_SLOTS), "instrument link: at most 4 connections")
        dep.start("api-server", "api-server", "--port", str(dep.api_port))
        dep.start("scheduler", "scheduler")
        dep.start("dag-processor", "dag-processor")
        dep.start("triggerer", "triggerer", "--skip-serve-logs")
        for n in (1, 2):
            dep.start(
                f"worker-{n}",
                "celery",
                "worker",
                "--concurrency",
                "1",
                "--queues",
                dep.tag,
                "--celery-hostname",
                f"at-worker-{n}@%h",
                "--skip-serve-logs",
                "--without-gossip",
                env={"AT_WORKER_NAME": f"at-worker-{n}"},
            )

        wait_for(
            "the DAGs to be parsed",
            lambda: len(dep.meta("select dag_id from dag where dag_id in (%s, %s)", DAG_ID, PIPELINE_ID)) == 2,
            240,
            dep,
        )
        wait_for("the api-server", lambda: _http_ok(dep.api_port), 120, dep)
        dep.airflow("dags", "unpause", PIPELINE_ID)
        dep.airflow("dags", "unpause", DAG_ID)
        conf = {
            "src": str(data),
            "conn_id": "instrument_sftp",
            "dst": str(archive),
            "stable_for": 2,
            "algorithm": "fixed",
            "min_chunks": CHUNKS,
        }
        run_id = "system_test_" + dep.tag
        dep.airflow("dags", "trigger", DAG_ID, "--run-id", run_id, "--conf", json.dumps(conf))
        log(f"triggered {DAG_ID} run {run_id}")

        def finished():
            rows = dep.meta("select state from dag_run where dag_id=%s and run_id=%s", DAG_ID, run_id)
            return rows and rows[0][0] in ("success", "failed") and rows[0][0]

        state = wait_for("the replication run", finished, 900, dep, interval=3)
        tis = dep.meta(
            "select task_id, map_index, state, hostname, pid, start_date, end_date, try_number "
            "from task_instance where dag_id=%s and run_id=%s order by task_id, map_index",
            DAG_ID,
            run_id,
        )
        ti_rows = [
            {
                "task": t,
                "map_index": m,
                "state": s,
                "hostname": h,
                "pid": p,
                "seconds": round((e - b).total_seconds(), 2) if b and e else None,
                "try": tr,
            }
            for t, m, s, h, p, b, e, tr in tis
        ]
        chunks = [r for r in tis if r[0] == "transfer_chunk"]
        hosts = sorted({r[3] for r in chunks})
        overlap = max_overlap([(r[5], r[6]) for r in chunks if r[5] and r[6]])
        checks.append(("replication run succeeded", state == "success", state))
        checks.append(
            (
                f"{CHUNKS} mapped chunks, all succeeded",
                len(chunks) == CHUNKS and all(r[2] == "success" for r in chunks),
                f"{len(chunks)} chunks: {[r[2] for r in chunks]}",
            )
        )
        checks.append(
            (
                "chunks ran on both Celery workers",
                hosts == ["at-worker-1", "at-worker-2"],
                f"hostnames {hosts}, pids {sorted({r[4] for r in chunks})}",
            )
        )
        checks.append(
            (
                f"pool {POOL} ({POOL_SLOTS} slots, {CHUNK_CC} per chunk) capped chunks at once",
                overlap <= POOL_SLOTS // CHUNK_CC,
                f"at most {overlap} chunks ran at the same time",
            )
        )
        same = archive.exists() and tree_digest(archive) == tree_digest(data)
        checks.append(
            (
                "archive equals the source byte for byte",
                same,
                f"{sum(1 for v in tree_digest(data).values() if v != 'dir')} files",
            )
        )
        from airflow_transfer.store import Store

        with Store.open(dep.env["AIRFLOW__AIRFLOW_TRANSFER__STORE_URL"]) as store:
            recs = [r for r in store.list_transfers(key_prefix=f"airflow:{DAG_ID}/{run_id}/")]
            rec = recs[0] if len(recs) == 1 else None
            n_chunks = len(store.chunks(rec.id)) if rec else 0
        store_ok = rec is not None and rec.state == "succeeded"
        verify = ((rec.summary if rec else None) or {}).get("verify", {})
        checks.append(
            (
                "store transfer succeeded, verified, with every chunk",
                store_ok and verify.get("ok") is True and n_chunks == CHUNKS,
                f"state {rec.state if rec else None}, verified {verify.get('verified')}, "
                f"mismatched {verify.get('mismatched')}, digests at {verify.get('where')}, {n_chunks} chunks",
            )
        )

        def pipeline_done():
            rows = dep.meta("select state, run_type from dag_run where dag_id=%s", PIPELINE_ID)
            return rows and rows[-1][0] in ("success", "failed") and rows[-1]

        try:
            p_state, p_type = wait_for("the Asset-scheduled pipeline", pipeline_done, 300, dep, interval=3)
        except RuntimeError as exc:
            p_state, p_type = str(exc), None
        published = (results / "pipeline" / "index.json").exists()
        checks.append(
            (
                "archive Asset scheduled the science pipeline, which succeeded",
                p_state == "success" and p_type == "asset_triggered" and published,
                f"state {p_state}, run type {p_type}, products published: {published}",
            )
        )
    except Exception as exc:  # noqa: BLE001 - reported as a failed check, then everything is stopped
        checks.append(("deployment ran", False, f"{type(exc).__name__}: {str(exc)[-1500:]}"))
        ti_rows = locals().get("ti_rows", [])
    finally:
        dep.stop()
    return {"checks": checks, "tasks": ti_rows, "seconds": round(time.monotonic() - t0, 1), "logs": str(dep.logs)}


def _http_ok(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=3) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001 - any failure means "not healthy yet"; the caller polls
        return False


def report(res: dict, commit: str) -> str:
    ok = all(c[1] for c in res["checks"])
    lines = [
        "# `make system-test`: last result",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- commit: {commit}",
        f"- machine: {socket.gethostname()}, {os.cpu_count()} cores (shared)",
        "- deployment: Airflow 3 CeleryExecutor, Redis broker (127.0.0.1:6379), PostgreSQL metadata + store "
        "(fresh databases), scheduler, dag-processor, api-server, triggerer, 2 Celery workers (concurrency 1)",
        f"- result: **{'PASS' if ok else 'FAIL'}** in {res['seconds']} s",
        "",
        "| check | ok | detail |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {'yes' if good else 'NO'} | {detail} |" for name, good, detail in res["checks"]]
    if res["tasks"]:
        lines += [
            "",
            "Task instances of the replication run:",
            "",
            "| task | map index | state | worker (hostname) | pid | seconds | try |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {t['task']} | {t['map_index']} | {t['state']} | {t['hostname']} | {t['pid']} | {t['seconds']} "
            f"| {t['try']} |"
            for t in res["tasks"]
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--result", default=str(REPO / "tests" / "system" / "last-result.md"))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, home)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="at-system-"))
    os.chmod(base, 0o755)
    res = run(base)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip():
        commit += " (with uncommitted changes)"
    text = report(res, commit)
    Path(args.result).write_text(text)
    print(text)
    ok = all(c[1] for c in res["checks"])
    if ok and not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    else:
        log(f"logs and home kept under {base}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
