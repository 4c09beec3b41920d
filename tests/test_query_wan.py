"""Attribute-based access over the emulated WAN: the emulator's own byte counters confirm the accounting.

The query runs in the `src` namespace against the real sshd in `dst`; what
crossed the link from dst to src (the emulator's `rev` counter) must cover
the bytes the query says it read, and for Parquet stay within 40 % of the
file (plus SSH/SFTP framing), while CSV needs the whole file.
"""

from __future__ import annotations

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.ssh import SSHTarget
from airflow_transfer.query.run import QueryRequest, run_query
from tests.support.climate import climate_table
from tests.support.sshd import chown_to_user
from tests.support.wan import wan_testbed  # noqa: F401  (fixture)

pytestmark = pytest.mark.wan
SELECT = ["temperature", "humidity"]


def test_bytes_crossing_the_link_match_the_accounting(wan_testbed, tmp_path):
    tb = wan_testbed(rtt_ms=20, rate_mbit=200)
    s = tb.sshd
    table = climate_table(400_000, seed=6)
    remote = tb.remote_dir()
    pq.write_table(table, remote / "c.parquet", row_group_size=65536)
    pcsv.write_csv(table, remote / "c.csv")
    chown_to_user(remote, s.user)
    target = SSHTarget(
        host=s.host,
        port=s.port,
        username=s.user,
        key_filenames=[str(s.client_key)],
        known_hosts=[str(s.known_hosts)],
        look_for_keys=False,
    )
    expected = [{c: r[c] for c in SELECT} for r in table.to_pylist() if r["humidity"] > 50]
    for name in ("c.parquet", "c.csv"):
        size = (remote / name).stat().st_size
        out = tmp_path / f"{name}.out.parquet"
        before = tb.link.stats()["rev"]["tx_bytes"]
        with tb.in_src():
            summary = run_query(
                QueryRequest(
                    Endpoint("sftp", str(remote / name), target),
                    Endpoint("file", str(out)),
                    select=SELECT,
                    where="humidity > 50",
                )
            )
        crossed = tb.link.stats()["rev"]["tx_bytes"] - before
        report = f"{name}: file {size}, query read {summary['bytes_read']}, link carried {crossed}"
        assert pq.read_table(out).to_pylist() == expected, report
        assert summary["bytes_read"] <= crossed <= summary["bytes_read"] * 1.05 + 64 * 1024, report
        if name.endswith(".parquet"):
            assert crossed <= 0.40 * size + 64 * 1024, report
        else:
            assert summary["bytes_read"] >= size, report
        print(report)
