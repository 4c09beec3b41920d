"""The pump between two bundle helpers (engine/bundle_channel.py, Pump), over real pipes to
real processes: spliced from pipe to pipe where both ends are processes here, copied through
this process otherwise, the bytes in order and counted as progress either way."""

from __future__ import annotations

import os
import threading
import types

import pytest

from airflow_transfer.engine import bundle_channel
from airflow_transfer.engine.bundle_channel import ChannelReader, Pump
from airflow_transfer.engine.sftp_jobs import FileTask
from airflow_transfer.protocols.openssh import PipeChannel, PipedProcess


class Progress:
    def __init__(self) -> None:
        self.bytes = 0

    def add_bytes(self, n: int) -> None:
        self.bytes += n


def _helper() -> types.SimpleNamespace:
    """A stand-in for one helper: `cat`, whose output is its input, behind a PipeChannel."""
    chan = PipeChannel(PipedProcess(["cat"]), timeout=30)
    return types.SimpleNamespace(chan=chan, out=ChannelReader(chan.recv))


def _drain(chan: PipeChannel, into: bytearray) -> None:
    while True:
        got = chan.recv(1 << 20)
        if not got:
            return
        into += got


def _run_pump(payload: bytes, source, dest, sizes: list[int]) -> tuple[bytes, Progress]:
    for chan in (source.chan, dest.chan):
        chan.reader_elsewhere = True  # as SinkChannel.pair leaves them: the pump reads the source
    landed = bytearray()
    reader = threading.Thread(target=_drain, args=(dest.chan, landed))
    reader.start()
    pump = Pump(source, dest)
    progress = Progress()
    pump.expect(
        [FileTask(f"f{i}", size, 0.0, f"/s/f{i}", f"/d/f{i}", f"/d/.f{i}") for i, size in enumerate(sizes)], progress
    )
    source.chan.sendall(payload)
    source.chan.shutdown_write()  # cat ends its output; the pump then ends dest's input
    pump.thread.join(30)
    reader.join(30)
    assert not pump.thread.is_alive() and not reader.is_alive()
    source.chan.close()
    dest.chan.close()
    return bytes(landed), progress


def test_between_two_processes_here_the_pump_splices_and_counts_every_byte(monkeypatch):
    spliced: list[int] = []
    real_splice = os.splice

    def counting_splice(src, dst, count, *rest):
        moved = real_splice(src, dst, count, *rest)
        spliced.append(moved)
        return moved

    monkeypatch.setattr(os, "splice", counting_splice)
    monkeypatch.setattr(Pump, "forward", lambda self, data: pytest.fail("copied through this process"))
    sizes = [64 * 1024] * 40 + [1, 0, 333]
    payload = os.urandom(sum(sizes) + Pump.FRAME_BYTES * len(sizes))
    landed, progress = _run_pump(payload, _helper(), _helper(), sizes)
    assert landed == payload
    assert sum(spliced) == len(payload)
    assert progress.bytes == sum(sizes)  # every file counted once its bytes went through


def test_bytes_the_source_channel_read_early_keep_their_place_before_the_rest():
    source, dest = _helper(), _helper()
    source.chan._early += b"read-early:"  # as a write that waited for room leaves them
    assert bundle_channel._pipes(source.chan, dest.chan) is None
    payload = os.urandom(3 << 20)
    landed, progress = _run_pump(payload, source, dest, [len(payload) - Pump.FRAME_BYTES])
    assert landed == b"read-early:" + payload
    assert progress.bytes == len(payload) - Pump.FRAME_BYTES


def test_a_channel_that_is_not_a_pipe_is_never_spliced():
    helper = _helper()
    try:
        assert bundle_channel._pipes(helper.chan, object()) is None
        assert bundle_channel._pipes(object(), helper.chan) is None
        assert bundle_channel._pipes(helper.chan, helper.chan) == (helper.chan.read_fd, helper.chan.write_fd)
    finally:
        helper.chan.close()
