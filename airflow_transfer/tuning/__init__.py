"""Pure tuning decisions: models, chunk planners, algorithms, a link simulator.

Imports nothing from Airflow and touches no sockets. Entry points, all
importable from this package (`get_algorithm`, `LinkInfo`, `sort_manifest`):

    algo = get_algorithm("auto")
    specs = algo.plan(sort_manifest(table), LinkInfo(rtt_s=0.05, bandwidth_bps=1e9))
    results = algo.run(sorted_table, link, executor)   # executor: see tuning/executor.py

Names are resolved lazily so `import airflow_transfer.tuning.<module>` stays
cheap and the package can hold modules with other dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LinkInfo": "models",
    "bdp": "models",
    "pp_level": "models",
    "pp_param": "models",
    "mathis_bps": "models",
    "ChunkSpec": "chunks",
    "sort_manifest": "dataset",
    "SortedSizes": "dataset",
    "ChunkEvent": "executor",
    "ChunkExecutor": "executor",
    "ChunkSession": "executor",
    "SessionExecutor": "executor",
    "Algorithm": "base",
    "ALGORITHMS": "registry",
    "get_algorithm": "registry",
    "LinkSimulator": "simulator",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
