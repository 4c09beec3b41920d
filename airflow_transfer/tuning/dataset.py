"""The size column of a manifest, sorted, with prefix sums for O(1) range figures.

Planners work on row ranges [start, stop) of the size-sorted manifest. Sums,
means and split points of any range come from one cumulative-sum array, so a
planner touches each row once (the cumsum) no matter how many chunks it tries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import manifest_schema as ms

ManifestLike: TypeAlias = pa.Table | pa.Array | pa.ChunkedArray | np.ndarray


def sort_manifest(table: pa.Table) -> pa.Table:
    """The manifest ordered by ascending size (stable: equal sizes keep listing order)."""
    _require_size_column(table)
    if table.num_rows == 0:
        return table
    order = pc.sort_indices(table, sort_keys=[(ms.SIZE, "ascending")])
    return table.take(order)


def sizes_of(manifest: ManifestLike) -> np.ndarray:
    """File sizes as an int64 NumPy array (zero-copy where Arrow allows)."""
    if isinstance(manifest, pa.Table):
        _require_size_column(manifest)
        column = manifest.column(ms.SIZE)
        if column.null_count:
            raise ValueError(
                f"manifest column '{ms.SIZE}' has {column.null_count} null(s); "
                "every file needs a size - re-list the source"
            )
        values = column.to_numpy()
    elif isinstance(manifest, (pa.Array, pa.ChunkedArray)):
        values = manifest.to_numpy()
    elif isinstance(manifest, np.ndarray):
        values = manifest
    else:
        raise ValueError(
            f"manifest must be an Arrow table with a '{ms.SIZE}' column or an array of sizes "
            f"(got {type(manifest).__name__})"
        )
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"file sizes must be a 1-D integer array (got dtype {values.dtype}, {values.ndim}-D)")
    values = values.astype(np.int64, copy=False)
    if values.size and values.min() < 0:
        raise ValueError(f"file sizes must be >= 0 (row {int(np.argmin(values))} has {int(values.min())})")
    return values


@dataclass(frozen=True, eq=False)
class SortedSizes:
    """Sizes in ascending order plus their prefix sums (cum[i] = bytes of rows < i)."""

    sizes: np.ndarray
    cum: np.ndarray

    @classmethod
    def of(cls, manifest: ManifestLike) -> SortedSizes:
        sizes = sizes_of(manifest)
        if sizes.size > 1 and bool(np.any(sizes[1:] < sizes[:-1])):
            row = int(np.argmax(sizes[1:] < sizes[:-1])) + 1
            raise ValueError(
                f"manifest is not sorted by size (row {row} is smaller than row {row - 1}); "
                "pass it through airflow_transfer.tuning.sort_manifest() first"
            )
        cum = np.empty(sizes.size + 1, dtype=np.int64)
        cum[0] = 0
        np.cumsum(sizes, out=cum[1:])
        return cls(sizes, cum)

    def __len__(self) -> int:
        return int(self.sizes.size)

    @property
    def total(self) -> int:
        return int(self.cum[-1])

    def bytes(self, start: int, stop: int) -> int:
        return int(self.cum[stop] - self.cum[start])

    def mean(self, start: int, stop: int) -> float:
        return self.bytes(start, stop) / (stop - start) if stop > start else 0.0

    def index_above(self, value: float, start: int = 0, stop: int | None = None) -> int:
        """First row in [start, stop) whose size is > value (stop if none)."""
        stop = len(self) if stop is None else stop
        return start + int(np.searchsorted(self.sizes[start:stop], value, side="right"))

    def index_at_least(self, value: float, start: int = 0, stop: int | None = None) -> int:
        """First row in [start, stop) whose size is >= value (stop if none)."""
        stop = len(self) if stop is None else stop
        return start + int(np.searchsorted(self.sizes[start:stop], value, side="left"))

    def byte_split(self, start: int, stop: int, fraction: float = 0.5) -> int:
        """Row where the bytes of [start, stop) reach `fraction`, kept strictly inside when possible."""
        target = self.cum[start] + fraction * (self.cum[stop] - self.cum[start])
        mid = int(np.searchsorted(self.cum, target, side="left"))
        return min(max(mid, start + 1), stop - 1) if stop - start >= 2 else stop

    def byte_cuts(self, start: int, stop: int, target_bytes: float) -> np.ndarray:
        """Row boundaries cutting [start, stop) into pieces of about target_bytes each.

        Returns the inner cut rows (strictly increasing, exclusive of start and stop).
        """
        total = self.bytes(start, stop)
        pieces = int(max(1, min(stop - start, round(total / target_bytes)))) if target_bytes > 0 else 1
        if pieces <= 1:
            return np.empty(0, dtype=np.int64)
        targets = self.cum[start] + total * np.arange(1, pieces) / pieces
        cuts = np.searchsorted(self.cum, targets, side="left")
        cuts = np.clip(cuts, start + 1, stop - 1)
        return np.unique(cuts)


def _require_size_column(table: pa.Table) -> None:
    if ms.SIZE not in table.column_names:
        raise ValueError(
            f"manifest has no '{ms.SIZE}' column (columns: {', '.join(table.column_names) or 'none'}); "
            "build it with `airflow-transfer list`"
        )
