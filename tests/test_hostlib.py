"""Host-protocol library: probes by handshake, cached in the store with a TTL, any:// resolution."""

from __future__ import annotations

import os
import time

import pytest

from airflow_transfer.errors import TransferError
from airflow_transfer.protocols.hostlib import HostProtocolLibrary, probe, resolve_any
from airflow_transfer.store import Store
from tests.support.cli import run_cli, ssh_args
from tests.support.data import make_tree, tree_digest
from tests.support.servers import FTPServer, HTTPServer
from tests.support.sshd import free_port


@pytest.fixture(scope="module")
def ftp_root(test_base):
    server = FTPServer(root="/", run_as="attest" if os.geteuid() == 0 else None).start(netrc_dir=test_base)
    yield server
    server.stop()


def test_probe_needs_the_protocols_own_handshake(sshd, ftp_root, tmp_path):
    assert probe("127.0.0.1", "sftp", sshd.port).available
    assert probe("127.0.0.1", "ftp", ftp_root.port).available
    http = HTTPServer(tmp_path).start()
    try:
        assert probe("127.0.0.1", "http", http.port).available
        # An open port speaking something else is not that protocol.
        wrong = probe("127.0.0.1", "sftp", http.port, timeout=2)
        assert not wrong.available and "handshake" in wrong.detail
        assert not probe("127.0.0.1", "ftp", sshd.port, timeout=2).available
    finally:
        http.stop()
    closed = probe("127.0.0.1", "sftp", free_port())
    assert not closed.available and "connect failed" in closed.detail


def test_library_caches_in_the_store_until_refresh(sshd, tmp_path):
    with Store.open(f"sqlite:///{tmp_path}/s.db") as store:
        lib = HostProtocolLibrary(store, ttl_s=300)
        dead = free_port()
        first = lib.offered("127.0.0.1", ["sftp", "ftp"], {"sftp": sshd.port, "ftp": dead})
        assert [r.available for r in first] == [True, False]
        rows = {r["protocol"]: r for r in store.host_protocols("127.0.0.1")}
        assert rows["sftp"]["available"] and not rows["ftp"]["available"] and rows["sftp"]["port"] == sshd.port
        # Cached: the same answer without probing (the port is now wrong on purpose: no new row).
        again = lib.offered("127.0.0.1", ["sftp"], {"sftp": sshd.port})
        assert again[0].available and again[0].detail == first[0].detail
        expired = HostProtocolLibrary(store, ttl_s=0)
        expired.offered("127.0.0.1", ["ftp"], {"ftp": dead}, refresh=True)
        assert not store.host_protocols("127.0.0.1", fresh_only=True) or all(
            r["protocol"] != "ftp" for r in store.host_protocols("127.0.0.1", fresh_only=True)
        )


def test_any_resolves_to_first_offered_in_preference_order(sshd, ftp_root):
    lib = HostProtocolLibrary(None)
    urls = resolve_any(
        f"any://{sshd.user}@127.0.0.1/data?sftp={sshd.port}&ftp={ftp_root.port}&prefer=sftp,ftp", lib, writable=True
    )
    assert urls[0] == f"sftp://{sshd.user}@127.0.0.1:{sshd.port}/data"
    assert urls[1] == f"ftp://{sshd.user}@127.0.0.1:{ftp_root.port}/data"
    dead = free_port()
    urls = resolve_any(f"any://{sshd.user}@127.0.0.1/data?sftp={dead}&ftp={ftp_root.port}", lib, writable=True)
    assert urls == [f"ftp://{sshd.user}@127.0.0.1:{ftp_root.port}/data"]


def test_nothing_open_fails_in_seconds_with_a_clear_error():
    lib = HostProtocolLibrary(None, timeout=2)
    t0 = time.monotonic()
    ports = "&".join(f"{p}={free_port()}" for p in ("sftp", "ftp", "http", "https"))
    with pytest.raises(TransferError) as info:
        resolve_any(f"any://127.0.0.1/x?{ports}", lib)
    assert time.monotonic() - t0 < 10
    msg = str(info.value)
    assert "no protocol is available on 127.0.0.1" in msg and "sftp" in msg and "ftp" in msg and "https" in msg
    # A host that never answers (TEST-NET-1): the probes time out together, in seconds.
    t0 = time.monotonic()
    with pytest.raises(TransferError):
        resolve_any("any://192.0.2.1/x?prefer=sftp,ftp", lib)
    assert time.monotonic() - t0 < 15


def test_cli_copy_to_any_url(sshd, ftp_root, local_dir, remote_dir):
    src = make_tree(local_dir / "src", small=12, seed=9)
    env = {"NETRC": str(ftp_root.netrc_path)}
    dead = free_port()
    res = run_cli(
        "copy",
        str(src),
        f"any://{sshd.user}@127.0.0.1{remote_dir}?sftp={dead}&ftp={ftp_root.port}",
        "--json",
        *ssh_args(sshd),
        env=env,
    )
    assert res.code == 0, res.err
    assert res.summary["dst"].startswith("ftp://")
    assert tree_digest(remote_dir) == tree_digest(src)
    nothing = run_cli("copy", str(src), f"any://127.0.0.1/x?sftp={dead}&ftp={free_port()}&prefer=sftp,ftp", "--json")
    assert nothing.code == 1 and "no protocol is available on 127.0.0.1" in nothing.err
