"""Bundles while the chunk's channel count changes (engine/bundle.py under Runner.set_workers).

When the count steps down, the workers one too many leave between groups; the others go on
sending bundles. Found on a first contact with 100,000 files: after a step from 4 channels to 2,
a worker that had left its bundle loop but was not the one to retire carried the rest of the
small files one at a time over SFTP, at a tenth of the rate. Real sshd; the channel changes are
the ones Multi-Chunk and the adaptive ramp make (EngineChunkSession.set_channels).
"""

from __future__ import annotations

import shutil
import time

import pytest

from airflow_transfer.engine.params import TransferParams
from airflow_transfer.engine.transfer import TransferSession
from airflow_transfer.job import EngineSessionExecutor
from airflow_transfer.manifest import list_local
from airflow_transfer.protocols.endpoint import Endpoint
from airflow_transfer.tuning.chunks import make_spec
from airflow_transfer.tuning.dataset import SortedSizes
from tests.support.data import temp_files, tree_digest, write_random
from tests.support.sshd import chown_to_user

FILES = 6000


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle-channels") / "src"
    for i in range(FILES):
        write_random(root / f"d{i % 30:02d}" / f"f{i:05d}", 200 + i % 900, seed=i)
    return root


@pytest.mark.parametrize("direction", ["upload", "download"])
def test_no_small_file_leaves_the_bundles_for_sftp_however_the_channels_change(
    direction, small_tree, sshd, remote_dir, local_dir
):
    if direction == "upload":
        tree, out = small_tree, remote_dir / "up"
        src, dst = Endpoint("file", str(tree)), Endpoint("sftp", str(out), sshd.target())
    else:
        tree, out = remote_dir / "down-src", local_dir / "down"
        shutil.copytree(small_tree, tree)
        chown_to_user(tree, sshd.user)
        src, dst = Endpoint("sftp", str(tree), sshd.target()), Endpoint("file", str(out))
    table = list_local(str(tree)).sorted_by_size().table
    mark = sshd.log_mark()
    with TransferSession(src, dst, verify="sha256") as s:
        cs = EngineSessionExecutor(s, src.path, dst.path, None, None).open_session(table)
        spec = make_spec(SortedSizes.of(table), "c", 0, table.num_rows, TransferParams(pp=8, p=1, cc=4))
        cs.start(spec, 4)
        chunk = cs._chunks["c"]
        # Steps down and up while groups are in flight: every step down has workers one too many
        # at once, each seeing it between its groups.
        deadline = time.monotonic() + 120
        steps = 0
        while chunk.stats.files_done < FILES * 0.8 and not chunk.done:
            assert time.monotonic() < deadline, "the copy stalled"
            if chunk.runner is not None and chunk.stats.files_done > 200:
                cs.set_channels("c", 1 if steps % 2 == 0 else 4)
                steps += 1
            time.sleep(0.02)
        events = []
        while not events or not events[-1].done:
            events.append(cs.wait_any())
        cs.close()
        result = events[-1].result
        bundled = s.bundle.files
    assert steps >= 2, "the copy ended before the channel count changed"
    assert result.failed == [] and len(result.outcomes) == FILES
    assert tree_digest(out) == tree_digest(tree)
    assert temp_files(out) == []
    # Every file went in a bundle; none was opened over SFTP (sftp-server logs each open).
    opened = [p for _, op, p in sshd.sftp_events(mark) if op == "open"]
    assert opened == [] and bundled == FILES, (len(opened), opened[:5], bundled)
