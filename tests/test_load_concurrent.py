"""Twenty `airflow-transfer copy` processes at once against one sshd and one store (issue #11, load).

Half upload and half download, all started together, each with its own small
tree and the default transfer key (derived from SRC and DST), verification on.
On both store backends (a fresh, never-migrated SQLite file or PostgreSQL
schema, so the twenty also race to create it): every process exits 0 without a
lock error, every destination is byte-identical to its source, and the store
holds twenty succeeded transfers whose journals say every file is done, with
its whole size committed.

The datasets are small on purpose: what is under test is the sharing of the
store and the server, and `make test` runs this next to other xdist workers on
two cores. The 20 x 1000-file version is in benchmarks/load.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from airflow_transfer.store import Store, decode
from tests.support.cli import ssh_args
from tests.support.data import temp_files, tree_digest, write_random
from tests.support.postgres import postgres_server, store_url  # noqa: F401  (fixtures)
from tests.support.sshd import chown_to_user

TRANSFERS = 20
FILES = 20


def _make_tree(root: Path, k: int) -> dict[str, int]:
    """FILES files in two directories, sizes varied (one empty); returns relative path -> size."""
    sizes = {}
    for i in range(FILES):
        rel = f"d{i % 2}/f{i:02d}.bin"
        size = 0 if i == 0 else 1 + (k * 7919 + i * 104729) % 6000
        write_random(root / rel, size, seed=k * 1000 + i)
        sizes[rel] = size
    return sizes


def test_twenty_cli_transfers_at_once_share_one_store(store_url, sshd, remote_dir, local_dir):
    jobs = []
    for k in range(TRANSFERS):
        if k % 2 == 0:  # upload: local tree -> sshd
            src, dst = local_dir / f"src{k:02d}", remote_dir / f"dst{k:02d}"
            sizes = _make_tree(src, k)
            src_arg, dst_arg = str(src), sshd.url(str(dst))
        else:  # download: a tree on the server side -> local
            src, dst = remote_dir / f"src{k:02d}", local_dir / f"dst{k:02d}"
            sizes = _make_tree(src, k)
            chown_to_user(src, sshd.user)
            src_arg, dst_arg = sshd.url(str(src)), str(dst)
        jobs.append(
            (
                src,
                dst,
                sizes,
                [
                    sys.executable,
                    "-m",
                    "airflow_transfer.cli",
                    "copy",
                    src_arg,
                    dst_arg,
                    "--json",
                    "--store",
                    store_url,
                    *ssh_args(sshd),
                ],
            )
        )

    t0 = time.monotonic()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for *_, cmd in jobs]
    outputs = [p.communicate(timeout=600) for p in procs]
    print(f"{TRANSFERS} transfers x {FILES} files on {store_url.split(':')[0]}: {time.monotonic() - t0:.1f}s")

    summaries = []
    for k, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        assert "locked" not in err, f"transfer {k}: {err[-2000:]}"
        assert "Traceback" not in err, f"transfer {k}: {err[-2000:]}"
        assert proc.returncode == 0, f"transfer {k} exited {proc.returncode}: {err[-2000:]}"
        summary = json.loads(out)
        src, dst, sizes, _ = jobs[k]
        assert (summary["files"], summary["bytes"], summary["failed"]) == (FILES, sum(sizes.values()), [])
        assert summary["verify"]["verified"] == FILES and summary["verify"]["mismatched"] == 0, summary["verify"]
        assert tree_digest(dst) == tree_digest(src), f"transfer {k}: destination differs from source"
        assert temp_files(dst) == []
        summaries.append(summary)

    ids = [s["transfer_id"] for s in summaries]
    assert len(set(ids)) == TRANSFERS  # default keys differ per SRC/DST: twenty separate jobs
    with Store.open(store_url) as store:
        records = store.list_transfers(limit=1000)
        assert sorted(r.id for r in records) == sorted(ids)
        for k, tid in enumerate(ids):
            record = store.get_transfer(tid)
            sizes = jobs[k][2]
            assert (record.state, record.attempts) == ("succeeded", 1), record
            assert (record.summary["files"], record.summary["bytes"]) == (FILES, sum(sizes.values()))
            assert sum(c.files for c in record.chunks) == FILES
            rows = store.file_states(tid).to_pylist()
            assert sorted(r["path"] for r in rows) == sorted(sizes)
            for row in rows:
                size = sizes[row["path"]]
                assert row["state"] == "done", row
                assert decode(row["ranges"]) == ([[0, size]] if size else []), row
            counts = store.journal_counts(tid)
            assert counts["done"] == {
                "files": FILES,
                "bytes": sum(sizes.values()),
                "bytes_done": sum(sizes.values()),
            }, counts
