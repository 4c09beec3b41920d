"""`airflow-transfer profile`: profilers run here and on the sshd host over SSH, the tuner's results land in the store."""

from __future__ import annotations

import os

import pytest

from airflow_transfer.store import Store
from tests.support.cli import run_cli, ssh_args


@pytest.fixture
def store_env(tmp_path):
    url = f"sqlite:///{tmp_path / 'library.db'}"
    return url, {"AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": url}


@pytest.mark.parametrize("via", ["direct", "ssh"])
def test_profile_an_ssh_host_stores_profiles_and_both_directions(sshd, remote_dir, store_env, via):
    url, env = store_env
    res = run_cli(
        "profile", sshd.url(str(remote_dir)), "--quick", "--via", via, "--json", *ssh_args(sshd), env=env, timeout=240
    )
    assert res.code == 0, res.err
    out = res.summary
    far = f"{sshd.host}:{sshd.port}"
    assert set(out["hosts"]) == {far, "localhost"}
    for host in out["hosts"].values():
        assert {k: v["ok"] for k, v in host.items()} == {"disk": True, "memory": True, "kernel": True}
    assert out["hosts"][far]["disk"]["summary"]["write"]["best_block"] > 0
    assert [(l["source"], l["destination"], l["direction"], l["via"]) for l in out["links"]] == [
        (far, "localhost", "recv", via),
        ("localhost", far, "send", via),
    ]
    for link in out["links"]:
        assert 0 < link["rtt_ms"] < 50 and link["bandwidth_mbit"] > 0
    assert {(t["source"], t["destination"], t["protocol"]) for t in out["tuned"]} == {
        (far, "localhost", "sftp"),
        ("localhost", far, "sftp"),
    }
    assert "profiles" not in res.out and "tuned localhost ->" in res.err  # progress on stderr only
    # nothing left behind on the remote host: the disk profiler cleaned its directory, nothing was installed
    assert os.listdir(remote_dir) == []

    with Store.open(url) as store:
        row = store.tuned_for("localhost", far, "sftp")
        assert row is not None and row["bdp_bytes"] > 0 and row["block_size"] > 0
        kinds = {(p["host"], p["peer"], p["kind"]) for p in store.profiles()}
        assert (far, "", "disk") in kinds and ("localhost", far, "network") in kinds
        assert (far, "localhost", "network") in kinds
        # provenance: the tuned row names the profiles it came from
        assert set(row["profile_ids"]) <= {p["id"] for p in store.profiles()}
        net = store.latest_profile("localhost", "network", peer=far)
        assert net["id"] in row["profile_ids"] and row["measured_at"] == net["measured_at"]
        assert len(store.tuning_library()) == 2


def test_light_profile_updates_the_back_off_state(sshd, store_env):
    url, env = store_env
    res = run_cli("profile", sshd.url("/"), "--light", "--quick", "--json", *ssh_args(sshd), env=env)
    assert res.code == 0, res.err
    links = res.summary["links"]
    assert [l["kind"] for l in links] == ["network-light", "network-light"]
    assert all(l["schedule"]["interval_s"] == 3600 for l in links)
    with Store.open(url) as store:
        assert len(store.light_schedules()) == 2
        assert store.tuned_for("localhost", f"{sshd.host}:{sshd.port}") is not None


def test_unreachable_host_is_one_clear_line(store_env, tmp_path):
    from tests.support.sshd import free_port

    _, env = store_env
    res = run_cli(
        "profile", f"sftp://127.0.0.1:{free_port()}/", "--quick", "--known-hosts", str(tmp_path / "none"), env=env
    )
    assert res.code != 0
    lines = res.err.strip().splitlines()
    assert lines[-1].startswith("airflow-transfer: error: cannot connect to 127.0.0.1"), res.err
    assert "Traceback" not in res.err


def test_host_without_scheme_is_a_usage_error(store_env):
    res = run_cli("profile", "farhost", env=store_env[1])
    assert res.code == 2 and "sftp://farhost" in res.err
