"""`fixed`: the parameters the user gave, for the whole dataset.

The baseline every tuned algorithm is measured against, and what
`copy --pp/--parallelism/--concurrency` runs. pp here is `TransferParams.pp`
(files in flight per connection), not a paper-000 level.
"""

from __future__ import annotations

from ..engine.params import TransferParams
from .base import StaticAlgorithm, check_int
from .chunks import ChunkSpec, make_spec
from .dataset import SortedSizes


class Fixed(StaticAlgorithm):
    name = "fixed"

    def __init__(
        self,
        *,
        pp: int = 1,
        p: int = 1,
        cc: int = 1,
        block_size: int = 0,
        tcp_buffer: int = 0,
        chunk_bytes: int | None = None,
    ) -> None:
        self.params = TransferParams(pp=pp, p=p, cc=cc, block_size=block_size, tcp_buffer=tcp_buffer)
        if chunk_bytes is not None:
            check_int(self.name, "chunk_bytes", chunk_bytes)
        self.opts = {**self.params.as_dict(), "chunk_bytes": chunk_bytes}

    def _specs(self, sizes: SortedSizes) -> list[ChunkSpec]:
        n = len(sizes)
        if n == 0:
            return []
        chunk_bytes = self.opts["chunk_bytes"]
        cuts = sizes.byte_cuts(0, n, chunk_bytes).tolist() if chunk_bytes else []
        bounds = [0, *cuts, n]
        return [
            make_spec(sizes, f"fixed.{i + 1:03d}", lo, hi, self.params)
            for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))
        ]
