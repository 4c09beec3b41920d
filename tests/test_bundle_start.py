"""How a bundle helper starts: its source travels compressed, and over paramiko to an OpenSSH
server the source and the hello follow the exec request without waiting for its reply
(engine/bundle_carriers.py). A real sshd for the helper itself; a stand-in channel (a class
of this file, not paramiko's) records the order of the steps."""

from __future__ import annotations

import os
import sys
import zlib
from importlib import resources

import pytest

from airflow_transfer.engine import bundle_channel
from airflow_transfer.engine.bundle_carriers import BundleUnavailable, can_pipeline, in_order, paramiko_exec
from airflow_transfer.engine.bundle_channel import SinkChannel, sink_preamble
from airflow_transfer.protocols.ssh import open_transport


def test_the_preamble_is_the_helpers_source_compressed_after_its_length() -> None:
    head, _, body = sink_preamble().partition(b"\n")
    assert int(head) == len(body)
    source = resources.files("airflow_transfer.remote").joinpath("bundle_sink.py").read_bytes()
    assert zlib.decompress(body) == source
    assert len(body) < len(source) // 2  # what the compression is for: fewer bytes before the hello


class StandIn:
    """Records what a channel was asked to do, in order; answers the exec request as told."""

    def __init__(self, log: list[str], refuse: bool = False) -> None:
        self.log, self.refuse, self.remote_chanid = log, refuse, 7
        self.transport = self

    # the channel
    def settimeout(self, timeout: float) -> None:
        pass

    def _event_pending(self) -> None:
        self.log.append("pending")

    def _wait_for_event(self) -> None:
        self.log.append("wait")
        if self.refuse:
            raise EOFError("exec refused")

    def exec_command(self, command: str) -> None:
        self.log.append("exec_command")

    def sendall(self, data: bytes) -> None:
        self.log.append(f"sendall {len(data)}")

    # its transport
    def _send_user_message(self, message) -> None:
        self.log.append("request " + ("exec" if b"exec" in message.asbytes() else "?"))


class StandInTransport:
    def __init__(self, version: str, log: list[str], refuse: bool = False) -> None:
        self.remote_version, self.log, self.refuse = version, log, refuse

    def open_session(self) -> StandIn:
        return StandIn(self.log, self.refuse)


def test_to_openssh_the_first_input_goes_behind_the_exec_request_before_its_reply() -> None:
    log: list[str] = []
    paramiko_exec(StandInTransport("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u7", log), "python3 -c x", b"12345")
    assert log == ["pending", "request exec", "sendall 5", "wait"]


def test_to_another_server_the_first_input_waits_for_the_exec_reply() -> None:
    log: list[str] = []
    paramiko_exec(StandInTransport("SSH-2.0-dropbear_2022.83", log), "python3 -c x", b"12345")
    assert log == ["exec_command", "sendall 5"]


def test_a_refused_exec_still_says_so_when_the_input_went_ahead() -> None:
    log: list[str] = []
    with pytest.raises(BundleUnavailable, match="runs no commands over SSH exec"):
        paramiko_exec(StandInTransport("SSH-2.0-OpenSSH_9.6", log, refuse=True), "python3 -c x", b"12345")
    assert log[-1] == "wait"


def test_over_a_real_openssh_the_helper_starts_with_its_input_sent_ahead(sshd) -> None:
    transport = open_transport(sshd.target())
    try:
        assert in_order(transport)  # the test server is OpenSSH: the pipelined start is what runs
        probe = transport.open_session()
        try:
            # The installed paramiko still has the steps it takes (else it falls back, slower).
            assert can_pipeline(probe)
        finally:
            probe.close()
        sink = SinkChannel.over_paramiko(transport)
        try:
            assert sink.algorithms >= {"sha256"} and sink.max_files >= 1
            assert sink.next_id == 2  # the hello was request 1, answered
        finally:
            sink.close()
    finally:
        transport.close()


def test_the_helper_on_this_host_runs_from_its_own_file() -> None:
    # Its bytecode compiled at install is loaded, not its source compiled at each start: the
    # process is told where the file is, is sent no source, and answers the hello all the same.
    sink = SinkChannel.local()
    try:
        argv = sink.chan.process.proc.args
        assert argv[-2] == bundle_channel.LOCAL_BOOTSTRAP
        assert os.path.samefile(
            os.path.join(argv[-1], "bundle_sink.py"),
            os.fspath(resources.files("airflow_transfer.remote").joinpath("bundle_sink.py")),
        )
        assert "sha256" in sink.algorithms and sink.carrier == "local"
    finally:
        sink.close()


def test_a_helper_with_no_file_of_its_own_is_sent_its_source(monkeypatch) -> None:
    # A package inside a zip archive has no file to run: the helper reads its source as the
    # server's does.
    monkeypatch.setattr(bundle_channel, "_local_helper_dir", lambda: None)
    sink = SinkChannel.local()
    try:
        assert sink.chan.process.proc.args[-1] == bundle_channel.BOOTSTRAP
        assert "sha256" in sink.algorithms
    finally:
        sink.close()


def test_nothing_beside_the_helpers_file_shadows_a_standard_module() -> None:
    # The helper on this host imports from its own directory first (LOCAL_BOOTSTRAP): a module
    # there named like one of the standard library's would be imported in its place.
    folder = resources.files("airflow_transfer.remote")
    names = {p.name.removesuffix(".py") for p in folder.iterdir() if p.name.endswith(".py")}
    names |= {p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert names & set(sys.stdlib_module_names) == set(), names
