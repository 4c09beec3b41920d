"""Column layout of a dataset manifest (docs/transfers.md, "The transfer primitive").

Kept apart from the listing code so planners can import it without pulling
in SSH or filesystem code.
"""

from __future__ import annotations

import pyarrow as pa

PATH = "path"  # relative to the dataset root, POSIX separators, never '..'
SIZE = "size"  # bytes, int64
MTIME = "mtime"  # seconds since the epoch, float64
CHECKSUM = "checksum"  # optional "algo:hexdigest"

SCHEMA = pa.schema(
    [
        pa.field(PATH, pa.string(), nullable=False),
        pa.field(SIZE, pa.int64(), nullable=False),
        pa.field(MTIME, pa.float64(), nullable=False),
    ]
)


def empty() -> pa.Table:
    return SCHEMA.empty_table()
