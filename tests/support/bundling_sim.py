"""The link simulator as Multi-Chunk meets the engine's executor: saying which files travel in
bundles (tests of tuning/multichunk.py's bundle rule and LAN budget)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_transfer.tuning import LinkInfo, LinkSimulator


class BundlingSim(LinkSimulator):
    """The simulator, saying (as the engine's executor does) which files it bundles."""

    def __init__(self, link: LinkInfo, bundled: int) -> None:
        super().__init__(link)
        self.bundled = bundled

    def bundle_max_file(self) -> int:
        return self.bundled


class StopsBundling(BundlingSim):
    """Bundles at the start only: as the engine's executor says once a server refuses the helper."""

    def bundle_max_file(self) -> int:
        asked, self.bundled = self.bundled, 0
        return asked


def size_table(sizes) -> pa.Table:
    """A manifest of files of `sizes` (sorted), named f000000, f000001, ..."""
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))
    return pa.table({"path": [f"f{i:06d}" for i in range(sizes.size)], "size": sizes, "mtime": np.zeros(sizes.size)})
