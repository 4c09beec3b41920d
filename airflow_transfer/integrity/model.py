"""Time model of transfer + checksum: sequential, file-level and block-level pipelining.

Everything here comes from Liu, Jung, Kettimuthu, Sun, Towards Optimizing
Large-Scale Data Transfers with End-to-End Integrity Verification (paper 002
in docs/papers.md), section III:

* Transfer and checksum times are linear in the data size (their finding
  for md5sum and GridFTP), so the model needs two numbers: t, the time to
  transfer `unit` bytes, and c, the time to checksum `unit` bytes (the paper
  uses unit = 500 MB).
* Sequential: every file is sent, then checksummed: sum(T_i + C_i).
* Pipelined (file-level with files as the items, block-level with blocks):
  a two-stage pipeline in lock step, where item k+1 is sent while item k is
  checksummed and the next step starts when both are done:

      total = T_1 + sum_{k=1}^{n-1} max(T_{k+1}, C_k) + C_n

  This reproduces every cell of the paper's Table I, including the
  200t + 201c of file-level pipelining on the 10G-500M dataset (alternating
  10 GB and 500 MB files), which a freely flowing pipeline would not give.
  `buffered=True` instead models an unbounded queue between the stages
  (Johnson's two-machine flow shop): max_k (T_1 + .. + T_k + C_k + .. + C_n),
  a lower bound for what a deeper queue can reach.
* Section III.B: when checksumming dominates (t < c), split each block's
  checksum over n threads so c/n is close to t; `checksum_threads` picks n.

The block lists are built with NumPy so a manifest of millions of files
stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

PAPER_UNIT = 500 * 10**6  # paper 002 measures t and c per 500 MB


@dataclass(frozen=True)
class CostModel:
    """Linear costs: t seconds to send `unit` bytes, c seconds to checksum them.

    block_overhead: fixed seconds added to each block's transfer (a request
    round trip, say); paper 002 removed GridFTP's per-block startup from its
    figures, see `startup_overhead`. threads: checksum threads splitting each
    block (section III.B), assumed to scale ideally.
    """

    t: float
    c: float
    unit: int = PAPER_UNIT
    block_overhead: float = 0.0
    threads: int = 1

    def __post_init__(self) -> None:
        if self.t < 0 or self.c < 0 or self.block_overhead < 0:
            raise ValueError(f"times must be >= 0 seconds (t={self.t}, c={self.c}, overhead={self.block_overhead})")
        if self.unit <= 0:
            raise ValueError(f"unit must be a positive number of bytes (got {self.unit})")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1 (got {self.threads})")

    def transfer_s(self, nbytes: np.ndarray) -> np.ndarray:
        return np.asarray(nbytes, dtype=np.float64) / self.unit * self.t + self.block_overhead

    def checksum_s(self, nbytes: np.ndarray) -> np.ndarray:
        return np.asarray(nbytes, dtype=np.float64) / self.unit * self.c / self.threads


def _sizes(file_sizes: Iterable[int] | np.ndarray) -> np.ndarray:
    sizes = np.asarray(file_sizes, dtype=np.int64)
    if sizes.ndim != 1:
        raise ValueError("file sizes must be a flat sequence of byte counts")
    if sizes.size and sizes.min() < 0:
        raise ValueError("file sizes must be >= 0 bytes")
    return sizes


def split_blocks(file_sizes: Iterable[int] | np.ndarray, block_size: int, whole_files_up_to: int = 0) -> np.ndarray:
    """Block sizes in transfer order: each file cut into block_size pieces, the last one short.

    Files of at most `whole_files_up_to` bytes travel as one block (paper
    002's Table I sends its 500 MB files whole even with 100 MB blocks).
    Empty files carry no data and yield no block.
    """
    if block_size <= 0:
        raise ValueError(f"block size must be a positive number of bytes (got {block_size})")
    sizes = _sizes(file_sizes)
    sizes = sizes[sizes > 0]
    whole = sizes <= whole_files_up_to
    counts = np.where(whole, 1, -(-sizes // block_size))
    blocks = np.full(int(counts.sum()), block_size, dtype=np.int64)
    last = np.cumsum(counts) - 1
    blocks[last] = sizes - (counts - 1) * block_size
    return blocks


def pipeline_time(
    transfer_s: Sequence[float] | np.ndarray, checksum_s: Sequence[float] | np.ndarray, buffered: bool = False
) -> float:
    """Seconds for a two-stage transfer -> checksum pipeline over items in order.

    Lock step (default, paper 002's model): T_1 + sum max(T_{k+1}, C_k) + C_n.
    buffered: unbounded queue between stages, max_k (sum T_1..k + sum C_k..n).
    """
    t = np.asarray(transfer_s, dtype=np.float64)
    c = np.asarray(checksum_s, dtype=np.float64)
    if t.shape != c.shape:
        raise ValueError("transfer and checksum times must have one entry per item each")
    if t.size == 0:
        return 0.0
    if buffered:
        done_sending = np.cumsum(t)
        left_to_check = np.cumsum(c[::-1])[::-1]
        return float(np.max(done_sending + left_to_check))
    return float(t[0] + np.maximum(t[1:], c[:-1]).sum() + c[-1])


def sequential_time(file_sizes: Iterable[int] | np.ndarray, model: CostModel) -> float:
    """Send each file, then checksum it, one after the other."""
    sizes = _sizes(file_sizes)
    sizes = sizes[sizes > 0]
    return float((model.transfer_s(sizes) + model.checksum_s(sizes)).sum())


def file_level_time(file_sizes: Iterable[int] | np.ndarray, model: CostModel, buffered: bool = False) -> float:
    """Checksum file i while file i+1 is sent (Globus' file-level pipelining)."""
    sizes = _sizes(file_sizes)
    sizes = sizes[sizes > 0]
    return pipeline_time(model.transfer_s(sizes), model.checksum_s(sizes), buffered)


def block_level_time(
    file_sizes: Iterable[int] | np.ndarray,
    block_size: int,
    model: CostModel,
    whole_files_up_to: int = 0,
    buffered: bool = False,
) -> float:
    """Checksum block i while block i+1 is sent, across file boundaries."""
    blocks = split_blocks(file_sizes, block_size, whole_files_up_to)
    return pipeline_time(model.transfer_s(blocks), model.checksum_s(blocks), buffered)


def startup_overhead(t_blocks: float, t_whole: float, n_blocks: int) -> float:
    """Per-block startup cost, paper 002 eq. (1): (T1 - T2) / (n - 1).

    T1: time to send n blocks as separate transfers; T2: time to send them as
    one file of n blocks.
    """
    if n_blocks < 2:
        raise ValueError(f"need at least 2 blocks to separate the startup cost (got {n_blocks})")
    return (t_blocks - t_whole) / (n_blocks - 1)


def checksum_threads(t: float, c: float, max_threads: int) -> int:
    """Checksum threads that bring a block's checksum time down to its transfer time.

    Paper 002 section III.B: the pipeline is as fast as its slower stage, so
    in the checksum-dominant case (t < c) split the checksum over
    ceil(c / t) threads; that made Cooley's t = 0.5 s, c = 1 s pipeline run
    with 2 threads at nearly twice the speed.
    """
    if max_threads < 1:
        raise ValueError(f"max_threads must be >= 1 (got {max_threads})")
    if t <= 0 or c <= 0:
        return 1  # nothing measured: no basis for more than one thread
    if c <= t:
        return 1  # transfer-dominant: extra checksum threads would only sit idle
    # A hair of tolerance so c/t = 2.0000001 from noisy timing does not ask for 3.
    return min(max_threads, math.ceil(c / t - 1e-6))


@dataclass(frozen=True)
class VerifyPlan:
    mode: str  # "sequential", "file" or "block"
    block_size: int  # 0 unless mode == "block"
    threads: int
    seconds: float  # predicted
    reason: str
    predictions: dict[str, float] = field(default_factory=dict)


DEFAULT_BLOCK_CANDIDATES = (16 * 2**20, 64 * 2**20, 256 * 2**20)


def choose_verify_mode(
    file_sizes: Iterable[int] | np.ndarray,
    model: CostModel,
    block_sizes: Sequence[int] = DEFAULT_BLOCK_CANDIDATES,
    max_threads: int = 1,
) -> VerifyPlan:
    """The mode, block size and checksum thread count with the least predicted time."""
    sizes = _sizes(file_sizes)
    if not (sizes > 0).any():
        return VerifyPlan("sequential", 0, 1, 0.0, "no bytes to move: nothing to overlap")
    threads = checksum_threads(model.t, model.c, max_threads)
    tuned = CostModel(model.t, model.c, model.unit, model.block_overhead, threads)
    predictions = {
        "sequential": sequential_time(sizes, model),
        "file": file_level_time(sizes, model),
    }
    for size in block_sizes:
        predictions[f"block:{size}"] = block_level_time(sizes, size, tuned)
    best = min(predictions, key=predictions.__getitem__)
    seconds = predictions[best]
    others = ", ".join(f"{k} {v:.1f}s" for k, v in predictions.items() if k != best)
    if best == "sequential":
        return VerifyPlan(
            "sequential", 0, 1, seconds, f"no overlap pays off here ({seconds:.1f}s vs {others})", predictions
        )
    if best == "file":
        return VerifyPlan(
            "file", 0, 1, seconds, f"file-level pipelining predicted {seconds:.1f}s ({others})", predictions
        )
    block = int(best.split(":")[1])
    return VerifyPlan(
        "block",
        block,
        threads,
        seconds,
        f"block-level pipelining with {block}-byte blocks and {threads} checksum thread(s) "
        f"predicted {seconds:.1f}s ({others})",
        predictions,
    )


__all__ = [
    "DEFAULT_BLOCK_CANDIDATES",
    "PAPER_UNIT",
    "CostModel",
    "VerifyPlan",
    "block_level_time",
    "checksum_threads",
    "choose_verify_mode",
    "file_level_time",
    "pipeline_time",
    "sequential_time",
    "split_blocks",
    "startup_overhead",
]
