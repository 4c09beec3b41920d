"""SSH options users already set: SSHHook's connection extras, ~/.ssh/config proxies, ProxyCommand.

Against the real loopback sshd; hosts reachable only through a bastion are in tests/test_bastion.py.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time

import pytest

from airflow_transfer.errors import ConnectError, UsageError
from airflow_transfer.protocols import openssh
from airflow_transfer.protocols.pool import SFTPPool
from airflow_transfer.protocols.ssh import open_sftp, open_transport
from airflow_transfer.protocols.ssh_config import expand_tokens, from_ssh_config, set_proxy

GCM = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]


@pytest.fixture
def hook_endpoint(monkeypatch, tmp_path):
    """endpoint(extra, host=..., port=...): the Endpoint an sftp Airflow connection with these extras gives."""
    from airflow_transfer.hooks.endpoint import TransferEndpointHook

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config but the one a test writes

    def endpoint(extra: dict, host: str = "lab.example", port: int = 22, login: str = "lab"):
        conn = {"conn_type": "sftp", "host": host, "port": port, "login": login, "extra": extra}
        monkeypatch.setenv("AIRFLOW_CONN_AT_OPTS", json.dumps(conn))
        return TransferEndpointHook("at_opts").endpoint("/data")

    return endpoint


def _sshd_extra(sshd) -> dict:
    return {"key_file": str(sshd.client_key), "known_hosts": str(sshd.known_hosts)}


def test_conn_timeout_bounds_a_connect_into_a_blackhole(hook_endpoint):
    # A listener whose accept queue is full drops further SYNs: the connect hangs, as to a firewalled host.
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(0)
    port = hole.getsockname()[1]
    filler = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        filler.append(s)
    try:
        target = hook_endpoint({"conn_timeout": "2"}, host="127.0.0.1", port=port).target
        assert target.timeout == 2.0
        t0 = time.monotonic()
        with pytest.raises(ConnectError, match="timed out after 2s"):
            open_transport(target)
        assert time.monotonic() - t0 < 12  # well below the 15 s default it replaced
    finally:
        for s in [*filler, hole]:
            s.close()


def test_deprecated_timeout_extra_still_counts_and_says_so(hook_endpoint, caplog):
    with caplog.at_level(logging.WARNING):
        assert hook_endpoint({"timeout": 7}).target.timeout == 7.0
    assert "'timeout' is deprecated" in caplog.text
    assert hook_endpoint({"timeout": 7, "conn_timeout": 3}).target.timeout == 3.0


def test_disabled_algorithms_change_what_is_negotiated(sshd, hook_endpoint):
    plain = hook_endpoint(_sshd_extra(sshd), host=sshd.host, port=sshd.port, login=sshd.user).target
    t = open_transport(plain)
    try:
        first = t.local_cipher
    finally:
        t.close()
    assert first == GCM[0]  # our preference, when nothing is disabled
    extra = {**_sshd_extra(sshd), "disabled_algorithms": {"ciphers": GCM, "kex": ["curve25519-sha256"]}}
    target = hook_endpoint(extra, host=sshd.host, port=sshd.port, login=sshd.user).target
    assert target.disabled_algorithms == {"ciphers": GCM, "kex": ["curve25519-sha256"]}
    t = open_transport(target)
    try:
        assert t.local_cipher not in GCM and t.remote_cipher not in GCM
        assert t.local_cipher == t.remote_cipher  # still a working connection
        assert open_sftp(t).realpath(".")
    finally:
        t.close()


def test_disabled_algorithms_reach_the_openssh_client(sshd, hook_endpoint):
    extra = {**_sshd_extra(sshd), "disabled_algorithms": json.dumps({"ciphers": GCM}), "ssh_client": "openssh"}
    target = hook_endpoint(extra, host=sshd.host, port=sshd.port, login=sshd.user).target
    assert target.disabled_algorithms == {"ciphers": GCM}  # a URI-style JSON string is read too
    assert openssh.algorithm_options(target) == {
        "Ciphers": "-" + ",".join(GCM),
        "KexAlgorithms": "^curve25519-sha256,curve25519-sha256@libssh.org",
    }
    pool = SFTPPool(target)
    try:
        conn = pool.acquire()
        argv = conn.carrier.proc.args
        assert f"Ciphers=-{','.join(GCM)}" in argv
        assert "KexAlgorithms=^curve25519-sha256,curve25519-sha256@libssh.org" in argv
        assert conn.client == "openssh" and conn.wire.realpath(".")
        pool.release(conn)
    finally:
        pool.close()


def test_ciphers_extra_sets_the_preference(sshd, hook_endpoint):
    extra = {**_sshd_extra(sshd), "ciphers": ["aes256-ctr", "aes128-ctr"]}
    target = hook_endpoint(extra, host=sshd.host, port=sshd.port, login=sshd.user).target
    t = open_transport(target)
    try:
        assert t.local_cipher == "aes256-ctr"
    finally:
        t.close()
    assert openssh.algorithm_options(target)["Ciphers"] == "aes256-ctr,aes128-ctr"


def test_compress_true_is_logged_and_compression_stays_off(sshd, hook_endpoint, caplog):
    extra = {**_sshd_extra(sshd), "compress": "true", "allow_host_key_change": True}
    with caplog.at_level(logging.INFO):
        target = hook_endpoint(extra, host=sshd.host, port=sshd.port, login=sshd.user).target
    assert "compress=true is ignored" in caplog.text
    assert "allow_host_key_change=true is ignored" in caplog.text
    t = open_transport(target)
    try:
        assert (t.local_compression, t.remote_compression) == ("none", "none")
    finally:
        t.close()


def test_other_sshhook_extras_are_read(hook_endpoint):
    target = hook_endpoint({"look_for_keys": "false", "auth_timeout": "5"}).target
    assert target.look_for_keys is False and target.auth_timeout == 5.0
    for bad, message in (
        ({"conn_timeout": "soon"}, "conn_timeout must be positive seconds"),
        ({"auth_timeout": -1}, "auth_timeout must be positive seconds"),
        ({"disabled_algorithms": "ciphers"}, "disabled_algorithms must map kinds"),
        ({"disabled_algorithms": {"cipher": ["x"]}}, r"disabled_algorithms\['cipher'\]"),
        ({"ciphers": [1, 2]}, "ciphers must be a list"),
        ({"proxy_jump": "bastion", "proxy_command": "ssh -W %h:%p bastion"}, "both a jump host and a proxy command"),
        ({"proxy_jump": "user@@bastion"}, "cannot read jump host"),
    ):
        with pytest.raises(UsageError, match=message):
            hook_endpoint(bad)


def test_proxy_extras_and_the_workers_ssh_config(hook_endpoint, tmp_path):
    jumped = hook_endpoint({"proxy_jump": "gw@bastion.example:2200", "key_file": "/keys/lab"}).target
    assert jumped.jump is not None and jumped.proxy_command is None
    hop = jumped.jump
    assert (hop.host, hop.port, hop.username) == ("bastion.example", 2200, "gw")
    assert (
        hop.key_filenames == ["/keys/lab"] and hop.password is None
    )  # keys are lent to the jump host, passwords never
    assert jumped.route == "via jump host gw@bastion.example:2200"
    cmd = hook_endpoint({"proxy_command": "nc -X 5 -x proxy %h %p # %r %%"}).target
    assert cmd.proxy_command == "nc -X 5 -x proxy lab.example 22 # lab %"
    # Like SSHHook, a ProxyCommand for the host in the worker's ~/.ssh/config applies (HOME is tmp_path).
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host lab.example\n  ProxyCommand ssh -W %h:%p gw.example\n")
    assert hook_endpoint({}).target.proxy_command == "ssh -W lab.example:22 gw.example"
    assert hook_endpoint({"proxy_command": "none"}).target.proxy_command is None  # the extra wins


def test_ssh_config_proxyjump_chains_and_loops(tmp_path):
    cfg = tmp_path / "config"
    cfg.write_text(
        "\n".join(
            [
                "Host far",
                "  HostName 10.1.2.3",
                "  IdentityFile /keys/far",
                "  ProxyJump outer,inner:2022",
                "Host outer",
                "  HostName gw.example",
                "  User gw",
                "  IdentityFile /keys/gw",
                "  UserKnownHostsFile /kh/gw",
                "Host direct",
                "  HostName 10.9.9.9",
                "  ProxyJump none",
                "Host loop-a",
                "  ProxyJump loop-b",
                "Host loop-b",
                "  ProxyJump loop-a",
                "",
            ]
        )
    )
    far = from_ssh_config("far", None, "me", str(cfg), known_hosts="/kh/mine")
    inner = far.jump
    assert inner is not None and (inner.host, inner.port) == ("inner", 2022)
    assert inner.key_filenames == ["/keys/far"]  # nothing in the config for it: the far host's key
    outer = inner.jump
    assert outer is not None and (outer.host, outer.username) == ("gw.example", "gw")
    assert outer.key_filenames == ["/keys/gw"] and outer.known_hosts == ["/kh/gw", "/kh/mine"]
    assert outer.jump is None
    assert far.route.startswith("via jump hosts gw@gw.example -> ") and far.route.endswith("@inner:2022")
    assert from_ssh_config("direct", None, None, str(cfg)).jump is None
    with pytest.raises(UsageError, match="more than 8 jump hosts"):
        from_ssh_config("loop-a", None, None, str(cfg))


def test_match_exec_in_ssh_config_runs_its_command(tmp_path):
    # paramiko runs `Match exec` with invoke, which protocols/paramiko_lib.py leaves unloaded
    # until then: in a fresh interpreter, the command decides which block applies.
    marker = tmp_path / "on-campus"
    marker.touch()
    cfg = tmp_path / "config"
    cfg.write_text(
        f'Match host lab exec "test -e {tmp_path}/absent"\n  Port 2299\n'
        f'Match host lab exec "test -e {marker}"\n  Port 2201\n'
    )
    code = (
        "import sys; from airflow_transfer.protocols.ssh_config import from_ssh_config; "
        "before = 'invoke.collection' in sys.modules; "
        "target = from_ssh_config('lab', None, 'me', sys.argv[1]); print(before, target.port)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(cfg)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "2201"]


def test_expand_tokens_refuses_unknown_ones(sshd):
    target = sshd.target()
    assert expand_tokens("x %h:%p %r %n 100%%", target) == f"x {sshd.host}:{sshd.port} {sshd.user} {sshd.host} 100%"
    with pytest.raises(UsageError, match="unknown token %C"):
        expand_tokens("ssh -S %C", target)


# A ProxyCommand that needs no bastion: relays its stdin and stdout to host:port.
RELAY = (
    "import socket,sys,threading;s=socket.create_connection((sys.argv[1],int(sys.argv[2])));"
    "threading.Thread(target=lambda:[s.sendall(b) for b in iter(lambda:sys.stdin.buffer.raw.read(65536),b'')]"
    "+[s.shutdown(socket.SHUT_WR)],daemon=True).start();"
    "[sys.stdout.buffer.write(b) or sys.stdout.buffer.flush() for b in iter(lambda:s.recv(65536),b'')]"
)


def test_proxy_command_carries_sftp_and_rtt_falls_back_to_round_trips(sshd, remote_dir):
    direct = SFTPPool(sshd.target())
    try:
        assert "TCP_INFO" in direct.rtt()[2]  # a socket of ours: the kernel knows its RTT
    finally:
        direct.close()
    target = sshd.target()
    set_proxy(target, command=f'{sys.executable} -c "{RELAY}" %h %p')
    assert target.proxy_command is not None and str(sshd.port) in target.proxy_command
    pool = SFTPPool(target)
    try:
        rtt, low, how = pool.rtt()
        assert how == "the quickest of 3 SFTP round trips" and 0 < low <= rtt
        conn = pool.acquire()
        assert conn.wire.realpath(str(remote_dir)) == str(remote_dir)
        pool.release(conn)
        status, out, _ = pool.exec_command("echo through-the-proxy")  # exec channels share the carrier
        assert status == 0 and out.strip() == b"through-the-proxy"
    finally:
        pool.close()


def test_a_failing_proxy_command_says_what_it_said(sshd):
    target = sshd.target()
    target.proxy_command = "sh -c 'echo bastion.example: Connection refused >&2; exit 3'"
    with pytest.raises(ConnectError) as err:
        open_transport(target)
    assert "exited with 3" in err.value.message and "bastion.example: Connection refused" in err.value.message
    target.proxy_command = "/nonexistent/proxy %h"
    with pytest.raises(ConnectError, match="over the proxy command failed"):
        open_transport(target)


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_jump_through_the_loopback_sshd_to_itself(sshd, remote_dir, client):
    # The sshd is its own bastion here (tests/test_bastion.py has a target nothing else reaches).
    target = sshd.target(client=client)
    set_proxy(target, jump=f"{sshd.user}@{sshd.host}:{sshd.port}")
    assert target.jump is not None and target.jump.known_hosts[-1] == str(sshd.known_hosts)
    assert openssh.usable(target) == ("" if client == "openssh" else "the connection asks for paramiko")
    before = sshd.log_text().count("Connection from")
    pool = SFTPPool(target)
    try:
        conn = pool.acquire()
        assert conn.client == client and conn.wire.realpath(str(remote_dir)) == str(remote_dir)
        if client == "openssh":
            proxy = next(a for a in conn.carrier.proc.args if a.startswith("ProxyCommand="))
            assert f"-W {sshd.host}:{sshd.port}" in proxy and str(sshd.client_key) in proxy and "BatchMode=yes" in proxy
        pool.release(conn)
    finally:
        pool.close()
    assert sshd.log_text().count("Connection from") - before >= 2  # the jump, then the target through it
