"""Block digests in the journal (migration 2): recorded, replaced when re-sent, cleared when done or changed."""

from __future__ import annotations

import pyarrow as pa

from airflow_transfer.manifest_schema import SCHEMA
from airflow_transfer.store import Store, decode_blocks
from tests.support.postgres import postgres_server, store_url  # noqa: F401  (fixtures)


def _listing(sizes: dict[str, int], mtime: float = 1_700_000_000.5) -> pa.Table:
    return pa.table({"path": list(sizes), "size": list(sizes.values()), "mtime": [mtime] * len(sizes)}, schema=SCHEMA)


def _blocks(store: Store, tid: int) -> dict[str, list]:
    return {r["path"]: decode_blocks(r["blocks"]) for r in store.file_states(tid).to_pylist()}


def test_block_digests_round_trip_and_are_replaced_and_cleared(store_url: str) -> None:
    with Store.open(store_url) as store:
        rec = store.begin_transfer("blocks", "file:///a", "sftp://h/b")
        store.record_listing(rec.id, _listing({"f": 300, "g": 10}))
        with store.journal_writer(rec.id) as w:
            w.mark_range("f", 0, 300)
            w.mark_block("f", 100, 100, "sha256:bb")
            w.mark_block("f", 0, 100, "sha256:aa")
            w.mark_block("f", 200, 100, "sha256:cc")
            w.mark_block("g", 0, 10, "md5:gg")
        assert _blocks(store, rec.id) == {
            "f": [[0, 100, "sha256:aa"], [100, 100, "sha256:bb"], [200, 100, "sha256:cc"]],
            "g": [[0, 10, "md5:gg"]],
        }
        with store.journal_writer(rec.id) as w:
            w.mark_block("f", 50, 100, "sha256:new")  # re-sent over two old blocks: both go
            w.mark_done("g", 10)
        assert _blocks(store, rec.id) == {"f": [[50, 100, "sha256:new"], [200, 100, "sha256:cc"]], "g": []}
        # The source changed since: its journal, blocks included, starts over.
        store.record_listing(rec.id, _listing({"f": 301, "g": 10}))
        assert _blocks(store, rec.id)["f"] == []
