"""Which SSH client carries an upload's bundles (engine/carrier_choice.py): the rule in named
scenarios, the round trip read from a real connection's TCP handshake, and the summary."""

from __future__ import annotations

import socket

import pytest

from airflow_transfer.engine.bundle_channel import CARRIER_ENV, openssh_may_carry, start_upload_helpers
from airflow_transfer.engine.carrier_choice import PARAMIKO_FROM_RTT_S, decide_for_pool, upload_carrier
from airflow_transfer.protocols.pool import SFTPPool
from tests.support.cli import run_cli, ssh_args
from tests.test_bundle import _tree


@pytest.mark.parametrize(
    ("name", "rtt", "forced", "paramiko"),
    [
        ("loopback", 0.00002, "", False),
        ("lan", 0.001, "", False),
        ("metro link just under the line", PARAMIKO_FROM_RTT_S * 0.99, "", False),
        ("at the line", PARAMIKO_FROM_RTT_S, "", True),
        ("wan50", 0.050, "", True),
        ("intercontinental", 0.180, "", True),
        ("not measured (jump host, proxy command)", None, "", False),
        ("wan50, told to use ssh", 0.050, "openssh", False),
        ("loopback, told to use paramiko", 0.00002, "paramiko", True),
    ],
)
def test_the_round_trip_picks_the_carrier(name, rtt, forced, paramiko):
    why = upload_carrier(rtt, forced)
    assert bool(why) is paramiko, (name, why)
    if paramiko and not forced:
        assert why == f"round trip {rtt * 1000:.0f} ms, at or above {PARAMIKO_FROM_RTT_S * 1000:.0f} ms"


def test_the_pool_reads_its_first_handshakes_round_trip_and_keeps_ssh_on_loopback(sshd, monkeypatch):
    monkeypatch.delenv(CARRIER_ENV, raising=False)
    pool = SFTPPool(sshd.target(look_for_keys=False))
    try:
        assert openssh_may_carry(pool)
        pool.warm(1)
        rtt = pool.first_round_trip(5.0)
        assert rtt is not None and 0 < rtt < PARAMIKO_FROM_RTT_S  # loopback: microseconds
        assert decide_for_pool(pool) == ""
        assert start_upload_helpers(pool, 1) == 1  # ssh pairs, as before
    finally:
        pool.close()


def test_a_server_that_never_completes_the_handshake_gets_paramiko_and_the_reason(sshd, monkeypatch):
    monkeypatch.delenv(CARRIER_ENV, raising=False)
    # A listening socket that is never accepted from still completes TCP handshakes (the
    # kernel's backlog); one whose backlog is full does not: SYNs go unanswered.
    quiet = socket.socket()
    quiet.bind(("127.0.0.1", 0))
    quiet.listen(0)
    fill = [socket.create_connection(quiet.getsockname(), timeout=1)]  # the backlog of one, taken
    with pytest.raises(TimeoutError):
        fill.append(socket.create_connection(quiet.getsockname(), timeout=0.2))
    target = sshd.target(look_for_keys=False)
    target.port = quiet.getsockname()[1]
    target.timeout = 1.0
    pool = SFTPPool(target)
    try:
        pool.warm(1)
        why = decide_for_pool(pool, wait=0.1)
        assert why == "no TCP handshake with the server within 0.1 s"
        assert start_upload_helpers(pool, 1) == 0  # no ssh pair: the sinks ride paramiko
    finally:
        pool.close()
        for s in fill:
            s.close()
        quiet.close()


def test_the_decision_is_made_once_and_forcing_wins(sshd, monkeypatch):
    monkeypatch.setenv(CARRIER_ENV, "paramiko")
    pool = SFTPPool(sshd.target(look_for_keys=False))
    try:
        assert decide_for_pool(pool, wait=0.0) == "forced by AIRFLOW_TRANSFER_BUNDLE_CARRIER"
        monkeypatch.setenv(CARRIER_ENV, "openssh")
        assert decide_for_pool(pool, wait=0.0) == "forced by AIRFLOW_TRANSFER_BUNDLE_CARRIER"  # kept
    finally:
        pool.close()


def test_a_loopback_upload_from_the_command_line_rides_ssh(sshd, remote_dir, local_dir, tmp_path, monkeypatch):
    monkeypatch.delenv(CARRIER_ENV, raising=False)
    src = _tree(local_dir / "near", 40, seed=31)
    store = f"sqlite:///{tmp_path}/store.db"
    res = run_cli("copy", str(src), sshd.url(str(remote_dir / "near")), *ssh_args(sshd), "--json", "--store", store)
    assert res.code == 0, res.err[-2000:]
    transports = [c["transport"] for c in res.summary["chunks"]]
    # The head start runs only on an ssh pair (engine/head_start_sides.py); what it left, rides one too.
    assert all("paramiko" not in t for t in transports), transports
    assert any("head start" in t or "over openssh" in t for t in transports), transports
