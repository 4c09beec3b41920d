"""The profiling DAGs under dag.test() against the real sshd, the library in SQLite and PostgreSQL,
and a following transfer (the example DAG) starting from the library's values."""

from __future__ import annotations

from airflow_transfer.store import Store
from tests.support.airflow_env import REPO, run_dag, sftp_conn_env
from tests.support.data import make_tree
from tests.support.postgres import postgres_server, store_url  # noqa: F401  (fixtures)

DAGS = REPO / "dags" / "airflow_transfer_profiling.py"


def test_profiling_dag_writes_the_library_and_the_next_transfer_uses_it(
    airflow_home, sshd, remote_dir, local_dir, store_url
):
    env = {**sftp_conn_env("at_prof_sftp", sshd), "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url}
    far = f"{sshd.host}:{sshd.port}"
    result, log = run_dag(
        airflow_home,
        DAGS,
        "airflow_transfer_profile",
        {"pairs": [["local", f"at_prof_sftp:{remote_dir}"]], "quick": True},
        extra_env=env,
    )
    assert result["state"].endswith("success"), log[-5000:]
    # one mapped task instance per host (disk, memory, kernel) and per ordered pair (network, tune)
    assert set(result["tasks"]) == {
        "hosts_to_profile",
        "pairs_to_profile",
        *(
            f"{t}[{i}]"
            for t in ("disk_profile", "memory_profile", "kernel_profile", "network_profile", "tune")
            for i in (0, 1)
        ),
    }
    assert all(state.endswith("success") for state in result["tasks"].values()), result["tasks"]
    assert result["xcom"]["hosts_to_profile.return_value"] == ["local", f"at_prof_sftp:{remote_dir}"]
    assert result["xcom"]["pairs_to_profile.return_value"] == [["local", "at_prof_sftp"], ["at_prof_sftp", "local"]]

    with Store.open(store_url) as store:
        kinds = {(p["host"], p["peer"], p["kind"]) for p in store.profiles(limit=1000)}
        for host in ("localhost", far):
            assert {(host, "", k) for k in ("disk", "memory", "kernel")} <= kinds
        assert {("localhost", far, "network"), (far, "localhost", "network")} <= kinds
        disk = store.latest_profile(far, "disk")
        assert disk["payload"]["path"] == str(remote_dir)  # the conn:/dir spec chose the directory
        up, down = store.tuned_for("localhost", far), store.tuned_for(far, "localhost")
        assert up is not None and down is not None and up["bdp_bytes"] > 0 and down["bdp_bytes"] > 0
        assert len(store.tuning_library()) == 2

    # a transfer that follows starts from the library (operator -> job.py)
    src = make_tree(local_dir / "after-profile", small=30, seed=31)
    result, log = run_dag(
        airflow_home,
        REPO / "dags" / "example_sftp_copy.py",
        "example_sftp_copy",
        {"src": str(src), "dst": str(remote_dir / "out"), "conn_id": "at_prof_sftp", "algorithm": "auto"},
        extra_env=env,
    )
    assert result["state"].endswith("success"), log[-4000:]
    tuning = result["xcom"]["copy_dataset.return_value"]["tuning"]
    assert tuning["source"] == f"library (measured {up['measured_at']})"
    assert tuning["library_id"] == up["id"]
    assert abs(tuning["rtt_ms"] - up["rtt_ms"]) < 1e-3 and abs(tuning["bandwidth_mbit"] - up["bandwidth_mbit"]) < 0.01
    assert (tuning["streams"], tuning["tcp_buffer"], tuning["block_size"]) == (
        up["streams"],
        up["tcp_buffer"],
        up["block_size"],
    )

    if not store_url.startswith("sqlite"):
        return  # the back-off state on PostgreSQL: tests/test_store_tuning_library.py (the DAG runs cost minutes)
    # the light DAG: due on its first run, skipped on the next tick (interval not over)
    conf = {"pairs": [["local", "at_prof_sftp"]], "quick": True, "base_interval_minutes": 60}
    result, log = run_dag(airflow_home, DAGS, "airflow_transfer_profile_light", conf, extra_env=env)
    assert result["state"].endswith("success"), log[-5000:]
    assert result["tasks"]["light_profile[0]"].endswith("success"), result["tasks"]
    assert result["tasks"]["light_profile[1]"].endswith("success"), result["tasks"]
    with Store.open(store_url) as store:
        state = store.light_schedule("localhost", far)
        assert state["interval_s"] == 3600 and state["last_bandwidth_mbit"] > 0
        newer = store.tuned_for("localhost", far)
        assert newer["id"] != up["id"]  # the tuner ran again on the light result
        assert store.latest_profile("localhost", "network-light", peer=far)["id"] in newer["profile_ids"]
    result, log = run_dag(airflow_home, DAGS, "airflow_transfer_profile_light", conf, extra_env=env)
    assert result["tasks"]["light_profile[0]"].endswith("skipped"), (result["tasks"], log[-3000:])
    assert result["tasks"]["light_profile[1]"].endswith("skipped"), (result["tasks"], log[-3000:])
    assert "is not due until" in log
    with Store.open(store_url) as store:
        assert store.light_schedule("localhost", far)["last_run_at"] == state["last_run_at"]


def test_pairs_come_from_the_variable_when_the_param_is_empty(airflow_home, sshd, tmp_path):
    import json

    store_url = f"sqlite:///{tmp_path / 'library.db'}"

    env = {
        **sftp_conn_env("at_var_sftp", sshd),
        "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url,
        "AIRFLOW_VAR_AIRFLOW_TRANSFER_PROFILE_PAIRS": json.dumps([["at_var_sftp", "local"]]),
    }
    result, log = run_dag(airflow_home, DAGS, "airflow_transfer_profile_light", {"quick": True}, extra_env=env)
    assert result["state"].endswith("success"), log[-5000:]
    assert result["xcom"]["pairs_to_profile.return_value"] == [["at_var_sftp", "local"], ["local", "at_var_sftp"]]
    with Store.open(store_url) as store:
        assert len(store.light_schedules()) == 2
