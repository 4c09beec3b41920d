"""End-to-end integrity: checksum algorithms, block digests, the destination
helper's client, the paper 002 time model and the source-side block pipeline.

Nothing here imports Airflow or an SSH library. See docs/integrity.md.
"""

from .algorithms import (
    ALGORITHMS,
    COREUTILS_COMMANDS,
    DEFAULT_ALGORITHM,
    STDLIB_ALGORITHMS,
    Hasher,
    ShortReadError,
    algorithm_info,
    available,
    digest_bytes,
    digest_file,
    new_hasher,
)
from .blocks import FileDigests, block_digests, concat_ranges, file_digests, mismatched_blocks
from .pipeline import BlockPipeline

__all__ = [
    "ALGORITHMS",
    "COREUTILS_COMMANDS",
    "DEFAULT_ALGORITHM",
    "STDLIB_ALGORITHMS",
    "BlockPipeline",
    "FileDigests",
    "Hasher",
    "ShortReadError",
    "algorithm_info",
    "available",
    "block_digests",
    "concat_ranges",
    "digest_bytes",
    "digest_file",
    "file_digests",
    "mismatched_blocks",
    "new_hasher",
]
