"""The offset-write probe (protocols/capabilities.py) leaves nothing under a final name, even when
its connection is lost between creating and removing its file, and cleans up after such a loss."""

from __future__ import annotations

import os

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.job import CopyRequest, run_copy
from airflow_transfer.manifest import _is_temp
from airflow_transfer.protocols.capabilities import PROBE_NAME
from airflow_transfer.protocols.endpoint import Endpoint
from tests.support.data import temp_files, tree_digest, write_random
from tests.support.sshd import chown_to_user


def test_the_probe_file_is_a_temporary_and_the_next_probe_removes_a_leftover(sshd, local_dir, remote_dir):
    assert _is_temp(PROBE_NAME)  # a leftover is a temporary file: never listed, never a final name
    src = local_dir / "probe-src"
    write_random(src / "big.bin", 6 * 1024 * 1024, seed=71)  # split over p = 2: the probe runs first
    os.chmod(src, 0o755)
    dst = remote_dir / "probe-dst"
    dst.mkdir()
    # What a connection lost in the middle of an earlier probe left behind.
    (dst / PROBE_NAME).write_bytes(b"\0\0")
    chown_to_user(dst, sshd.user)
    s = run_copy(
        CopyRequest(
            Endpoint("file", str(src)),
            Endpoint("sftp", str(dst), sshd.target(look_for_keys=False)),
            TransferParams(pp=4, p=2, cc=1),
            use_store=False,
        )
    )
    assert s["failed"] == [] and s["server"]["offset_writes"] is True, s.get("server")
    assert tree_digest(dst) == tree_digest(src) and temp_files(dst) == []
    assert sorted(os.listdir(dst)) == ["big.bin"]
