"""The profiling DAG under dag.test() with the sshd behind the emulated WAN: the library holds the
link's figures. (Alone in its module so the loopback DAG tests run in the parallel phase.)"""

from __future__ import annotations

from airflow_transfer.store import Store
from tests.support.airflow_env import REPO, run_dag, sftp_conn_env
from tests.support.wan import wan_testbed  # noqa: F401  (fixture)

DAGS = REPO / "dags" / "airflow_transfer_profiling.py"


def test_profiling_dag_over_the_emulated_wan(airflow_home, wan_testbed, tmp_path):
    """The DAG's tasks run in the `src` namespace (dag.test() started from a thread inside it), the
    sshd host sits behind the emulated 50 ms / 200 Mbit/s link: the library holds the link's figures."""
    tb = wan_testbed(rtt_ms=50, rate_mbit=200)
    store_url = f"sqlite:///{tmp_path / 'library.db'}"
    env = {**sftp_conn_env("at_wan_sftp", tb.sshd), "AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": store_url}
    far = f"{tb.sshd.host}:{tb.sshd.port}"

    def profile_and_read() -> list[dict]:
        before = tb.link.stats()["fwd"]["tx_bytes"]
        with tb.in_src():
            result, log = run_dag(
                airflow_home,
                DAGS,
                "airflow_transfer_profile",
                # a directory of its own per run: the re-profile below is a second run
                {"pairs": [["local", f"at_wan_sftp:{tb.remote_dir()}"]], "quick": True},
                extra_env=env,
            )
        assert result["state"].endswith("success"), log[-5000:]
        assert tb.link.stats()["fwd"]["tx_bytes"] - before > 10_000_000  # the probe crossed the emulator
        with Store.open(store_url) as store:
            return [store.tuned_for(src, dst) for src, dst in (("localhost", far), (far, "localhost"))]

    def off(row: dict) -> bool:
        return abs(row["bandwidth_mbit"] - 200) > 40 or abs(row["bdp_bytes"] - 1_250_000) > 0.3 * 1_250_000

    rows = profile_and_read()
    if any(off(row) for row in rows):
        # A rate probe of a few seconds on 2 shared cores can be cut by one scheduler stall;
        # the DAG re-profiles as a user would, and the newest figures must then hold.
        print("re-profiling once after", [(r["bandwidth_mbit"], r["bdp_bytes"]) for r in rows])
        rows = profile_and_read()
    for (src, dst), row in zip((("localhost", far), (far, "localhost")), rows):
        assert abs(row["rtt_ms"] - 50) <= 5, row
        assert abs(row["bandwidth_mbit"] - 200) <= 40, row
        assert abs(row["bdp_bytes"] - 1_250_000) <= 0.3 * 1_250_000, row
        print(f"{src} -> {dst}: RTT {row['rtt_ms']} ms, {row['bandwidth_mbit']} Mbit/s, BDP {row['bdp_bytes']} B")
