"""ChunkSpec: a contiguous row range of the size-sorted manifest plus its parameters.

A spec holds only integers and the parameters, so it fits in an XCom and a
mapped Airflow task can rebuild its file list from the stored sorted manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..engine.params import TransferParams
from .dataset import SortedSizes

_INT_FIELDS = ("start", "stop", "files", "bytes", "min_size", "max_size")


@dataclass(frozen=True)
class ChunkSpec:
    id: str
    start: int  # first row of the size-sorted manifest
    stop: int  # one past the last row
    files: int
    bytes: int
    min_size: int
    max_size: int
    params: TransferParams

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"chunk id must be a non-empty string (got {self.id!r})")
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"chunk {self.id}: {name} must be a whole number >= 0 (got {value!r})")
        if self.stop <= self.start or self.files != self.stop - self.start:
            raise ValueError(
                f"chunk {self.id}: rows [{self.start}, {self.stop}) must be non-empty and match files={self.files}"
            )
        if not isinstance(self.params, TransferParams):
            raise ValueError(f"chunk {self.id}: params must be a TransferParams (got {type(self.params).__name__})")

    def with_params(self, **changes: int) -> ChunkSpec:
        return replace(self, params=replace(self.params, **changes))

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"id": self.id}
        out.update({name: getattr(self, name) for name in _INT_FIELDS})
        out["params"] = self.params.as_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> ChunkSpec:
        missing = [k for k in ("id", *_INT_FIELDS, "params") if k not in data]
        if missing:
            raise ValueError(f"chunk spec is missing {', '.join(missing)}; was it written by ChunkSpec.to_dict()?")
        params = data["params"]
        if not isinstance(params, dict):
            raise ValueError(f"chunk spec 'params' must be a dict (got {type(params).__name__})")
        return cls(id=data["id"], params=TransferParams(**params), **{name: data[name] for name in _INT_FIELDS})


def make_spec(sizes: SortedSizes, chunk_id: str, start: int, stop: int, params: TransferParams) -> ChunkSpec:
    """Build a spec for rows [start, stop) of the sorted sizes."""
    return ChunkSpec(
        id=chunk_id,
        start=int(start),
        stop=int(stop),
        files=int(stop - start),
        bytes=sizes.bytes(start, stop),
        min_size=int(sizes.sizes[start]),
        max_size=int(sizes.sizes[stop - 1]),
        params=params,
    )
