"""End-to-end integrity: checksum algorithms, block digests, the destination
helper's client and the paper 002 time model. Block-level verification of
transfers (source digests as blocks are sent, destination digests per block)
is the engine's: airflow_transfer/engine/block_verify.py and its block_*.py modules.

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

__all__ = [
    "ALGORITHMS",
    "COREUTILS_COMMANDS",
    "DEFAULT_ALGORITHM",
    "STDLIB_ALGORITHMS",
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
