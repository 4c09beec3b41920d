"""The SFTP connection pool against a real sshd: connections opened ahead (`warm`)."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_transfer.errors import ConnectError
from airflow_transfer.protocols.pool import SFTPPool
from tests.support.sshd import SSHServer


def _settle(pool: SFTPPool, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while pool._warming and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pool._warming, "warm connections never arrived"


class _Recording(SFTPPool):
    """A pool that keeps every connection it opened, to check each one's fate."""

    def _open(self, ahead: bool = False):
        conn = super()._open(ahead)
        self.__dict__.setdefault("seen", []).append(conn)
        return conn


def test_warm_connections_are_taken_by_acquirers_instead_of_opening_more(sshd):
    pool = SFTPPool(sshd.target())
    try:
        assert pool.warm(2) == 2
        assert pool.warm(2) == 0  # already on their way: not opened twice
        # Two acquirers arriving while the handshakes run wait for them.
        got: list = []
        threads = [threading.Thread(target=lambda: got.append(pool.acquire())) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(got) == 2 and all(c.alive for c in got)
        assert pool.opened == 2
        third = pool.acquire()  # nothing warm left: a third connection of its own
        assert pool.opened == 3 and third.carrier not in {c.carrier for c in got}
        for c in (*got, third):
            pool.release(c)
    finally:
        pool.close()


def test_a_failed_warm_handshake_leaves_the_error_to_acquire(sshd):
    # A port nobody listens on: the background attempt fails quietly, acquire reports why.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pool = SFTPPool(sshd.target(port=port, timeout=5))
    try:
        assert pool.warm(1) == 1
        with pytest.raises(ConnectError, match=f"cannot connect to .*:{port}"):
            pool.acquire()
        assert pool.opened == 0
    finally:
        pool.close()


def test_closing_the_pool_while_warming_closes_what_arrives_later(sshd):
    pool = _Recording(sshd.target())
    pool.warm(2)
    pool.close()  # the handshakes are still running
    _settle(pool)
    assert pool.opened == 2 and not pool._idle and len(pool.seen) == 2
    deadline = time.monotonic() + 10
    while any(c.carrier.is_active() for c in pool.seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(c.carrier.is_active() for c in pool.seen), "a warmed connection outlived its closed pool"


def test_a_copy_adopts_the_pool_started_ahead_and_opens_no_other_connection(sshd, tmp_path, remote_dir):
    from airflow_transfer.engine.params import TransferParams
    from airflow_transfer.job import CopyRequest, run_copy
    from airflow_transfer.protocols.endpoint import Endpoint
    from airflow_transfer.protocols.pool import warm_count
    from tests.support.data import tree_digest, write_random

    src = tmp_path / "src"
    for i in range(30):
        write_random(src / f"f{i:02d}.bin", 50_000 + 1000 * i, seed=70 + i)
    dst = Endpoint("sftp", str(remote_dir / "adopted"), sshd.target())
    pool = _Recording(dst.target)
    # What the CLI starts before its imports: 2 data connections (fixed, cc=2) and the checksum helper's.
    assert pool.warm(warm_count("fixed", 2, verify=True)) == 3
    summary = run_copy(
        CopyRequest(
            Endpoint("file", str(src)),
            dst,
            TransferParams(pp=4, cc=2),
            pool=pool,
            use_store=False,
            verify_mode="block",
            verify_threads=1,
        )
    )
    assert summary["failed"] == [] and summary["verify"]["verified"] == 30
    assert tree_digest(remote_dir / "adopted") == tree_digest(src)
    # Every connection the copy used came from the warmed three; the session closed them.
    assert pool.opened == 3 and pool._closed and not pool._idle


def test_a_pool_for_another_endpoint_is_closed_and_not_used(sshd, tmp_path):
    from airflow_transfer.engine.transfer import TransferSession
    from airflow_transfer.protocols.endpoint import Endpoint

    other = SFTPPool(sshd.target())
    session = TransferSession(Endpoint("file", str(tmp_path)), Endpoint("sftp", "/x", sshd.target()), pool=other)
    try:
        assert session.pool is not other and session.pool.target is session.remote.target
        assert other._closed
    finally:
        session.close()


def test_warm_count_adds_the_checksum_helpers_connection():
    from airflow_transfer.protocols.pool import WARM_CONNECTIONS, warm_count

    assert warm_count("auto", 1, verify=False) == WARM_CONNECTIONS
    assert warm_count("auto", 1, verify=True) == WARM_CONNECTIONS + 1
    assert warm_count("fixed", 1, verify=True) == 2  # one data connection, one for the helper
    assert warm_count("fixed", 16, verify=False) == WARM_CONNECTIONS


def test_connections_the_server_dropped_are_counted_lost_and_replaced(test_base):
    """sshd killed (listener and sessions) and started again: the connection in use and the idle
    one are both dead; each is counted once when the pool drops it, and a new one serves. A
    healthy connection handed back, or one closed for an unfinished request, is not a loss."""
    server = SSHServer(test_base / "sshd-pool-lost").start()
    pool = SFTPPool(server.target(look_for_keys=False))
    try:
        idle, used = pool.acquire(), pool.acquire()
        pool.release(idle)
        assert pool.lost == 0
        server.stop()
        server.start()
        deadline = time.monotonic() + 15
        while (idle.alive or used.alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not idle.alive and not used.alive, "the killed sessions' transports still look alive"
        pool.release(used)
        assert pool.lost == 1
        fresh = pool.acquire()  # the idle one is found dead and dropped; a new connection is opened
        assert pool.lost == 2 and fresh.alive and fresh not in (idle, used)
        pool.release(fresh)
        assert pool.lost == 2
    finally:
        pool.close()
        server.stop()


class _Companion:
    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    def close(self) -> None:
        self.closed = True


def test_companions_started_ahead_are_waited_for_taken_once_and_closed_with_the_pool(sshd):
    pool = SFTPPool(sshd.target(look_for_keys=False))
    pool.expect("helper", 3)
    first = _Companion("first")
    release = threading.Event()

    def start_later() -> None:
        release.wait(60)
        pool.stash("helper", first)

    threading.Thread(target=start_later, daemon=True).start()
    got: list = []
    taker = threading.Thread(target=lambda: got.append(pool.take("helper")))
    taker.start()
    taker.join(0.2)
    assert taker.is_alive() and got == []  # one is still being started: take waits for it
    release.set()
    taker.join(60)
    assert got == [first]
    pool.stash("helper", None)  # the second failed to start
    left = _Companion("left")
    pool.stash("helper", left)
    assert pool.take("helper") is left
    assert pool.take("helper") is None  # none left, none expected: no wait
    unused = _Companion("unused")
    pool.expect("helper", 2)
    pool.stash("helper", unused)
    pool.close()
    assert unused.closed and not first.closed  # a taken companion belongs to its taker
    late = _Companion("late")
    pool.stash("helper", late)  # arrives after the pool closed
    assert late.closed and pool.take("helper") is None


def test_what_a_warm_connection_starts_begins_before_its_sftp_session_and_closes_with_it(sshd):
    """on_transport gets the transport once the login is done, before the SFTP channel is asked
    for (channel ids are handed out in order of opening), and what it returns lives and dies
    with the connection."""

    class Probe:
        def __init__(self, chan) -> None:
            self.chan, self.closed = chan, False

        def close(self) -> None:
            self.closed = True
            self.chan.close()

    probes: list[Probe] = []

    def start(transport) -> dict:
        probes.append(Probe(transport.open_session(timeout=30)))
        return {"probe": probes[-1]}

    pool = SFTPPool(sshd.target())
    pool.on_transport = start
    try:
        assert pool.warm(1) == 1
        conn = pool.acquire()
        assert len(probes) == 1 and conn.companions == {"probe": probes[0]}
        assert probes[0].chan.get_id() < conn.wire.chan.get_id()
        own = pool.acquire()  # not warmed: opened by acquire, nothing is started on it
        assert own is not conn and own.companions == {} and len(probes) == 1
        pool.release(own)
        pool.release(conn)
    finally:
        pool.close()
    assert len(probes) == 1 and probes[0].closed


def test_a_new_sftp_session_does_not_wait_for_the_servers_limits(sshd):
    """The limits request (OpenSSH's extension) is sent with the handshake and its answer taken
    when it comes: the connection is offered first, and the sizes wait for it when read."""
    from airflow_transfer.protocols.ssh import open_sftp, open_transport

    transport = open_transport(sshd.target())
    try:
        wire = open_sftp(transport)
        assert "limits@openssh.com" in wire.extensions
        assert wire._limits_due and wire.outstanding == 0  # asked, not waited for, not in anyone's way
        assert 32 * 1024 <= wire.max_write <= 1 << 20 and 32 * 1024 <= wire.max_read <= 1 << 20
        assert not wire._limits_due and wire.outstanding == 0
        assert wire.realpath(".").startswith("/")  # and the wire goes on answering
    finally:
        transport.close()
