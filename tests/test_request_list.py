"""copy --from-list: pairs across three host pairs run as three groups, each planned on its own."""

from __future__ import annotations

import os

from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree, tree_digest
from tests.support.servers import FTPServer, HTTPServer


def _files(d):
    return {k: v for k, v in tree_digest(d).items() if v != "dir"}


def test_request_list_spanning_three_host_pairs(sshd, test_base, local_dir, remote_dir, tmp_path):
    ftp = FTPServer(root="/", run_as="attest" if os.geteuid() == 0 else None).start(netrc_dir=tmp_path)
    www = tmp_path / "www"
    make_tree(www / "pub", small=8, seed=21)
    http = HTTPServer(www).start()
    try:
        a = make_tree(local_dir / "a", small=10, seed=22)
        b = make_tree(local_dir / "b", small=6, seed=23)
        c = make_tree(local_dir / "c", small=12, seed=24)
        sftp_url = lambda p: f"sftp://{sshd.user}@{sshd.host}:{sshd.port}{p}"
        lst = tmp_path / "requests.txt"
        lst.write_text(
            "# two pairs to the same SFTP host: one group\n"
            f"{a} {sftp_url(remote_dir / 'a')}\n"
            f"{b} {sftp_url(remote_dir / 'b')}\n"
            f"{c} {ftp.url(str(remote_dir / 'c'))}\n"
            f"{http.url('/pub/')} {local_dir / 'from-http'}\n"
        )
        res = run_cli(
            "copy",
            "--from-list",
            str(lst),
            "--algorithm",
            "globus",
            "--json",
            *ssh_args(sshd),
            env={"NETRC": str(ftp.netrc_path)},
        )
    finally:
        ftp.stop()
        http.stop()
    assert res.code == 0, res.err
    s = res.summary
    groups = {(g["src_host"].split(":")[0], g["dst_host"].split(":")[0]): g for g in s["groups"]}
    assert len(s["groups"]) == 3, s["groups"]
    assert [g["pairs"] for g in s["groups"]] == [2, 1, 1]
    assert ("file", "sftp") in groups and ("file", "ftp") in groups and ("http", "file") in groups
    for g in s["groups"]:
        assert set(g["params"]) == {"pp", "p", "cc"} and g["params_source"].startswith("globus plan of")
        assert g["failed"] == [] and g["files"] > 0
    assert groups[("file", "sftp")]["files"] == 2 + 10 + 2 + 6  # two trees incl. their empty files
    assert _files(remote_dir / "a") == _files(a) and _files(remote_dir / "b") == _files(b)
    assert _files(remote_dir / "c") == _files(c)
    assert _files(local_dir / "from-http") == _files(www / "pub")
    assert s["files"] == sum(g["files"] for g in s["groups"]) and s["failed"] == []


def test_request_list_usage_errors(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("only-one-field\n")
    res = run_cli("copy", "--from-list", str(bad))
    assert res.code == 2 and "not 'SRC DST'" in res.err
    res = run_cli("copy", "--from-list", str(bad), "x", "y")
    assert res.code == 2 and "--from-list" in res.err


def test_operator_pairs_under_dag_test(airflow_home, local_dir, tmp_path):
    from tests.support.airflow_env import REPO, run_dag

    a = make_tree(local_dir / "a", small=5, seed=31)
    b = make_tree(local_dir / "b", small=4, seed=32)
    www = tmp_path / "www"
    make_tree(www / "pub", small=3, seed=33)
    http = HTTPServer(www).start()
    try:
        pairs = [
            [str(a), str(local_dir / "out-a")],
            [str(b), str(local_dir / "out-b")],
            [http.url("/pub/"), str(local_dir / "out-http")],
        ]
        res, log = run_dag(
            airflow_home,
            REPO / "tests" / "dags" / "request_list.py",
            "test_request_list",
            {"pairs": pairs},
            extra_env={"AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "tests" / "dags")},
        )
    finally:
        http.stop()
    assert res["state"].endswith("success"), log[-4000:]
    value = res["xcom"]["copy_pairs.return_value"]
    assert len(value["groups"]) == 2 and [g["pairs"] for g in value["groups"]] == [2, 1]
    assert _files(local_dir / "out-a") == _files(a) and _files(local_dir / "out-http") == _files(www / "pub")
