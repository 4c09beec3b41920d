"""What an algorithm needs from whatever moves the bytes.

Algorithms never touch sockets (docs/transfers.md, "The transfer primitive"): they plan chunks, hand
one to an executor, read the throughput back, and decide. Two levels:

1. `ChunkExecutor` - one call, one chunk, blocking::

       run_chunk(manifest_sorted, start, stop, params, chunk_id) -> ChunkResult

   moves rows [start, stop) of the size-sorted manifest with `params` (pp
   files in flight per connection, p connections per file, cc channels) and
   returns when every file of the range has an outcome. `result.seconds` is
   the wall time of the chunk and `result.bytes_moved` what went over the
   wire; the algorithms read `result.throughput_mbit`. Enough for fixed,
   globus, pcp, adaptive-cc and auto.

2. `SessionExecutor` - adds `open_session(manifest_sorted) -> ChunkSession`,
   for Multi-Chunk, which runs several chunks at once over one pool of
   channels:

       session.start(spec, channels)        begin spec's rows on `channels` channels
                                            (spec.params gives pp and p; cc is ignored)
       session.set_channels(chunk_id, n)    grow/shrink a running chunk (n >= 1);
                                            takes effect at the next file boundary
       session.wait_any() -> ChunkEvent     block until a chunk progresses or finishes
       session.close()                      stop everything still running

   Progress events come at the executor's own cadence (every second or so);
   exactly one `done` event is delivered per started chunk, carrying its
   ChunkResult (params.cc = its channel count when it finished).
   `wait_any` raises RuntimeError when nothing is running.

Executors without `open_session` still run MC: it then moves its chunks one
after another with all channels (see multichunk.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pyarrow as pa

from ..engine.params import TransferParams
from ..engine.result import ChunkResult
from .chunks import ChunkSpec


@dataclass(frozen=True)
class ChunkEvent:
    """Something happened to a running chunk.

    at: seconds since the session was opened (the executor's clock).
    bytes_done: payload bytes of the chunk finished so far (cumulative).
    result: set only when `done`.
    """

    chunk_id: str
    at: float
    bytes_done: int
    done: bool = False
    result: ChunkResult | None = None


@runtime_checkable
class ChunkExecutor(Protocol):
    def run_chunk(
        self, manifest_sorted: pa.Table, start: int, stop: int, params: TransferParams, chunk_id: str
    ) -> ChunkResult: ...


@runtime_checkable
class ChunkSession(Protocol):
    def start(self, spec: ChunkSpec, channels: int) -> None: ...

    def set_channels(self, chunk_id: str, channels: int) -> None: ...

    def wait_any(self) -> ChunkEvent: ...

    def close(self) -> None: ...


@runtime_checkable
class SessionExecutor(ChunkExecutor, Protocol):
    def open_session(self, manifest_sorted: pa.Table) -> ChunkSession: ...


def supports_sessions(executor: object) -> bool:
    return callable(getattr(executor, "open_session", None))


def bundled_up_to(executor: object) -> int:
    """The largest file the executor moves in bundles (many files to one stream per channel,
    engine/bundle.py); 0 when it moves none that way or does not say."""
    ask = getattr(executor, "bundle_max_file", None)
    return int(ask()) if callable(ask) else 0


def check_executor(executor: object) -> None:
    if not callable(getattr(executor, "run_chunk", None)):
        raise ValueError(
            f"executor {type(executor).__name__} has no run_chunk(manifest_sorted, start, stop, "
            "params, chunk_id); pass the engine's executor or a LinkSimulator"
        )
