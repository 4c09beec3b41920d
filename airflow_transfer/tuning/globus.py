"""`globus`: Globus Online's static heuristic, the baseline of paper 000.

Paper 000 (Yildirim, Arslan, Kim, Kosar, Application-Level Optimization of Big
Data Transfers Through Pipelining, Parallelism and Concurrency, IEEE TCC 2016)
section 1, with paper 001 (Kim, Yildirim, Kosar, A Flexible Client for
GridFTP-based Data Scheduling) section 2 naming the three groups by average size
(docs/papers.md):

    more than 100 files averaging under 50 MB  -> pipelining 20, parallelism 2
    average over 250 MB                        -> pipelining  5, parallelism 8
    anything else                              -> pipelining 10, parallelism 4
    concurrency 2 in every case

One chunk, parameters from file count and average size only - never from the
link, which is the weakness the paper's algorithms address. MB is 10^6 bytes.
The pipelining figures are GridFTP levels, so files in flight are one more
(models.pp_param).
"""

from __future__ import annotations

from ..engine.params import TransferParams
from .base import StaticAlgorithm
from .chunks import ChunkSpec, make_spec
from .dataset import SortedSizes
from .models import pp_param

MB = 1_000_000
MANY_FILES = 100
SMALL_AVG = 50 * MB
LARGE_AVG = 250 * MB


def globus_params(files: int, mean_size: float) -> tuple[TransferParams, str]:
    """The Globus Online rule; returns the parameters and which case applied."""
    if files > MANY_FILES and mean_size < SMALL_AVG:
        return TransferParams(pp=pp_param(20), p=2, cc=2), "many small files"
    if mean_size > LARGE_AVG:
        return TransferParams(pp=pp_param(5), p=8, cc=2), "large files"
    return TransferParams(pp=pp_param(10), p=4, cc=2), "other"


class Globus(StaticAlgorithm):
    name = "globus"

    def __init__(self) -> None:
        self.opts = {}

    def _specs(self, sizes: SortedSizes) -> list[ChunkSpec]:
        n = len(sizes)
        if n == 0:
            return []
        params, _ = globus_params(n, sizes.mean(0, n))
        return [make_spec(sizes, "globus.001", 0, n, params)]
