"""A file skipped because it is already complete at the destination is journaled done.

Found by the chaos suite (benchmarks/chaos): a SIGKILL between a rename into place and
its batched journal mark left complete files the journal did not call done; the re-run
skipped them and finished 'succeeded' with those files still pending in the journal.
"""

from __future__ import annotations

from airflow_transfer.store import Store
from tests.support.cli import run_cli, ssh_args
from tests.support.data import tree_digest, write_random


def _done(store_url: str, key: str) -> tuple[str, set[str]]:
    store = Store.open(store_url)
    try:
        record = next(t for t in store.list_transfers() if t.key == key)
        states = store.file_states(record.id)
        return record.state, {p for p, s in zip(states["path"].to_pylist(), states["state"].to_pylist()) if s == "done"}
    finally:
        store.close()


def test_files_skipped_as_complete_are_journaled_done(sshd, remote_dir, local_dir):
    src = local_dir / "src"
    names = {f"d{i % 2}/f{i}.bin" for i in range(6)}
    for i, rel in enumerate(sorted(names)):
        write_random(src / rel, 50_000 + i, seed=i)
    store = f"sqlite:///{local_dir / 'journal.db'}"
    dst = sshd.url(str(remote_dir / "d"))
    first = run_cli("copy", str(src), dst, "--store", store, "--transfer-key", "first", "--json", *ssh_args(sshd))
    assert first.code == 0, first.err
    # What a killed attempt leaves: every file complete under its final name, none journaled
    # done for the key the retry uses.
    again = run_cli("copy", str(src), dst, "--store", store, "--transfer-key", "retry", "--json", *ssh_args(sshd))
    assert again.code == 0, again.err
    assert again.summary["files_skipped"] == len(names)
    assert _done(store, "retry") == ("succeeded", names)
    assert tree_digest(remote_dir / "d") == tree_digest(src)
