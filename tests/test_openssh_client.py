"""SFTP data connections over OpenSSH's `ssh` client (protocols/openssh.py), against a real sshd.

What must hold: the pool picks OpenSSH where it can and says why not where it cannot; host
keys are checked exactly as on paramiko; a key given as text never outlives its process;
a dead `ssh` is a lost connection, not a hang; large downloads do not deadlock the pipes.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest

from airflow_transfer.errors import HostKeyError, UsageError
from airflow_transfer.protocols import openssh
from airflow_transfer.protocols.pool import SFTPPool
from airflow_transfer.protocols.sftp_wire import (
    FXF_CREAT,
    FXF_READ,
    FXF_TRUNC,
    FXF_WRITE,
    OPEN,
    READ,
    WRITE,
    SFTPWire,
)
from airflow_transfer.protocols.ssh import SSHTarget
from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree, tree_digest, write_random

MIB = 1 << 20


def _target(sshd, **kw) -> SSHTarget:
    return sshd.target(**{"client": "auto", **kw})


def _put(wire: SFTPWire, path: str, data: bytes) -> None:
    handle = wire.expect_handle(*wire.call(OPEN, wire.p_open(path, FXF_WRITE | FXF_CREAT | FXF_TRUNC)), path)
    box = []
    step = wire.max_write
    for off in range(0, len(data), step):
        piece = data[off : off + step]
        wire.send(WRITE, wire.p_write_head(handle, off, len(piece)), lambda t, r: box.append(t), piece)
    while wire.outstanding:
        wire.pump(block=True)
    wire.call(4, wire.p_handle(handle))  # CLOSE


def _get(wire: SFTPWire, path: str, size: int) -> bytes:
    """Every READ of the file sent before any reply is read: the deadlock case for pipes."""
    handle = wire.expect_handle(*wire.call(OPEN, wire.p_open(path, FXF_READ)), path)
    parts: dict[int, bytes] = {}
    step = wire.max_read
    for off in range(0, size, step):

        def got(t, r, off=off):
            parts[off] = bytes(r.bytes_())

        wire.send(READ, wire.p_read(handle, off, step), got)
    while wire.outstanding:
        wire.pump(block=True)
    wire.call(4, wire.p_handle(handle))
    return b"".join(parts[k] for k in sorted(parts))


def test_pool_carries_sftp_over_openssh_and_round_trips_bytes(sshd, remote_dir):
    pool = SFTPPool(_target(sshd))
    try:
        conn = pool.acquire()
        assert conn.client == "openssh" and conn.alive
        pid = conn.carrier.proc.pid
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"ssh")
        data = os.urandom(6 * MIB + 12345)
        path = str(remote_dir / "openssh-roundtrip.bin")
        _put(conn.wire, path, data)
        assert (
            hashlib.sha256((remote_dir / "openssh-roundtrip.bin").read_bytes()).digest()
            == hashlib.sha256(data).digest()
        )
        # 48 MiB asked for at once: ssh fills the pipe towards us while we are still writing READs.
        big = remote_dir / "openssh-big.bin"
        write_random(big, 48 * MIB, seed=5)
        assert hashlib.sha256(_get(conn.wire, str(big), 48 * MIB)).digest() == hashlib.sha256(big.read_bytes()).digest()
        # exec channels (remote digests, helpers) still work on an OpenSSH connection
        pool.release(conn)
        status, out, _ = pool.exec_command("echo at-ok")
        assert status == 0 and out.strip() == b"at-ok"
    finally:
        pool.close()
    assert not Path(f"/proc/{pid}").exists() or b"zombie" in Path(f"/proc/{pid}/status").read_bytes().lower()


def test_a_key_given_as_text_is_on_disk_only_until_ssh_has_authenticated(sshd, remote_dir):
    text = Path(sshd.client_key).read_text()
    target = _target(sshd, key_filenames=[], private_key=text)
    proc = openssh.OpenSSHProcess(target)  # before any handshake: the key is there, private
    try:
        key = proc._private / "id"
        assert (key.stat().st_mode & 0o777) == 0o600 and (proc._private.stat().st_mode & 0o777) == 0o700
        assert text.strip() not in " ".join(proc.proc.args)  # on disk for ssh, never on a command line
    finally:
        proc.close()
    assert not proc._private.exists()
    pool = SFTPPool(target)
    try:
        conn = pool.acquire()
        assert conn.client == "openssh" and conn.alive
        assert not conn.carrier._private.exists()  # gone once the handshake succeeded
    finally:
        pool.close()


def test_host_keys_are_checked_as_strictly_as_on_paramiko(sshd, tmp_path):
    pub = Path(f"{sshd.host_key}.pub").read_text().split()
    # pinned: the right key (with or without its type) connects over OpenSSH
    for pinned in (f"{pub[0]} {pub[1]}", pub[1]):
        pool = SFTPPool(_target(sshd, known_hosts=[], host_key=pinned))
        try:
            assert pool.acquire().client == "openssh"
        finally:
            pool.close()
    # an unknown host and a wrong pinned key fail with the same errors as paramiko gives
    other = tmp_path / "other_known_hosts"
    other.write_text("")
    for kw in (
        {"known_hosts": [str(other)]},
        {
            "known_hosts": [],
            "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB5C2h1ZEGKEf8tXvO7KB6qlXbmgLvNuBRg0Zk+EcEAf",
        },
    ):
        pool = SFTPPool(_target(sshd, **kw))
        with pytest.raises(HostKeyError):
            pool.acquire()
        assert pool._openssh  # the host was at fault, not the client: OpenSSH stays in use
        pool.close()


def test_targets_openssh_cannot_carry_go_to_paramiko_with_a_reason(sshd):
    assert openssh.usable(_target(sshd)) == ""
    assert "password" in openssh.usable(_target(sshd, password="x"))
    assert "passphrase" in openssh.usable(_target(sshd, passphrase="x"))
    assert "paramiko" in openssh.usable(_target(sshd, client="paramiko"))
    for kw in ({"client": "paramiko"}, {}):  # {}: SSHTarget's default
        target = (
            _target(sshd, **kw)
            if kw
            else SSHTarget(
                host=sshd.host,
                port=sshd.port,
                username=sshd.user,
                key_filenames=[str(sshd.client_key)],
                known_hosts=[str(sshd.known_hosts)],
            )
        )
        pool = SFTPPool(target)
        try:
            assert pool.acquire().client == "paramiko"
        finally:
            pool.close()
    with pytest.raises(UsageError, match="password"):
        SFTPPool(_target(sshd, client="openssh", password="x")).acquire()
    with pytest.raises(UsageError, match="unknown SSH client"):
        SFTPPool(_target(sshd, client="putty")).acquire()


def test_a_killed_ssh_client_is_a_lost_connection_not_a_hang(sshd, remote_dir):
    pool = SFTPPool(_target(sshd, idle_timeout=10))
    conn = pool.acquire()
    try:
        os.kill(conn.carrier.proc.pid, signal.SIGKILL)
        with pytest.raises(ConnectionError):
            _put(conn.wire, str(remote_dir / "never.bin"), os.urandom(4 * MIB))
        assert not conn.alive
        pool.release(conn, broken=True)
        fresh = pool.acquire()  # the pool opens a new one
        assert fresh.alive and fresh.client == "openssh"
        pool.release(fresh)
    finally:
        pool.close()


def test_cli_copy_both_ways_over_openssh_and_over_paramiko(sshd, remote_dir, local_dir):
    src = make_tree(local_dir / "ossh-src", small=60, big_mib=12, seed=3)
    for client in ("openssh", "paramiko"):
        up = run_cli(
            "copy",
            str(src),
            sshd.url(f"{remote_dir}/ossh-{client}"),
            "--ssh-client",
            client,
            "--pp",
            "4",
            "-c",
            "2",
            "--json",
            *ssh_args(sshd),
        )
        assert up.code == 0, up.err
        assert up.summary["failed"] == [] and up.summary["ssh_client"] == client
        assert tree_digest(remote_dir / f"ossh-{client}") == tree_digest(src)
        down = run_cli(
            "copy",
            sshd.url(f"{remote_dir}/ossh-{client}"),
            str(local_dir / f"ossh-back-{client}"),
            "--ssh-client",
            client,
            "--pp",
            "4",
            "-c",
            "2",
            "--json",
            *ssh_args(sshd),
        )
        assert down.code == 0, down.err
        assert tree_digest(local_dir / f"ossh-back-{client}") == tree_digest(src)


def test_connection_extra_chooses_the_client_and_rejects_nonsense(monkeypatch):
    import json

    from airflow_transfer.errors import TransferError
    from airflow_transfer.hooks.endpoint import TransferEndpointHook

    def endpoint(extra):
        monkeypatch.setenv(
            "AIRFLOW_CONN_AT_OSSH",
            json.dumps({"conn_type": "sftp", "host": "lab.example", "login": "lab", "extra": extra}),
        )
        return TransferEndpointHook("at_ossh").endpoint("/data")

    assert endpoint({}).target.client == "paramiko"  # the default
    assert endpoint({"ssh_client": "OpenSSH"}).target.client == "openssh"
    with pytest.raises(TransferError, match="ssh_client must be auto, openssh or paramiko"):
        endpoint({"ssh_client": "putty"})
