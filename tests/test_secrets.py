"""No secret anywhere: real transfers use an SSH password, an encrypted private key with its
passphrase, a token in a connection's extra and a PostgreSQL store URL with a password;
then every place a person or another program can read is searched for those secrets:
the CLI's output and errors, the DAG run's output and task log files (DEBUG level), XCom,
the summaries, every row of every table of the store, the api-server's log and every page
and JSON route of the UI. Store URLs shown anywhere must be masked (user:***@host).

The secrets are random per run, so a hit cannot be a coincidence. The local PostgreSQL
trusts loopback, so the store password is carried through every layer but never checked.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import MetaData, Table, create_engine, inspect, select
from sqlalchemy.engine import make_url

from tests.support.airflow_env import REPO, run_dag
from tests.support.api_server import ApiServer
from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree
from tests.support.postgres import postgres_server  # noqa: F401 - fixture
from tests.support.sshd import SSHServer, chown_to_user

pytestmark = pytest.mark.airflow

PREFIX = "/airflow-transfer"


def _key_body(path: Path) -> str:
    """A line from the middle of a private key file: any copy of the key would contain it."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("-----")]
    return lines[len(lines) // 2]


@pytest.fixture
def password_sshd(test_base):
    """A second sshd that also takes the login user's password, set for this module only."""
    if os.geteuid() != 0:
        pytest.fail("this test sets the test user's password, so it needs root (CI runs as root)")
    server = SSHServer(test_base / "sshd-secrets", password_auth=True)
    password = f"pw-ssh-{secrets.token_hex(6)}"
    subprocess.run(["chpasswd"], input=f"{server.user}:{password}\n", text=True, check=True)
    try:
        server.start()
        encrypted = server.base / "id_encrypted"
        passphrase = f"pp-key-{secrets.token_hex(6)}"
        if not encrypted.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "secrets-test", "-f", str(encrypted)],
                check=True,
            )
        with open(server.authorized_keys, "a") as f:
            f.write(Path(str(encrypted) + ".pub").read_text())
        yield server, password, encrypted, passphrase
    finally:
        server.stop()
        # back to "no password can match" (scripts/setup-test-deps.sh): keys keep working
        subprocess.run(["usermod", "-p", "*", server.user], check=True)


@pytest.fixture
def world(airflow_home, password_sshd, postgres_server, test_base):
    sshd, ssh_password, encrypted, passphrase = password_sshd
    token = f"tok-extra-{secrets.token_hex(6)}"
    store_password = f"pw-store-{secrets.token_hex(6)}"
    database_url = make_url(postgres_server.create_database())
    store_url = database_url.set(password=store_password).render_as_string(hide_password=False)
    masked_store = store_url.replace(f":{store_password}@", ":***@")
    needles = {
        "ssh password": ssh_password,
        "key passphrase": passphrase,
        "extra token": token,
        "store password": store_password,
        "encrypted key body": _key_body(encrypted),
        "client key body": _key_body(sshd.client_key),
    }

    work = test_base / f"secrets-{secrets.token_hex(4)}"
    remote = work / "remote"
    remote.mkdir(parents=True)
    chown_to_user(remote, sshd.user)
    src = make_tree(work / "src", small=40, big_mib=1, seed=7)

    home = Path(airflow_home["AIRFLOW_HOME"])
    env = {
        **airflow_home,
        "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url,
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "DEBUG",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "tests" / "dags"),
    }  # dag.test() needs the file in the bundle
    base = {"conn_type": "sftp", "host": sshd.host, "port": sshd.port, "login": sshd.user}
    conns = {
        "AIRFLOW_CONN_AT_SECRET_PASSWORD": {
            **base,
            "password": ssh_password,
            "extra": {"known_hosts": str(sshd.known_hosts), "token": token},
        },
        "AIRFLOW_CONN_AT_SECRET_KEY": {
            **base,
            "extra": {
                "known_hosts": str(sshd.known_hosts),
                "private_key": encrypted.read_text(),
                "private_key_passphrase": passphrase,
            },
        },
    }
    result, dag_output = run_dag(
        env,
        REPO / "tests" / "dags" / "secrets_transfer.py",
        "test_secrets_transfer",
        {
            "src": str(src),
            "remote": str(remote / "dag"),
            "back": str(work / "back"),
            "password_conn": "at_secret_password",
            "key_conn": "at_secret_key",
        },
        extra_env={k: json.dumps(v) for k, v in conns.items()},
    )
    errors = [line for line in dag_output.splitlines() if "[debug" not in line and "rror" in line]
    assert result["state"].endswith("success"), "\n".join(errors[-30:])[-6000:]

    # Airflow's own task supervisor, at DEBUG, logs each value a task registers for masking
    # ("Sending request ... msg=MaskSecret(value=...)"): its behaviour, not ours, and the
    # reason production runs at INFO (docs/security.md). Every other line is searched.
    own_lines = [line for line in dag_output.splitlines() if "msg=MaskSecret(" not in line]
    texts = {"dag.test() output": "\n".join(own_lines), "XCom": json.dumps(result["xcom"], default=str)}
    for path in sorted((home / "logs").rglob("*")):
        if "test_secrets_transfer" not in str(path):  # the home is shared with this worker's other DAG tests
            continue
        if path.is_file():
            texts[f"task log {path.relative_to(home)}"] = path.read_text(errors="replace")

    cli_env = {"AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url}
    copied = run_cli(
        "copy",
        str(src),
        sshd.url(f"{remote}/cli"),
        "--store",
        store_url,
        "--json",
        "--progress-interval",
        "0.2",
        *ssh_args(sshd),
        env=cli_env,
    )
    assert copied.code == 0, copied.err[-3000:]
    unreachable = make_url(store_url).set(port=1).render_as_string(hide_password=False)
    refused = run_cli("copy", str(src), str(work / "never"), "--store", unreachable)
    assert refused.code != 0, refused.err
    texts.update(
        {
            "CLI copy stdout": copied.out,
            "CLI copy stderr": copied.err,
            "CLI store-error stderr": refused.err,
            "CLI store-error stdout": refused.out,
        }
    )
    summaries = {
        "CLI": copied.summary,
        "upload": result["xcom"]["upload.return_value"],
        "download": result["xcom"]["download.return_value"],
    }

    engine = create_engine(database_url.set(password=store_password))
    try:
        with engine.connect() as conn:
            tables = inspect(conn).get_table_names()
            for name in tables:
                table = Table(name, MetaData(), autoload_with=conn)
                texts[f"store table {name}"] = "\n".join(repr(tuple(r)) for r in conn.execute(select(table)))
    finally:
        engine.dispose()

    server = ApiServer(env, work / "api-server.log").start()
    try:
        yield {
            "needles": needles,
            "texts": texts,
            "summaries": summaries,
            "server": server,
            "env": env,
            "masked_store": masked_store,
            "store_url": store_url,
            "refused": refused,
            "tables": tables,
            "sshd": sshd,
            "encrypted": encrypted,
        }
    finally:
        server.stop()


def _app_paths(env: dict) -> list[str]:
    """Every route the plugin app declares, read from the app (a new route is covered automatically)."""
    code = (
        "import json; from airflow_transfer.plugins.app import create_app; "
        "print('@@ROUTES@@' + json.dumps([r.path for r in create_app('sqlite://').routes]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("@@ROUTES@@"))
    return json.loads(line[len("@@ROUTES@@") :])


def _ui_urls(world) -> list[tuple[str, dict]]:
    server = world["server"]
    token = server.token()
    listing = httpx.get(
        f"{server.url}{PREFIX}/api/transfers", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).json()
    rows = listing.get("transfers") or listing.get("items") or []
    ids = sorted({r["id"] for r in rows if isinstance(r, dict) and "id" in r})
    assert len(ids) >= 3, listing  # upload, download, CLI copy
    keys = sorted({r.get("transfer_key") or r.get("key") for r in rows if isinstance(r, dict)} - {None})
    urls = []
    for path in _app_paths(world["env"]):
        if "{transfer_id}" in path:
            urls += [(path.replace("{transfer_id}", str(i)), {}) for i in ids]
        elif path == "/by-key":
            urls += [(path, {"key": k}) for k in keys]
        else:
            urls.append((path, {}))
    return urls


def _check_secrets_appear_nowhere(world):
    server = world["server"]
    headers = {"Authorization": f"Bearer {server.token()}"}
    texts = dict(world["texts"])
    for path, params in _ui_urls(world):
        for accept in ("text/html", "application/json"):
            resp = httpx.get(
                f"{server.url}{PREFIX}{path}",
                params=params,
                headers={**headers, "Accept": accept},
                timeout=30,
                follow_redirects=True,
            )
            assert resp.status_code == 200, (path, params, resp.status_code, resp.text[:300])
            texts[f"UI {path} {params} ({accept})"] = resp.text
            anonymous = httpx.get(f"{server.url}{PREFIX}{path}", params=params, timeout=30)
            assert anonymous.status_code == 401, (path, anonymous.status_code)
    texts["api-server log"] = server.log()
    # dag.test() runs the tasks in its own process: their logs (DEBUG) are in its output, plus any files
    assert "transfer summary" in texts["dag.test() output"] and "[debug" in texts["dag.test() output"]
    assert "at_transfers" in world["tables"] and len(world["tables"]) >= 5, world["tables"]
    assert world["texts"]["store table at_transfers"].count("\n") >= 2  # upload, download, CLI copy

    leaks = []
    for where, text in texts.items():
        for what, needle in world["needles"].items():
            at = text.find(needle)
            if at >= 0:  # show where, without printing the secret itself
                context = text[max(0, at - 300) : at + len(needle) + 100].replace(needle, "<SECRET>")
                leaks.append(f"{what} in {where}: ...{context}...")
    assert not leaks, "secrets leaked:\n" + "\n\n".join(leaks[:12])


def _check_store_urls_are_shown_masked(world):
    masked = world["masked_store"]
    assert ":***@" in masked
    for name, summary in world["summaries"].items():
        assert summary["store"] == masked, (name, summary["store"])
    err = world["refused"].err
    assert "airflow-transfer: error: " in err and ":***@" in err, err
    assert "Traceback" not in err


def _check_transfers_really_used_the_secrets(world):
    """The password and the encrypted key did the logging in (else the test proves nothing)."""
    dag_output = world["texts"]["dag.test() output"]
    summaries = world["summaries"]
    assert summaries["upload"]["files"] > 0 and not summaries["upload"]["failed"]
    assert summaries["download"]["files"] == summaries["upload"]["files"]
    assert "copying" in dag_output
    sshd_log = world["sshd"].log_text()
    assert f"Accepted password for {world['sshd'].user}" in sshd_log, sshd_log[-3000:]
    fp = subprocess.run(
        ["ssh-keygen", "-lf", f"{world['encrypted']}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert f"Accepted publickey for {world['sshd'].user}" in sshd_log and fp in sshd_log, sshd_log[-3000:]


def test_no_secret_anywhere(world):
    """One test, not three sharing a module fixture: under xdist each worker would run that
    fixture and set its own password for the same test user."""
    _check_transfers_really_used_the_secrets(world)
    _check_store_urls_are_shown_masked(world)
    _check_secrets_appear_nowhere(world)


def test_store_url_is_a_sensitive_airflow_option(airflow_home):
    """Airflow hides [airflow_transfer] store_url in `airflow config list` (and its UI's
    configuration page) and masks it in logs, because the provider declares it sensitive."""
    password = f"pw-cfg-{secrets.token_hex(6)}"
    env = {**airflow_home, "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": f"postgresql+psycopg://u:{password}@db.invalid/x"}
    code = (
        "from airflow.configuration import conf\n"
        "print('SENSITIVE', ('airflow_transfer', 'store_url') in conf.sensitive_config_values)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "SENSITIVE True" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    listed = subprocess.run(
        [sys.executable, "-m", "airflow", "config", "list"], env=env, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0 and "[airflow_transfer]" in listed.stdout, listed.stderr[-2000:]
    assert password not in listed.stdout + listed.stderr
