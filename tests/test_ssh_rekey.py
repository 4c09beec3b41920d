"""Key re-exchanges that paramiko starts itself, with channels the server closes meanwhile;
and the network profile's SSH tunnel, through those and when it dies.

paramiko re-keys every 2**29 bytes; here the transport's own threshold is lowered to a
few hundred KiB (paramiko's knob, on a real sshd) so that re-exchanges run nearly all
the time, and the server's CLOSE of a channel, which paramiko's reader must answer,
lands inside one. Unpatched, the reader waits for the exchange it alone can finish and
the connection dies 30 s later (paramiko issue #822).
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from airflow_transfer.errors import TransferError
from airflow_transfer.profiling.hosts import LOCALHOST, ProfileHost, key_of_target
from airflow_transfer.profiling.library import profile_link
from airflow_transfer.profiling.links import measure_path
from airflow_transfer.profiling.remote import HostRunner
from airflow_transfer.protocols.ssh import open_transport
from airflow_transfer.store import Store
from tests.support.sshd import SSHServer

OFTEN = 256 * 1024  # bytes between the re-exchanges paramiko starts


def _read_all(chan) -> bytes:
    parts = []
    while True:
        data = chan.recv(1 << 16)
        if not data:
            return b"".join(parts)
        parts.append(data)


def test_channels_closed_by_the_server_during_a_re_exchange_do_not_stall_the_connection(sshd):
    transport = open_transport(sshd.target())
    try:
        transport.packetizer.REKEY_BYTES = OFTEN
        size = 2 * 1024 * 1024
        runs = 0
        # each channel streams 8 re-exchanges' worth and is closed by the server at its end; on a
        # slow machine an exchange can still be running when the next threshold passes, so the
        # loop goes on until 8 have completed, not for a fixed number of channels
        while runs < 60 and (runs < 8 or transport.rekeys < 8 or transport.held_replies < 3):
            chan = transport.open_session(timeout=30)
            chan.settimeout(20)  # unpatched, the stall is 30 s: fail on the read, not hang
            chan.exec_command(f"head -c {size} /dev/zero")
            got = _read_all(chan)
            assert len(got) == size, f"channel {runs}: {len(got)} of {size} bytes"
            assert chan.recv_exit_status() == 0
            chan.close()
            runs += 1
        assert transport.is_active()
        assert transport.rekeys >= 8, transport.rekeys
        # the case under test happened: the reader had an answer to send inside an exchange
        assert transport.held_replies >= 1, (runs, transport.rekeys)
        chan = transport.open_session(timeout=30)  # and the connection still works after it
        chan.exec_command("echo still-here")
        assert _read_all(chan) == b"still-here\n"
    finally:
        transport.close()


def test_network_profile_through_the_ssh_tunnel_survives_re_exchanges(sshd):
    far = ProfileHost(key_of_target(sshd.target()), sshd.target())
    with HostRunner(ProfileHost(LOCALHOST)) as local, HostRunner(far) as remote:
        rates = {}
        for src, dst, direction in ((remote, local, "recv"), (local, remote, "send")):
            remote.transport.packetizer.REKEY_BYTES = OFTEN
            measured = measure_path(src, dst, via="ssh", seconds=1.0)
            probe = measured["payload"]["bandwidth"][direction]
            assert probe.get("available"), probe
            rates[direction] = probe["mbit"]
        assert remote.transport.rekeys > 0
        assert min(rates.values()) > 0, rates


def test_a_tunnel_that_dies_during_the_probe_is_named_as_the_cause(test_base):
    """The other way the probe's answer goes missing: the SSH connection itself goes away (here
    its sshd is stopped once the sink runs). The profile says so instead of blaming the sink."""
    server = SSHServer(test_base / "sshd-tunnel-dies").start()
    far = ProfileHost(key_of_target(server.target()), server.target())

    def stop_once_the_sink_runs() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ps = subprocess.run(["pgrep", "-f", "--", "--serve 0 --bind 127.0.0.1"], capture_output=True)
            if ps.returncode == 0:
                time.sleep(1.0)  # the client's RTT probe, then its streams: the probe lasts 4 s
                break
            time.sleep(0.05)
        server.stop()

    stopper = threading.Thread(target=stop_once_the_sink_runs)
    try:
        with Store.open(f"sqlite:///{test_base / 'tunnel-dies.db'}") as store:
            with HostRunner(ProfileHost(LOCALHOST)) as local, HostRunner(far) as remote:
                stopper.start()
                with pytest.raises(TransferError) as caught:
                    profile_link(store, local, remote, via="ssh")
    finally:
        stopper.join()
        server.stop()
    assert "measured no bandwidth" in str(caught.value)
    assert f"the SSH connection to {far.key} carrying the probe closed during it" in caught.value.todo
