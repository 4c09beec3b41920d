"""BlockPipeline: digests equal the one-pass reference, order kept, memory bounded."""

from __future__ import annotations

import io
import os
import random
import threading
import tracemalloc

import pytest

from airflow_transfer.integrity.algorithms import ALGORITHMS
from airflow_transfer.integrity.blocks import file_digests
from airflow_transfer.integrity.pipeline import BlockPipeline

BLOCK = 4096
SIZES = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 7]
MIB = 2**20


def pieces(data: bytes, rng: random.Random, largest: int):
    """(offset, bytes) cut at random sizes, so pieces straddle block boundaries."""
    pos = 0
    while pos < len(data):
        size = rng.randint(1, largest)
        yield pos, data[pos : pos + size]
        pos += size


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_digests_match_one_pass_reference(name: str, threads: int) -> None:
    rng = random.Random(f"{name}{threads}")
    data = os.urandom(SIZES[-1])
    for size in SIZES:
        pipe = BlockPipeline(name, BLOCK, threads=threads, max_pending_bytes=3 * BLOCK)
        for offset, chunk in pieces(data[:size], rng, 1500):
            pipe.submit(offset, chunk)
        got = pipe.finish()
        assert got == file_digests(name, io.BytesIO(data[:size]), BLOCK), (name, size)


def test_whole_file_digest_keeps_byte_order_under_contention() -> None:
    # Many tiny pieces and 3 workers: any reordering of the whole-file stream
    # (or of a block's parts) would change the digests.
    data = os.urandom(64 * BLOCK + 123)
    for seed in range(5):
        pipe = BlockPipeline("sha256", BLOCK, threads=3, max_pending_bytes=8 * BLOCK)
        for offset, chunk in pieces(data, random.Random(seed), 700):
            pipe.submit(offset, chunk)
        assert pipe.finish() == file_digests("sha256", io.BytesIO(data), BLOCK)


def test_blocks_listed_in_order_when_they_finish_out_of_order() -> None:
    data = os.urandom(4 * BLOCK)
    finished: list[int] = []
    block_one_done = threading.Event()

    def on_block(index: int, offset: int, length: int, digest: str) -> None:
        if index == 0:  # hold block 0's worker until block 1 has completed elsewhere
            assert block_one_done.wait(10), "block 1 never completed while block 0 was held"
        finished.append(index)
        if index == 1:
            block_one_done.set()
        assert (offset, length) == (index * BLOCK, BLOCK)

    pipe = BlockPipeline("md5", BLOCK, threads=3, on_block=on_block)
    for i in range(4):
        pipe.submit(i * BLOCK, data[i * BLOCK : (i + 1) * BLOCK])
    got = pipe.finish(timeout=20)
    assert finished.index(1) < finished.index(0)
    assert sorted(finished) == [0, 1, 2, 3]
    assert got == file_digests("md5", io.BytesIO(data), BLOCK)


def test_memory_stays_bounded_with_back_pressure() -> None:
    template = bytearray(os.urandom(MIB))
    bound = 4 * MIB
    total_pieces = 48
    pipe = BlockPipeline("md5", 2 * MIB, threads=2, max_pending_bytes=bound)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for i in range(total_pieces):
            # A fresh 1 MiB object per piece, made far faster than md5 can hash it.
            pipe.submit(i * MIB, bytes(template))
            assert pipe.pending_bytes <= bound
        got = pipe.finish(timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pipe.waits > 0, "the producer never had to wait: back-pressure was not exercised"
    assert pipe.peak_pending_bytes <= bound
    # Bound + the piece being built + slack, far below the 48 MiB an unbounded queue holds.
    assert peak - base < bound + 3 * MIB, (peak - base) / MIB
    assert got.length == total_pieces * MIB and len(got.blocks) == total_pieces // 2
    assert got == file_digests("md5", io.BytesIO(bytes(template) * total_pieces), 2 * MIB)


def test_a_piece_larger_than_the_bound_still_goes_through() -> None:
    data = os.urandom(10 * BLOCK)
    pipe = BlockPipeline("sha1", BLOCK, threads=2, max_pending_bytes=BLOCK)
    pipe.submit(0, data[:7 * BLOCK])
    pipe.submit(7 * BLOCK, data[7 * BLOCK:])
    assert pipe.finish(timeout=20) == file_digests("sha1", io.BytesIO(data), BLOCK)


def test_submit_times_out_when_workers_stall() -> None:
    release = threading.Event()
    pipe = BlockPipeline("sha256", BLOCK, threads=1, max_pending_bytes=BLOCK,
                         on_block=lambda *a: release.wait(10))
    pipe.submit(0, bytes(BLOCK))  # completes block 0; its callback holds the only worker
    pipe.submit(BLOCK, bytes(BLOCK))  # queued behind it, stays pending
    with pytest.raises(TimeoutError, match="fell behind"):
        pipe.submit(2 * BLOCK, bytes(BLOCK), timeout=0.2)
    release.set()
    assert pipe.finish(timeout=20).length == 2 * BLOCK


def test_ranges_copies_and_misuse() -> None:
    data = os.urandom(6 * BLOCK + 5)
    ranged = BlockPipeline("blake3", BLOCK, offset=2 * BLOCK)
    buf = bytearray(data[2 * BLOCK:])
    ranged.submit(2 * BLOCK, buf)
    buf[:] = bytes(len(buf))  # caller reuses its buffer: the pipeline copied it
    assert ranged.finish() == file_digests("blake3", io.BytesIO(data), BLOCK, offset=2 * BLOCK)

    blocks_only = BlockPipeline("crc32c", BLOCK, whole_file=False)
    blocks_only.submit(0, data)
    result = blocks_only.finish()
    assert result.digest == "" and result.blocks == file_digests("crc32c", io.BytesIO(data), BLOCK).blocks

    whole_only = BlockPipeline("adler32", 0)
    whole_only.submit(0, data)
    assert whole_only.finish() == file_digests("adler32", io.BytesIO(data), 0)

    pipe = BlockPipeline("md5", BLOCK)
    pipe.submit(0, data[:10])
    with pytest.raises(ValueError, match="expected offset 10, got 11"):
        pipe.submit(11, data[11:20])
    pipe.finish()
    with pytest.raises(RuntimeError, match="finished"):
        pipe.submit(10, data[10:20])
    with pytest.raises(ValueError, match="unknown checksum algorithm"):
        BlockPipeline("md4")
    with pytest.raises(ValueError):
        BlockPipeline("md5", 0, whole_file=False)


def test_worker_failure_surfaces_in_finish() -> None:
    def broken(index: int, *rest) -> None:
        if index == 1:  # the last block's callback fails late: finish() must still be waiting
            threading.Event().wait(0.1)
            raise OSError("journal disk full")

    pipe = BlockPipeline("md5", BLOCK, on_block=broken)
    pipe.submit(0, bytes(2 * BLOCK))
    with pytest.raises(RuntimeError, match="journal disk full"):
        pipe.finish(timeout=20)


def test_finish_waits_for_block_callbacks() -> None:
    seen: list[int] = []

    def slow(index: int, *rest) -> None:
        threading.Event().wait(0.1)  # a journal write that takes a while
        seen.append(index)

    pipe = BlockPipeline("md5", BLOCK, threads=2, on_block=slow)
    pipe.submit(0, bytes(2 * BLOCK + 1))
    pipe.finish(timeout=20)
    assert sorted(seen) == [0, 1, 2]
