"""Block bookkeeping without a network: source digests per block, handed on only once acked;
a re-sent block replaces exactly what it overlaps."""

from __future__ import annotations

import hashlib
import io
import os
import random
import threading
import tracemalloc

import pytest

from airflow_transfer.engine.block_book import FileBlocks
from airflow_transfer.engine.block_verify import Block, BlockSource, BlockVerifier, block_spans
from airflow_transfer.engine.sftp_jobs import FileTask
from airflow_transfer.engine.verify import DestinationDigests
from airflow_transfer.integrity.algorithms import ALGORITHMS
from airflow_transfer.integrity.blocks import file_digests


def test_block_spans_are_cut_at_block_boundaries_and_range_edges():
    assert block_spans(0, 10, 4) == [(0, 4), (4, 4), (8, 2)]
    assert block_spans(5, 13, 4) == [(5, 3), (8, 4), (12, 1)]
    assert block_spans(7, 7, 4) == []


def test_block_source_hashes_in_order_and_emits_after_every_byte_is_acked():
    data = os.urandom(10_000)
    out: list[Block] = []
    src = BlockSource("sha256", block_spans(1000, 10_000, 4096), out.append, 1000)
    for off in range(1000, 10_000, 1500):  # read pieces cut across block edges
        src.update(off, data[off : off + 1500])
    assert out == []  # hashed, but the server has acknowledged nothing yet
    src.acked(1000, 3096)
    assert [(b.offset, b.length) for b in out] == [(1000, 3096)]
    src.acked(8192, 1808)  # acks out of order: the last block completes first
    src.acked(4096, 4096)
    assert [(b.offset, b.length) for b in out] == [(1000, 3096), (8192, 1808), (4096, 4096)]
    for b in out:
        assert b.digest == hashlib.sha256(data[b.offset : b.offset + b.length]).hexdigest()


def test_a_block_replaces_what_it_overlaps_and_counts_what_is_unchecked():
    f = FileBlocks(0, FileTask("f", 100, 0.0, "/s", "/d", "/t"))
    for off in (0, 30, 60):
        f.put(Block(off, 30, "x", "ok"))
    f.put(Block(90, 10, "y"))  # sent, not checked yet
    assert f.offsets == [0, 30, 60, 90] and f.unsettled == 1
    f.put(Block(20, 20, "z"))  # overlaps the first two
    assert f.offsets == [20, 60, 90] and f.unsettled == 2
    f.put(Block(90, 10, "w", "ok"))
    assert f.offsets == [20, 60, 90] and f.unsettled == 1 and f.blocks[90].digest == "w"


# -- The source side's digests (moved here from the former integrity.pipeline tests) --------------

BLOCK = 4096
SIZES = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 7]
MIB = 2**20


def _pieces(data: bytes, rng: random.Random, largest: int, start: int = 0):
    """(offset, bytes) cut at random sizes from `start`, so pieces straddle block boundaries."""
    pos = start
    while pos < len(data):
        size = rng.randint(1, largest)
        yield pos, data[pos : pos + size]
        pos += size


def _source(name: str, start: int, stop: int, block: int = BLOCK, emit=None):
    out: list[Block] = []
    src = BlockSource(name, block_spans(start, stop, block), emit or out.append, start)
    return src, out


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_block_source_digests_equal_the_one_pass_reference(name):
    rng = random.Random(name)
    data = os.urandom(SIZES[-1])
    for size in SIZES:
        src, out = _source(name, 0, size)
        for off, piece in _pieces(data[:size], rng, 1500):
            src.update(off, piece)
        src.acked(0, size)
        assert [b.digest for b in out] == list(file_digests(name, io.BytesIO(data[:size]), BLOCK).blocks), size
        assert [(b.offset, b.length) for b in out] == block_spans(0, size, BLOCK)


def test_block_source_keeps_byte_order_over_many_tiny_pieces():
    # Any reordering of a block's parts would change its digest.
    data = os.urandom(64 * BLOCK + 123)
    for seed in range(5):
        src, out = _source("sha256", 0, len(data))
        for off, piece in _pieces(data, random.Random(seed), 700):
            src.update(off, piece)
            src.acked(off, len(piece))
        assert [b.digest for b in out] == list(file_digests("sha256", io.BytesIO(data), BLOCK).blocks)


def test_blocks_completed_out_of_order_are_kept_in_offset_order():
    data = os.urandom(4 * BLOCK)
    src, out = _source("md5", 0, len(data))
    src.update(0, data)
    for k in (1, 3, 0, 2):  # the server acknowledges block 1 first
        src.acked(k * BLOCK, BLOCK)
    assert [b.offset // BLOCK for b in out] == [1, 3, 0, 2]
    f = FileBlocks(0, FileTask("f", len(data), 0.0, "/s", "/d", "/t"))
    for b in out:
        f.put(b)
    assert f.offsets == [0, BLOCK, 2 * BLOCK, 3 * BLOCK]
    assert [f.blocks[o].digest for o in f.offsets] == list(file_digests("md5", io.BytesIO(data), BLOCK).blocks)


def test_block_source_memory_stays_bounded():
    # A fresh 1 MiB object per piece, 48 of them: nothing of a piece may be kept once it is hashed.
    template = bytearray(os.urandom(MIB))
    total_pieces = 48
    src, out = _source("md5", 0, total_pieces * MIB, 2 * MIB)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for i in range(total_pieces):
            src.update(i * MIB, bytes(template))
            src.acked(i * MIB, MIB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One piece being built + slack, far below the 48 MiB a queue of unhashed pieces would hold.
    assert peak - base < 3 * MIB, (peak - base) / MIB
    assert len(out) == total_pieces // 2 and sum(b.length for b in out) == total_pieces * MIB
    expected = file_digests("md5", io.BytesIO(bytes(template) * total_pieces), 2 * MIB).blocks
    assert [b.digest for b in out] == list(expected)


def test_a_piece_spanning_many_blocks_is_cut_at_each_block():
    data = os.urandom(10 * BLOCK)
    src, out = _source("sha1", 0, len(data))
    src.update(0, data[: 7 * BLOCK])
    src.update(7 * BLOCK, data[7 * BLOCK :])
    src.acked(0, len(data))
    assert [b.digest for b in out] == list(file_digests("sha1", io.BytesIO(data), BLOCK).blocks)


def test_ranges_reused_buffers_and_misuse():
    data = os.urandom(6 * BLOCK + 5)
    src, out = _source("blake3", 2 * BLOCK, len(data))  # a -p range starting at block 2
    buf = bytearray(data[2 * BLOCK :])
    src.update(2 * BLOCK, buf)
    buf[:] = bytes(len(buf))  # the job reuses its buffer: the digests were already taken
    src.acked(2 * BLOCK, len(buf))
    ranged = file_digests("blake3", io.BytesIO(data), BLOCK, offset=2 * BLOCK)
    assert [b.digest for b in out] == list(ranged.blocks)
    assert [(b.offset, b.length) for b in out] == block_spans(2 * BLOCK, len(data), BLOCK)

    src, _ = _source("md5", 0, 20)
    src.update(0, data[:10])
    with pytest.raises(RuntimeError, match=r"out of order \(11 != 10\)"):
        src.update(11, data[11:20])
    src.update(10, data[10:20])
    with pytest.raises(RuntimeError, match="outside this job's blocks"):
        src.update(20, data[20:30])
    with pytest.raises(ValueError, match="unknown checksum algorithm"):
        _source("md4", 0, 10)[0].update(0, data[:10])


def test_a_failing_block_callback_surfaces_to_the_job():
    def broken(block: Block) -> None:
        if block.offset == BLOCK:  # the journal write of the last block fails
            raise OSError("journal disk full")

    src, _ = _source("md5", 0, 2 * BLOCK, emit=broken)
    src.update(0, bytes(2 * BLOCK))
    src.acked(0, BLOCK)
    with pytest.raises(OSError, match="journal disk full"):
        src.acked(BLOCK, BLOCK)


# -- The destination side: BlockVerifier against a local temporary file -----------------------------


class _Recording(DestinationDigests):
    """Local digests, recording which block offsets were asked and answered; renames done locally."""

    def __init__(self, algorithm: str) -> None:
        super().__init__(algorithm)
        self.asked: list[int] = []
        self.answered: list[int] = []
        self.first = threading.Event()
        self.renamed: list[tuple[str, str]] = []
        test = self

        class Wire:
            outstanding = 0

            def send_rename(self, tmp: str, dst: str, on_reply) -> None:
                os.rename(tmp, dst)
                test.renamed.append((tmp, dst))

        self._wire = Wire()

    @property
    def wire(self):
        return self._wire

    def digests(self, items):
        offs = [p.offset for it in items for p in it.pieces]
        self.asked += offs
        self.first.set()
        out = super().digests(items)
        self.answered += offs
        return out


def test_block_verifier_checks_block_i_while_block_i_plus_1_is_sent_and_repairs_only_bad_blocks(tmp_path):
    data = os.urandom(4 * BLOCK + 100)
    src_path, tmp, dst = tmp_path / "src", tmp_path / ".dst.part", tmp_path / "dst"
    src_path.write_bytes(data)
    dest = _Recording("sha256")
    v = BlockVerifier(lambda: dest, "sha256", BLOCK)
    verdicts: list[tuple[bool, str | None, list[int]]] = []
    mismatches: list[list[Block]] = []
    settled = threading.Event()
    mismatched = threading.Event()

    def on_verdict(item, ok, err):
        verdicts.append((ok, err, sorted(dest.answered)))
        settled.set()

    def on_mismatch(i, blocks, msg):
        mismatches.append(blocks)
        mismatched.set()

    v.on_verdict, v.on_mismatch = on_verdict, on_mismatch
    v.start()
    try:
        v.begin_chunk()
        v.register(0, FileTask("dst", len(data), 0.0, str(src_path), str(dst), str(tmp)))
        src = BlockSource("sha256", block_spans(0, len(data), BLOCK), lambda b: v.block_sent(0, b), 0)
        with open(tmp, "wb") as out:
            out.write(data[:BLOCK])
        src.update(0, data[:BLOCK])
        src.acked(0, BLOCK)
        # Block 0 is checked at the destination before a byte of block 1 has been read or sent.
        assert dest.first.wait(10), "block 0 was not checked while the transfer went on"
        assert dest.asked == [0] and src.next == BLOCK
        bad = bytearray(data)
        bad[2 * BLOCK + 7] ^= 0xFF  # block 2 arrives corrupted
        with open(tmp, "r+b") as out:
            out.seek(BLOCK)
            out.write(bad[BLOCK:])
        src.update(BLOCK, data[BLOCK:])
        src.acked(BLOCK, len(data) - BLOCK)
        v.transfer_done(0)
        assert mismatched.wait(10) and not verdicts
        assert [(b.offset, b.length) for b in mismatches[0]] == [(2 * BLOCK, BLOCK)]  # only the bad block
        assert sorted(dest.asked) == [0, BLOCK, 2 * BLOCK, 3 * BLOCK, 4 * BLOCK]

        # The repair re-sends that block alone; only it is checked again.
        with open(tmp, "r+b") as out:
            out.seek(2 * BLOCK)
            out.write(data[2 * BLOCK : 3 * BLOCK])
        v.begin_repair(0)
        fix = BlockSource(
            "sha256", [(2 * BLOCK, BLOCK)], lambda b: v.block_sent(0, b), 2 * BLOCK, [mismatches[0][0].digest]
        )
        fix.acked(2 * BLOCK, BLOCK)
        v.transfer_done(0)
        assert settled.wait(10)
    finally:
        v.stop()
    ok, err, answered = verdicts[0]
    assert (ok, err) == (True, None) and len(verdicts) == 1
    # The verdict waited for every block's answer, the repaired one included.
    assert answered == [0, BLOCK, 2 * BLOCK, 2 * BLOCK, 3 * BLOCK, 4 * BLOCK]
    assert dest.renamed == [(str(tmp), str(dst))] and dst.read_bytes() == data
    assert (v.bstats.verified, v.bstats.mismatched, v.bstats.resent, v.bstats.bytes_resent) == (
        5,
        1,
        1,
        BLOCK,
    )  # 4 + the repaired one
