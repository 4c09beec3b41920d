"""A real sshd that only a real bastion sshd can reach (tests/support/bastion.py): copies through
ProxyJump and ProxyCommand from the CLI and from an Airflow connection, and the error of each hop.

The target's sshd logs every client's address: each test checks that the only one is the
bastion's, so nothing reached the target another way.
"""

from __future__ import annotations

import json

import pytest

from airflow_transfer.errors import ConnectError, HostKeyError
from airflow_transfer.protocols.pool import SFTPPool
from airflow_transfer.protocols.ssh import open_transport
from airflow_transfer.protocols.ssh_config import from_ssh_config
from tests.support.airflow_env import REPO, run_dag
from tests.support.bastion import BASTION_ADDR, bastion_site  # noqa: F401  (the fixture)
from tests.support.cli import run_cli
from tests.support.data import make_tree, temp_files, tree_digest

# Network namespaces (root), but no rates: routes, keys and errors hold under CPU contention, and
# each site's namespaces carry this process's pid, so it runs beside the other tests rather than
# in the serial WAN phase.
WAN_PARALLEL_OK = True


def _only_through_bastion(site) -> None:
    clients = site.target_clients()
    assert clients and set(clients) == {BASTION_ADDR}, clients


def test_the_target_cannot_be_reached_directly(bastion_site):
    site = bastion_site
    direct = from_ssh_config("target", None, None, str(site.ssh_config))
    assert direct.jump is not None and direct.route.startswith("via jump host ")
    direct.jump, direct.timeout = None, 3
    with pytest.raises(ConnectError):
        open_transport(direct)
    assert set(site.target_clients()) <= {BASTION_ADDR}  # whatever answered the direct attempt, not the target
    # ...and through the bastion it answers
    carried = site.relay.carried
    t = open_transport(from_ssh_config("target", None, None, str(site.ssh_config)))
    t.close()
    assert site.relay.carried == carried + 1
    _only_through_bastion(site)


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_cli_copies_through_proxyjump_from_ssh_config(bastion_site, tmp_path, client):
    site = bastion_site
    src = make_tree(tmp_path / "src", small=60, big_mib=6, seed=31)
    remote = site.remote_dir()
    carried = site.relay.carried
    common = ["--ssh-config", str(site.ssh_config), "--ssh-client", client, "--json"]
    # p=2 splits the big file over two connections; verification runs the checksum helper over exec
    up = run_cli("copy", str(src), f"sftp://target{remote}/out", "--pp", "8", "-p", "2", "-c", "3", *common)
    assert up.code == 0, up.err[-3000:]
    s = up.summary
    assert s["failed"] == [] and s["verify"]["verified"] == s["files"] > 60
    assert s["ssh_client"] == client
    assert tree_digest(remote / "out") == tree_digest(src) and temp_files(remote) == []
    # back again: the remote listing runs over an exec channel through the bastion too
    back = run_cli("copy", f"sftp://target{remote}/out", str(tmp_path / "back"), *common)
    assert back.code == 0, back.err[-3000:]
    assert back.summary["failed"] == [] and back.summary["verify"]["verified"] == s["files"]
    assert tree_digest(tmp_path / "back") == tree_digest(src)
    assert site.relay.carried - carried >= 3  # at least p connections and a helper, each via the bastion
    _only_through_bastion(site)


def test_cli_copies_over_a_proxy_command(bastion_site, tmp_path):
    site = bastion_site
    src = make_tree(tmp_path / "src", small=25, seed=32)
    remote = site.remote_dir()
    carried = site.relay.carried
    run = run_cli("copy", str(src), f"sftp://target-cmd{remote}/out", "--ssh-config", str(site.ssh_config), "--json")
    assert run.code == 0, run.err[-3000:]
    assert run.summary["failed"] == [] and run.summary["verify"]["verified"] == run.summary["files"]
    assert tree_digest(remote / "out") == tree_digest(src)
    assert site.relay.carried > carried  # the command was `ssh -W %h:%p bastion`
    _only_through_bastion(site)


def test_chained_jump_hosts(bastion_site):
    # bastion, then the bastion again by its inside address (a second real hop), then the target;
    # the second hop has no key in the config and is tried with the target's
    site = bastion_site
    cfg = site.base / "ssh_config_chain"
    cfg.write_text(
        site.ssh_config.read_text() + f"Host chained\n  HostName {site.target.host}\n  Port {site.target.port}\n"
        f"  IdentityFile {site.target.client_key}\n  UserKnownHostsFile {site.known_hosts} {site.bastion.known_hosts}\n"
        f"  ProxyJump bastion,{site.bastion.user}@{BASTION_ADDR}:{site.bastion.port}\n"
    )
    target = from_ssh_config("chained", None, site.target.user, str(cfg))
    assert target.route.count("->") == 1
    for client in ("paramiko", "openssh"):
        target.client = client
        pool = SFTPPool(target)
        try:
            conn = pool.acquire()
            assert conn.client == client and conn.wire.realpath(".").startswith("/")
            pool.release(conn)
        finally:
            pool.close()
    _only_through_bastion(site)


def test_airflow_connection_with_a_proxy_jump_extra(bastion_site, airflow_home, tmp_path):
    site = bastion_site
    src = make_tree(tmp_path / "dag-src", small=40, seed=33)
    remote = site.remote_dir()
    conn = {
        "conn_type": "sftp",
        "host": site.target.host,
        "port": site.target.port,
        "login": site.target.user,
        "extra": {
            "key_file": str(site.target.client_key),  # the bastion accepts it too: the jump host borrows it
            "known_hosts": str(site.known_hosts),
            "proxy_jump": f"{site.bastion.user}@127.0.0.1:{site.bastion_port}",
            "conn_timeout": 20,
            "compress": True,
        },
    }
    carried = site.relay.carried
    result, log = run_dag(
        airflow_home,
        REPO / "dags" / "example_sftp_copy.py",
        "example_sftp_copy",
        {"src": str(src), "dst": str(remote / "out"), "conn_id": "at_bastion"},
        extra_env={"AIRFLOW_CONN_AT_BASTION": json.dumps(conn), "HOME": str(tmp_path)},
    )
    assert result["state"].endswith("success"), log[-4000:]
    summary = result["xcom"]["copy_dataset.return_value"]
    assert summary["failed"] == [] and summary["verify"]["verified"] == summary["files"] == 42
    assert tree_digest(remote / "out") == tree_digest(src) and temp_files(remote) == []
    # auto's first contact needed an RTT: over a jump there is no socket of ours, so SFTP round trips
    notes = "\n".join(summary["tuning"]["notes"])
    assert "SFTP round trips" in notes, notes
    assert "compress=true is ignored" in log
    assert site.relay.carried > carried
    _only_through_bastion(site)


def test_each_hop_names_itself_when_it_fails(bastion_site, tmp_path):
    site = bastion_site

    def target_with(**jump_changes):
        t = from_ssh_config("target", None, None, str(site.ssh_config))
        assert t.jump is not None
        for name, value in jump_changes.items():
            setattr(t.jump, name, value)
        t.timeout = t.jump.timeout = 10
        return t

    # the bastion refuses the connection
    closed = target_with(port=_closed_port())
    with pytest.raises(ConnectError, match=r"^jump host .*127\.0\.0\.1.*: cannot connect to 127\.0\.0\.1"):
        open_transport(closed)
    # the bastion's host key is not the one known_hosts has for it
    wrong = tmp_path / "known_hosts_wrong"
    other = (site.target.host_key.parent / "ssh_host_ed25519_key.pub").read_text().split()
    wrong.write_text(f"[127.0.0.1]:{site.bastion_port} {other[0]} {other[1]}\n")
    with pytest.raises(HostKeyError, match=r"^jump host .*: host key of \[127\.0\.0\.1\]:\d+ CHANGED") as err:
        open_transport(target_with(known_hosts=[str(wrong)]))
    assert f"on the way to {site.target.user}@{site.target.host}" in err.value.message
    # the bastion is fine but cannot reach the target's port
    unreachable = target_with()
    unreachable.port = site.target.port + 1
    with pytest.raises(ConnectError, match=rf"^jump host \S+ cannot reach {site.target.host}:{site.target.port + 1}"):
        open_transport(unreachable)
    # the target itself is reached but its key is wrong: the error is the target's, not a hop's
    bad_target = target_with()
    bad_target.known_hosts = [str(wrong)]
    with pytest.raises(HostKeyError, match=rf"^host key of \[{site.target.host}\]:{site.target.port} is not known"):
        open_transport(bad_target)
    # the same errors through the CLI, as one line each
    cfg = tmp_path / "ssh_config_refused"
    cfg.write_text(site.ssh_config.read_text().replace(f"Port {site.bastion_port}", f"Port {_closed_port()}"))
    run = run_cli("copy", str(tmp_path), f"sftp://target{site.remote_dir()}/x", "--ssh-config", str(cfg))
    assert run.code != 0 and "jump host" in run.err and "Traceback" not in run.err, run.err[-2000:]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_profile_runs_on_the_host_behind_the_bastion(bastion_site, tmp_path):
    site = bastion_site
    remote = site.remote_dir()
    env = {"AIRFLOW__AIRFLOW_TRANSFER__STORE_URL": f"sqlite:///{tmp_path / 'library.db'}"}
    run = run_cli(
        "profile",
        f"sftp://target{remote}",
        "--quick",
        "--ssh-config",
        str(site.ssh_config),
        "--json",
        env=env,
        timeout=300,
    )
    assert run.code == 0, run.err[-3000:]
    out = run.summary
    far = f"{site.target.host}:{site.target.port}"
    assert {k: v["ok"] for k, v in out["hosts"][far].items()} == {"disk": True, "memory": True, "kernel": True}
    # the sink behind the bastion is reached through SSH, whatever --via said; the RTT is the first leg's
    assert [link["via"] for link in out["links"]] == ["ssh", "ssh"]
    assert all(link["bandwidth_mbit"] > 0 and link["rtt_ms"] > 0 for link in out["links"])
    _only_through_bastion(site)
