"""cc observed from the server's side over an emulated 50 ms link.

On loopback the two connections opened while the copy lists its files can move
a hundred small files before the third and fourth connection finish their
handshakes, so "cc=4 moved files on four connections" depended on the load of
the machine. Over 50 ms every small file at pp=1 costs a few round trips, far
longer than the rest of the handshakes, so each connection must find work.
"""

from __future__ import annotations

import os

from tests.support.cli import ssh_args
from tests.support.data import tree_digest, write_random
from tests.support.sshd import max_concurrent
from tests.support.wan import wan_testbed  # noqa: F401  (fixture)


def test_cc4_moves_files_on_four_connections_at_once(wan_testbed):
    tb = wan_testbed(rtt_ms=50, rate_mbit=500)
    src = tb.base / "src"
    for i in range(48):
        write_random(src / f"f{i:02d}.bin", 64 * 1024, seed=100 + i)
    os.chmod(src, 0o755)
    dst = tb.remote_dir("cc")
    mark = tb.sshd.log_mark()
    res = tb.python_in_src(
        [
            "-m",
            "airflow_transfer.cli",
            "copy",
            str(src),
            tb.sshd.url(str(dst)),
            "--pp",
            "1",
            "-c",
            "4",
            "-p",
            "1",
            "--no-bundle",  # the SFTP path: one file per connection at a time, seen in sftp-server's log
            *ssh_args(tb.sshd),
        ],
        timeout=300,
        check=False,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    events = [e for e in tb.sshd.sftp_events(mark) if e[2].endswith(".atpart")]
    writers = {pid for pid, _, _ in events}
    # pp=1: a connection has at most one file open, so files open at once = connections writing at once
    at_once = max_concurrent(events, "open", "close", lambda pid, path: path)
    print(f"wan50, 48 x 64 KiB, pp=1 cc=4: {len(writers)} connections wrote, {at_once} files open at once")
    assert len(writers) >= 4, writers
    assert at_once >= 4
    assert tree_digest(dst) == tree_digest(src)
