"""Pipelining over an emulated 50 ms link (paper 000, Fig. 2-3 in miniature).

100 x 64 KiB files on one connection: with pp=1 every file pays its control
round trips in full; with pp=8 eight files' operations overlap. If the
pipelined run is not at least 3x faster, the engine's pipelining is wrong.
"""

from __future__ import annotations

import json
import os

from tests.support.data import tree_digest, write_random
from tests.support.wan import wan_testbed  # noqa: F401  (fixture)


def _copy_in_src(tb, src, dst_path, pp):
    url = f"sftp://{tb.sshd.user}@{tb.sshd.host}:{tb.sshd.port}{dst_path}"
    res = tb.python_in_src(
        [
            "-m",
            "airflow_transfer.cli",
            "copy",
            str(src),
            url,
            "--pp",
            str(pp),
            "-c",
            "1",
            "-p",
            "1",
            "--verify",
            "none",
            "--no-bundle",  # pp is the SFTP path's knob
            "--json",
            "--identity",
            str(tb.sshd.client_key),
            "--known-hosts",
            str(tb.sshd.known_hosts),
        ],
        timeout=600,
        check=False,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def test_pp8_is_at_least_3x_faster_than_pp1_on_wan50(wan_testbed, test_base):
    tb = wan_testbed(rtt_ms=50, rate_mbit=500)
    src = tb.base / "src"
    # 100 files: pp=1 already takes ~20 s (four round trips a file); more only lengthens CI.
    for i in range(100):
        write_random(src / f"f{i:03d}.bin", 64 * 1024, seed=i)
    os.chmod(src, 0o755)
    before = tb.link.stats()
    one = _copy_in_src(tb, src, tb.remote_dir("pp1"), pp=1)
    eight = _copy_in_src(tb, src, tb.remote_dir("pp8"), pp=8)
    after = tb.link.stats()
    crossed = after["fwd"]["tx_bytes"] - before["fwd"]["tx_bytes"]
    assert crossed >= 2 * 100 * 64 * 1024  # the data really went over the emulated link
    t1, t8 = one["chunks"][0]["seconds"], eight["chunks"][0]["seconds"]
    print(f"wan50, 100 x 64 KiB, one connection: pp=1 {t1:.1f}s, pp=8 {t8:.1f}s, speed-up {t1 / t8:.1f}x")
    assert t1 >= 3 * t8
    for name in ("pp1", "pp8"):
        assert tree_digest(tb.base / "remote" / name) == tree_digest(src)
