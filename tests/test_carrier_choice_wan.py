"""An upload's bundles ride paramiko over an emulated 50 ms link (engine/carrier_choice.py).

The command line reads the round trip from its first connection's TCP handshake: over wan50
it is at least 50 ms whatever the machine's load, so the choice is paramiko, and the summary
says why. From Airflow (run_copy without the command line's early start) the chunk's own
connection decides the same way. Loopback's side of the rule is in test_carrier_choice.py.
"""

from __future__ import annotations

import json
import os
import re

from airflow_transfer.engine.bundle_channel import CARRIER_ENV
from tests.support.cli import ssh_args
from tests.support.data import tree_digest, write_random
from tests.support.wan import wan_testbed  # noqa: F401  (fixture)

WHY = re.compile(r"over paramiko \(round trip (\d+) ms, at or above 10 ms\)")


def _small_tree(root, n: int) -> None:
    for i in range(n):
        write_random(root / f"d{i % 4}" / f"f{i:03d}.bin", 16 * 1024 + i, seed=500 + i)
    for d in [root, *root.iterdir()]:
        os.chmod(d, 0o755)


def test_a_wan_upload_bundles_over_paramiko_and_says_the_round_trip(wan_testbed):
    tb = wan_testbed(rtt_ms=50, rate_mbit=500)
    src = tb.base / "src"
    _small_tree(src, 120)
    dst = tb.remote_dir("far")
    store = f"sqlite:///{tb.base}/store.db"
    res = tb.python_in_src(
        ["-m", "airflow_transfer.cli", "copy", str(src), tb.sshd.url(str(dst)), "--json", "--store", store]
        + ssh_args(tb.sshd),
        timeout=300,
        check=False,
        capture_output=True,
        text=True,
        env={CARRIER_ENV: ""},  # not forced either way
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    transports = [c["transport"] for c in summary["chunks"]]
    found = [WHY.search(t) for t in transports]
    assert any(found), transports
    assert all(int(m.group(1)) >= 45 for m in found if m), transports  # the link's 50 ms, as the kernel saw it
    assert tree_digest(dst) == tree_digest(src)


def test_a_wan_upload_run_from_python_decides_on_its_own_connection(wan_testbed):
    tb = wan_testbed(rtt_ms=50, rate_mbit=500)
    src = tb.base / "src"
    _small_tree(src, 60)
    dst = tb.remote_dir("far-py")
    code = f"""
import json, sys
from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.protocols.ssh_config import from_ssh_config
target = from_ssh_config({tb.sshd.host!r}, {tb.sshd.port}, {tb.sshd.user!r}, identity={str(tb.sshd.client_key)!r},
                         known_hosts={str(tb.sshd.known_hosts)!r})
s = run_copy(CopyRequest(Endpoint("file", {str(src)!r}), Endpoint("sftp", {str(dst)!r}, target),
                         TransferParams(pp=8, cc=2), use_store=False))
print(json.dumps([c["transport"] for c in s["chunks"]] + [len(s["failed"])]))
"""
    res = tb.python_in_src(
        ["-c", code], timeout=300, check=False, capture_output=True, text=True, env={CARRIER_ENV: ""}
    )
    assert res.returncode == 0, res.stderr[-3000:]
    *transports, failed = json.loads(res.stdout.strip().splitlines()[-1])
    assert failed == 0
    assert any(WHY.search(t) for t in transports), transports
    assert tree_digest(dst) == tree_digest(src)
