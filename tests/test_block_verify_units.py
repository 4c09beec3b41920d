"""Block bookkeeping without a network: source digests per block, handed on only once acked;
a re-sent block replaces exactly what it overlaps."""

from __future__ import annotations

import hashlib
import os

from airflow_transfer.engine.block_verify import Block, BlockSource, _File, block_spans
from airflow_transfer.engine.sftp_jobs import FileTask


def test_block_spans_are_cut_at_block_boundaries_and_range_edges():
    assert block_spans(0, 10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert block_spans(5, 13, 4) == [(5, 3), (8, 4), (12, 1)]
    assert block_spans(7, 7, 4) == []


def test_block_source_hashes_in_order_and_emits_after_every_byte_is_acked():
    data = os.urandom(10_000)
    out: list[Block] = []
    src = BlockSource("sha256", block_spans(1000, 10_000, 4096), out.append, 1000)
    for off in range(1000, 10_000, 1500):  # read pieces cut across block edges
        src.update(off, data[off:off + 1500])
    assert out == []  # hashed, but the server has acknowledged nothing yet
    src.acked(1000, 3096)
    assert [(b.offset, b.length) for b in out] == [(1000, 3096)]
    src.acked(8192, 1808)  # acks out of order: the last block completes first
    src.acked(4096, 4096)
    assert [(b.offset, b.length) for b in out] == [(1000, 3096), (8192, 1808), (4096, 4096)]
    for b in out:
        assert b.digest == hashlib.sha256(data[b.offset:b.offset + b.length]).hexdigest()


def test_a_block_replaces_what_it_overlaps_and_counts_what_is_unchecked():
    f = _File(0, FileTask("f", 100, 0.0, "/s", "/d", "/t"))
    for off in (0, 30, 60):
        f.put(Block(off, 30, "x", "ok"))
    f.put(Block(90, 10, "y"))  # sent, not checked yet
    assert f.offsets == [0, 30, 60, 90] and f.unsettled == 1
    f.put(Block(20, 20, "z"))  # overlaps the first two
    assert f.offsets == [20, 60, 90] and f.unsettled == 2
    f.put(Block(90, 10, "w", "ok"))
    assert f.offsets == [20, 60, 90] and f.unsettled == 1 and f.blocks[90].digest == "w"
