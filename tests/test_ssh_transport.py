"""protocols/transport.py against a real sshd: the first channel of a connection is not held
back by a delayed acknowledgement; a server that refuses the SFTP subsystem gets a clear error.

After the login OpenSSH's server sends a global request that wants no reply; the client's
kernel would delay its acknowledgement, and the server's Nagle algorithm then holds the
answer to the first CHANNEL_OPEN until that acknowledgement comes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from airflow_transfer.errors import TransferError
from airflow_transfer.protocols.pool import SFTPPool
from airflow_transfer.protocols.ssh import open_sftp, open_transport
from airflow_transfer.protocols.transport import ack_now
from tests.support.sshd import restricted_sshd


def test_the_servers_request_after_login_is_acknowledged_at_once(sshd):
    transport = open_transport(sshd.target(look_for_keys=False))
    try:
        chan = transport.open_session(timeout=30)
        chan.exec_command("echo ok")
        assert chan.makefile().read().strip() == b"ok"
        # the server's hostkeys-00@openssh.com request came, and its acknowledgement left at once
        assert transport.acks_pushed >= 1
    finally:
        transport.close()


def test_every_connection_of_a_pool_runs_on_that_transport(sshd):
    pool = SFTPPool(sshd.target(look_for_keys=False))
    try:
        conn = pool.acquire()
        assert conn.transport.acks_pushed >= 1
        assert conn.wire.stat(".") is not None  # the SFTP session opened behind it works
        pool.release(conn)
    finally:
        pool.close()


def test_only_a_tcp_socket_is_asked_for_an_acknowledgement():
    a, b = socket.socketpair()
    try:
        assert ack_now(a) is False  # a proxy command's pipe, say: nothing to ask
    finally:
        a.close()
        b.close()
    assert ack_now(object()) is False  # a jump host's channel


def test_a_refused_sftp_subsystem_is_a_clear_error_not_a_protocol_one(test_base):
    server = restricted_sshd(test_base / "sshd-nosftp", "no-sftp")
    try:
        transport = open_transport(server.target(look_for_keys=False))
        try:
            with pytest.raises(TransferError, match="refused the SFTP subsystem") as err:
                open_sftp(transport, idle_timeout=30)
            assert "Subsystem sftp" in err.value.todo
            assert transport.is_active()  # the connection stays usable for exec
            chan = transport.open_session(timeout=30)
            chan.exec_command("echo still")
            assert chan.makefile().read().strip() == b"still"
        finally:
            transport.close()
    finally:
        server.stop()


_CONNECT_FIRST = """
import json, socket, sys
from airflow_transfer.protocols.ssh import SSHTarget, open_transport

seen = []
real = socket.create_connection

def connect(*args, **kwargs):
    seen.append("paramiko" in sys.modules)
    return real(*args, **kwargs)

socket.create_connection = connect
transport = open_transport(SSHTarget(**json.loads(sys.argv[1])))
transport.close()
print(json.dumps({"paramiko_loaded_at_connect": seen}))
"""


def test_the_tcp_connection_is_made_before_paramiko_loads(sshd):
    """The handshake and the server's banner travel while paramiko is imported (about 0.04 s
    on this VM, one round trip less on a 50 ms link); a fresh interpreter shows the order."""
    fields = sshd.target_fields(look_for_keys=False)
    out = subprocess.run(
        [sys.executable, "-c", _CONNECT_FIRST, json.dumps(fields)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"paramiko_loaded_at_connect": [False]}
