"""Algorithm registry and block digests against the reference implementations."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import zlib

import blake3
import crc32c
import pytest
import xxhash

from airflow_transfer.integrity.algorithms import (
    ALGORITHMS,
    COREUTILS_COMMANDS,
    DEFAULT_ALGORITHM,
    STDLIB_ALGORITHMS,
    ShortReadError,
    available,
    digest_bytes,
    digest_file,
    new_hasher,
)
from airflow_transfer.integrity.blocks import (
    FileDigests,
    block_digests,
    concat_ranges,
    file_digests,
    mismatched_blocks,
)

BLOCK = 4096
SIZES = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 7]


def reference(name: str, data: bytes) -> str:
    """Each algorithm computed straight from its reference library."""
    if name in ("md5", "sha1", "sha256", "blake2b"):
        return hashlib.new(name, data).hexdigest()
    if name == "adler32":
        return zlib.adler32(data).to_bytes(4, "big").hex()
    if name == "crc32c":
        return crc32c.crc32c(data).to_bytes(4, "big").hex()
    if name == "xxh128":
        return xxhash.xxh128(data).hexdigest()
    if name == "blake3":
        return blake3.blake3(data).hexdigest()
    raise AssertionError(name)


@pytest.fixture(scope="module")
def payload() -> bytes:
    return os.urandom(4 * BLOCK)


def test_registry_lists_the_required_algorithms() -> None:
    assert set(ALGORITHMS) == {"md5", "sha1", "sha256", "blake2b", "adler32", "crc32c", "xxh128", "blake3"}
    assert set(STDLIB_ALGORITHMS) == {"md5", "sha1", "sha256", "blake2b", "adler32"}
    assert COREUTILS_COMMANDS == {"md5": "md5sum", "sha1": "sha1sum", "sha256": "sha256sum", "blake2b": "b2sum"}
    assert all(available(name) for name in ALGORITHMS)


def test_default_is_computable_by_a_bare_remote_both_ways() -> None:
    assert DEFAULT_ALGORITHM in STDLIB_ALGORITHMS
    assert DEFAULT_ALGORITHM in COREUTILS_COMMANDS


@pytest.mark.parametrize(
    "name, data, expected",
    [
        ("sha256", b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("md5", b"abc", "900150983cd24fb0d6963f7d28e17f72"),
        ("adler32", b"Wikipedia", "11e60398"),
        ("crc32c", b"123456789", "e3069283"),
        ("blake3", b"", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"),
        ("xxh128", b"", "99aa06d3014798d86001c324468d497f"),
    ],
)
def test_published_test_vectors(name: str, data: bytes, expected: str) -> None:
    assert digest_bytes(name, data) == expected


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_digests_equal_reference_at_edge_sizes(name: str, size: int, payload: bytes, tmp_path) -> None:
    data = payload[:size]
    want = reference(name, data)
    assert digest_bytes(name, data) == want
    assert digest_bytes(name, memoryview(bytearray(data))) == want

    path = tmp_path / "f.bin"
    path.write_bytes(data)
    # A read size that does not divide the block size crosses boundaries mid-read.
    assert digest_file(name, path, block_size=1000) == want
    assert digest_file(name, io.BytesIO(data), block_size=BLOCK) == want

    result = file_digests(name, path, BLOCK, read_size=1000)
    assert result.digest == want
    assert result.length == size
    spans = [(i, min(i + BLOCK, size)) for i in range(0, size, BLOCK)]
    assert list(result.blocks) == [reference(name, data[a:b]) for a, b in spans]
    assert block_digests(name, io.BytesIO(data), BLOCK) == list(result.blocks)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_hasher_incremental_and_copy_are_independent(name: str, payload: bytes) -> None:
    hasher = new_hasher(name)
    hasher.update(payload[:100])
    fork = hasher.copy()
    hasher.update(payload[100:300])
    fork.update(b"something else")
    assert hasher.hexdigest() == reference(name, payload[:300])
    assert fork.hexdigest() == reference(name, payload[:100] + b"something else")
    assert hasher.name == name
    assert len(hasher.hexdigest()) == 2 * ALGORITHMS[name].digest_size


def test_unknown_algorithm_names_the_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        new_hasher("sha3-512")
    message = str(info.value)
    assert "'sha3-512'" in message
    assert all(name in message for name in ALGORITHMS)
    with pytest.raises(ValueError):
        available("crc64")
    assert digest_bytes(" SHA256 ", b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_ranges_offset_length_and_short_files(payload: bytes, tmp_path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(payload)
    assert digest_file("sha256", path, offset=5, length=4000) == reference("sha256", payload[5:4005])
    assert digest_file("md5", path, offset=len(payload) - 3) == reference("md5", payload[-3:])
    with pytest.raises(ShortReadError, match="wanted 10 bytes, read 3"):
        digest_file("sha256", path, offset=len(payload) - 3, length=10)
    with pytest.raises(ShortReadError):
        file_digests("sha256", path, BLOCK, offset=len(payload), length=1)
    with pytest.raises(FileNotFoundError):
        digest_file("sha256", tmp_path / "missing")


def test_aligned_ranges_combine_into_the_file_block_list(payload: bytes, tmp_path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(payload[: 3 * BLOCK + 7])
    whole = file_digests("xxh128", path, BLOCK)
    parts = [
        file_digests("xxh128", path, BLOCK, offset=2 * BLOCK),  # given out of order on purpose
        file_digests("xxh128", path, BLOCK, offset=0, length=2 * BLOCK),
    ]
    assert concat_ranges(parts) == whole.blocks
    assert len(whole.blocks) == 4
    with pytest.raises(ValueError, match="block boundary"):
        concat_ranges(
            [
                file_digests("xxh128", path, BLOCK, offset=0, length=BLOCK + 1),
                file_digests("xxh128", path, BLOCK, offset=BLOCK + 1),
            ]
        )


def test_mismatched_blocks_names_the_damaged_block(payload: bytes) -> None:
    good = payload[: 3 * BLOCK + 7]
    bad = bytearray(good)
    bad[BLOCK + 10] ^= 0xFF
    source = file_digests("crc32c", io.BytesIO(good), BLOCK)
    dest = file_digests("crc32c", io.BytesIO(bytes(bad)), BLOCK)
    assert mismatched_blocks(source, dest) == [1]
    assert source.block_span(1) == (BLOCK, BLOCK)
    assert source.block_span(3) == (3 * BLOCK, 7)
    truncated = file_digests("crc32c", io.BytesIO(good[: 2 * BLOCK]), BLOCK)
    assert mismatched_blocks(source, truncated) == [2, 3]
    other_cut = FileDigests("crc32c", 0, len(good), source.digest, BLOCK * 2, ())
    with pytest.raises(ValueError, match="block_size"):
        mismatched_blocks(source, other_cut)


def posix_cksum(data: bytes) -> int:
    """POSIX 1003.2 CRC as `cksum` computes it: MSB-first 0x04C11DB7 with the length appended."""
    crc = 0
    length = len(data)
    tail = b""
    while length:
        tail += bytes([length & 0xFF])
        length >>= 8
    for byte in data + tail:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else (crc << 1)
            crc &= 0xFFFFFFFF
    return ~crc & 0xFFFFFFFF


def test_coreutils_print_the_same_digests_and_cksum_is_not_crc32c(payload: bytes, tmp_path) -> None:
    data = payload[: BLOCK + 1]
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    for name, command in COREUTILS_COMMANDS.items():
        out = subprocess.run([command, "--", str(path)], capture_output=True, check=True).stdout
        assert out.split()[0].decode() == digest_bytes(name, data), command
    out = subprocess.run(["cksum", str(path)], capture_output=True, check=True).stdout.split()
    printed = int(out[0])
    assert printed == posix_cksum(data)
    assert printed != crc32c.crc32c(data)
    assert printed != zlib.crc32(data)
