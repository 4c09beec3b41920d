"""Every tuning algorithm drives the real engine over the real sshd; plan moves no data."""

from __future__ import annotations

import pytest

from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree, temp_files, tree_digest


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("alg") / "t", small=150, big_mib=20, seed=31)


@pytest.mark.parametrize("algorithm", ["globus", "pcp", "mc", "adaptive-cc", "auto"])
def test_algorithm_copies_byte_identical_and_reports_chunks(algorithm, tree, sshd, remote_dir):
    res = run_cli(
        "copy",
        str(tree),
        sshd.url(f"{remote_dir}/{algorithm}"),
        "--algorithm",
        algorithm,
        "--rtt-ms",
        "1",
        "--bandwidth-mbit",
        "1000",
        "--json",
        *ssh_args(sshd),
    )
    assert res.code == 0, res.err
    s = res.summary
    assert s["algorithm"] == algorithm and s["failed"] == []
    assert s["tuning"]["source"] == "given" and s["tuning"]["rtt_ms"] == 1.0
    assert sum(c["files"] for c in s["chunks"]) == s["files"] - s["files_skipped"] or s["files_skipped"] == 0
    assert all(c["pp"] >= 1 and c["p"] >= 1 and c["cc"] >= 1 for c in s["chunks"])
    assert tree_digest(remote_dir / algorithm) == tree_digest(tree)
    assert temp_files(remote_dir) == []


def test_plan_from_manifest_moves_nothing(tree, tmp_path):
    manifest = tmp_path / "m.parquet"
    assert run_cli("list", str(tree), "--out", str(manifest)).code == 0
    res = run_cli(
        "plan", "--manifest", str(manifest), "--algorithm", "pcp", "--rtt-ms", "50", "--bandwidth-mbit", "500", "--json"
    )
    assert res.code == 0, res.err
    plan = res.summary
    assert plan["link"]["bdp_bytes"] == 3_125_000
    assert sum(c["files"] for c in plan["chunks"]) == plan["files"] == 153
    big = [c for c in plan["chunks"] if c["max_size"] >= 20 * 1024 * 1024]
    assert big and all(c["params"]["pp"] >= 1 for c in plan["chunks"])


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--algorithm", "nope"], "invalid choice"),
        (["--bdp", "100", "--rtt-ms", "5"], "either --bdp"),
        (["--rtt-ms", "5"], "go together"),
    ],
)
def test_plan_bad_arguments(tree, args, needle):
    res = run_cli("plan", str(tree), *args)
    assert res.code == 2 and needle in res.err and "Traceback" not in res.err
