"""The provider's connection type: created from the CLI with no warning, tested with `airflow
connections test` and the UI form's Test button against the test sshd, its form fields served by a
real api-server (docs/operators.md, "Connections")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from airflow_transfer.provider_info import CONN_FIELDS, CONN_TYPE
from tests.support.api_server import ApiServer
from tests.support.data import make_tree
from tests.support.sshd import chown_to_user

pytestmark = pytest.mark.airflow


def _airflow(env: dict, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env={**env, **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _extra(sshd, **overrides) -> dict:
    return {"key_file": str(sshd.client_key), "known_hosts": str(sshd.known_hosts), **overrides}


def _env_conn(name: str, sshd, **overrides) -> dict:
    conn = {"conn_type": CONN_TYPE, "host": sshd.host, "port": sshd.port, "login": sshd.user}
    return {f"AIRFLOW_CONN_{name.upper()}": json.dumps({**conn, "extra": _extra(sshd, **overrides)})}


ENABLED = {"AIRFLOW__CORE__TEST_CONNECTION": "Enabled"}


def _warnings(res: subprocess.CompletedProcess) -> set[str]:
    """The warning lines of a command, without their timestamps."""
    lines = (res.stdout + res.stderr).splitlines()
    return {line.split("]", 1)[-1].strip() for line in lines if "warn" in line.lower()}


def test_cli_adds_the_connection_type_without_a_warning_and_tests_it(airflow_home, sshd):
    fields = ["--conn-host", sshd.host, "--conn-port", str(sshd.port), "--conn-login", sshd.user]
    extra = ["--conn-extra", json.dumps(_extra(sshd))]
    added = _airflow(airflow_home, "connections", "add", "at_conn_cli", "--conn-type", CONN_TYPE, *fields, *extra)
    assert added.returncode == 0, (added.stdout + added.stderr)[-3000:]
    # Airflow 3.3 logs a DeprecatedImportWarning of its own for any --conn-type, its built-in
    # "generic" too: nothing beyond that, and no "invalid type ... overriding with generic".
    baseline = _airflow(airflow_home, "connections", "add", "at_conn_generic", "--conn-type", "generic", *fields)
    assert _warnings(added) <= _warnings(baseline), _warnings(added) - _warnings(baseline)
    assert "invalid" not in added.stdout + added.stderr
    # The way docs/operators.md shows (--conn-json) prints no warning at all.
    as_json = {"conn_type": CONN_TYPE, "host": sshd.host, "port": sshd.port, "login": sshd.user, "extra": _extra(sshd)}
    documented = _airflow(airflow_home, "connections", "add", "at_conn_json", "--conn-json", json.dumps(as_json))
    assert documented.returncode == 0 and not _warnings(documented), documented.stdout + documented.stderr
    got = _airflow(airflow_home, "connections", "get", "at_conn_cli", "-o", "json")
    assert got.returncode == 0, got.stderr[-2000:]
    (stored,) = json.loads(got.stdout[got.stdout.index("[") :])
    assert stored["conn_type"] == CONN_TYPE and stored["host"] == sshd.host and int(stored["port"]) == sshd.port

    # The URI form of an environment variable names the type with a dash (Airflow turns it into "_").
    uri = f"airflow-transfer://{sshd.user}@{sshd.host}:{sshd.port}/?key_file={sshd.client_key}&known_hosts={sshd.known_hosts}"
    tested = {}
    for conn_id, extra_env in (
        ("at_conn_cli", {}),
        ("at_conn_json", {}),
        ("at_conn_uri", {"AIRFLOW_CONN_AT_CONN_URI": uri}),
    ):
        tested[conn_id] = _airflow(airflow_home, "connections", "test", conn_id, extra_env={**ENABLED, **extra_env})
    for conn_id, res in tested.items():
        assert res.returncode == 0 and "Connection success" in res.stdout, (conn_id, res.stdout + res.stderr)

    # Off unless the deployment enables it (Airflow's own switch, honoured as it is).
    disabled = _airflow(airflow_home, "connections", "test", "at_conn_cli")
    assert disabled.returncode == 1 and "disabled" in disabled.stdout


def test_connections_test_fails_with_one_clear_line_on_a_refused_key_or_an_unknown_host_key(
    airflow_home, sshd, local_dir
):
    empty = local_dir / "known_hosts"
    empty.write_text("")
    cases = {
        "at_conn_refused": (_env_conn("at_conn_refused", sshd, key_file=str(sshd.other_key)), "authentication as"),
        "at_conn_unknown": (_env_conn("at_conn_unknown", sshd, known_hosts=str(empty)), "is not known"),
    }
    for conn_id, (extra_env, expected) in cases.items():
        res = _airflow(airflow_home, "connections", "test", conn_id, extra_env={**ENABLED, **extra_env})
        assert res.returncode == 1 and "Connection failed" in res.stdout, (conn_id, res.stdout + res.stderr)
        assert expected in res.stdout and "Traceback" not in res.stdout + res.stderr, res.stdout
        assert "--" not in res.stdout.split("Connection failed!", 1)[1]  # Airflow words, not CLI flags
    assert "extra `host_key`" in res.stdout  # what to do about an unknown key, for a connection


def test_test_connection_lists_the_home_and_says_what_it_reached(sshd, monkeypatch, remote_dir):
    from airflow_transfer.hooks.endpoint import TransferEndpointHook

    monkeypatch.setenv(*next(iter(_env_conn("at_conn_hook", sshd).items())))
    ok, message = TransferEndpointHook("at_conn_hook").test_connection()
    assert ok, message
    assert f"logged in to {sshd.host}:{sshd.port} as {sshd.user} over paramiko (host key verified)" in message
    assert " lists " in message

    missing = str(remote_dir / "no-such-dir")
    monkeypatch.setenv(*next(iter(_env_conn("at_conn_nodir", sshd).items())))
    from airflow_transfer.protocols.check import check_sftp

    hook = TransferEndpointHook("at_conn_nodir")
    with pytest.raises(Exception, match="cannot list") as info:
        check_sftp(hook.endpoint(missing).target, missing)
    assert "check the path" in str(info.value)
    # a directory it can read: its entries are counted
    tree = make_tree(remote_dir / "listed", small=3, seed=71)
    chown_to_user(tree, sshd.user)
    said = check_sftp(hook.endpoint(str(tree)).target, str(tree))
    assert said.endswith(f"{tree} lists {len(list(tree.iterdir()))} entries"), said


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    from tests.support.airflow_env import migrate

    home = tmp_path_factory.mktemp("conn-airflow-home")
    env = {**migrate(home), **ENABLED}
    server = ApiServer(env, Path(home) / "api-server.log").start()
    try:
        yield server
    finally:
        server.stop()


def test_the_form_fields_and_test_button_on_a_real_api_server(api_server, sshd):
    headers = {"Authorization": f"Bearer {api_server.token()}"}
    meta = httpx.get(f"{api_server.url}/ui/connections/hook_meta", headers=headers, timeout=60)
    assert meta.status_code == 200, meta.text[:2000]
    (ours,) = [m for m in meta.json() if m["connection_type"] == CONN_TYPE]
    assert ours["hook_class_name"] == "airflow_transfer.hooks.endpoint.TransferEndpointHook"
    assert ours["hook_name"] == "SFTP (airflow-transfer)"
    assert set(ours["extra_fields"]) == set(CONN_FIELDS)
    assert ours["extra_fields"]["private_key_passphrase"]["schema"]["format"] == "password"
    assert ours["extra_fields"]["key_file"]["schema"]["title"] == "Private key file"
    assert ours["standard_fields"]["url_schema"]["hidden"] is True
    assert ours["standard_fields"]["login"]["title"] == "Username"

    # What the form's Test button posts: the fields as typed, nothing saved.
    body = {
        "connection_id": "at_conn_form",
        "conn_type": CONN_TYPE,
        "host": sshd.host,
        "port": sshd.port,
        "login": sshd.user,
        "extra": json.dumps(_extra(sshd)),
    }
    good = httpx.post(f"{api_server.url}/api/v2/connections/test", json=body, headers=headers, timeout=120)
    assert good.status_code == 200 and good.json()["status"] is True, good.text
    assert "host key verified" in good.json()["message"]
    refused = {**body, "extra": json.dumps(_extra(sshd, key_file=str(sshd.other_key)))}
    bad = httpx.post(f"{api_server.url}/api/v2/connections/test", json=refused, headers=headers, timeout=120)
    assert bad.status_code == 200 and bad.json()["status"] is False, bad.text
    assert "authentication as" in bad.json()["message"] and "key_file" in bad.json()["message"]
