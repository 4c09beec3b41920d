"""Ranged-read files against the bytes on disk: random reads, prefetched spans, read-ahead windows.

The same random access pattern runs over SFTP (the real sshd), HTTP (a real
server with Range support) and the local disk; every read must return exactly
the file's bytes, whatever mix of prefetched, cached and fresh ranges it hits.
"""

from __future__ import annotations

import os
import random

import pytest

from airflow_transfer.protocols.pool import SFTPPool
from airflow_transfer.protocols.ssh import SSHTarget
from airflow_transfer.query.http_rangefile import HTTPRangeFile
from airflow_transfer.query.rangefile import LocalRangeFile, ReadStats
from airflow_transfer.query.sftp_rangefile import SFTPRangeFile
from tests.support.http_range import RangeServer
from tests.support.sshd import chown_to_user

SIZE = 3 * 1024 * 1024 + 12345


def _exercise(rf, data: bytes, seed: int) -> None:
    rng = random.Random(seed)
    assert rf.size == len(data)
    for step in range(300):
        op = rng.random()
        if op < 0.15:
            ranges = [(rng.randrange(0, len(data)), rng.randrange(1, 400_000)) for _ in range(rng.randrange(1, 6))]
            rf.prefetch(ranges)
            if rng.random() < 0.3:
                rf.forget(ranges[: rng.randrange(0, len(ranges) + 1)])
        elif op < 0.25:
            rf.sequential = not rf.sequential
        elif op < 0.45 and rf.sequential:
            # runs of consecutive reads, the pattern the read-ahead window serves
            pos = rng.randrange(0, len(data))
            rf.seek(pos)
            for _ in range(rng.randrange(1, 8)):
                n = rng.randrange(1, 700_000)
                got = rf.read(n)
                assert got == data[pos : pos + n], (step, pos, n)
                pos += len(got)
        else:
            off = rng.randrange(0, len(data) + 10)
            n = rng.choice([1, 7, 4096, 65536, 255 * 1024, 300_000, 1_500_000])
            assert rf.read_at(off, n) == data[off : off + n], (step, off, n)
        if rng.random() < 0.05:
            rf.drop_prefetched()
    rf.seek(0)
    rf.sequential = True
    assert rf.read() == data  # a whole pass through the window at the end


@pytest.fixture
def blob(local_dir):
    data = os.urandom(SIZE)
    path = local_dir / "blob.bin"
    path.write_bytes(data)
    return path, data


def test_local(blob):
    path, data = blob
    stats = ReadStats()
    with LocalRangeFile(str(path), stats) as rf:
        _exercise(rf, data, 1)
    assert stats.bytes > 0


def test_sftp(sshd, remote_dir):
    data = os.urandom(SIZE)
    (remote_dir / "blob.bin").write_bytes(data)
    chown_to_user(remote_dir, sshd.user)
    pool = SFTPPool(
        SSHTarget(
            host=sshd.host,
            port=sshd.port,
            username=sshd.user,
            key_filenames=[str(sshd.client_key)],
            known_hosts=[str(sshd.known_hosts)],
            look_for_keys=False,
        )
    )
    conn = pool.acquire()
    try:
        for seed in (2, 3):
            stats = ReadStats()
            rf = SFTPRangeFile(conn, str(remote_dir / "blob.bin"), stats, readahead=512 * 1024)
            _exercise(rf, data, seed)
            rf.close()
            while conn.wire.outstanding:  # the CLOSE and any abandoned read-ahead replies
                conn.wire.pump(block=True)
            assert not rf.broken and stats.bytes >= SIZE
    finally:
        pool.release(conn)
        pool.close()


def test_http(blob):
    path, data = blob
    server = RangeServer(path.parent).start()
    try:
        stats = ReadStats()
        rf = HTTPRangeFile(server.url(path.name), stats)
        _exercise(rf, data, 4)
        rf.close()
        assert stats.bytes <= server.bytes_sent + 8 * 1024 * 1024  # an abandoned stream may be cut short
    finally:
        server.stop()
