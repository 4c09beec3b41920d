"""What a transfer reports: per-file outcomes and per-chunk totals."""

from __future__ import annotations

from dataclasses import dataclass, field

from .params import TransferParams


@dataclass
class FileOutcome:
    path: str  # relative to the transfer root, POSIX separators
    size: int
    bytes_moved: int = 0
    seconds: float = 0.0
    ok: bool = False
    error: str | None = None
    skipped: bool = False  # already complete at the destination (resume)


@dataclass
class ChunkResult:
    chunk_id: str
    params: TransferParams
    files: int = 0
    bytes: int = 0  # payload bytes of the files in the chunk
    bytes_moved: int = 0  # bytes actually sent (re-sends counted)
    seconds: float = 0.0
    outcomes: list[FileOutcome] = field(default_factory=list)
    resumed: int = 0  # files continued from bytes already at the destination
    retried: int = 0  # files that needed more than one attempt
    bytes_resent: int = 0  # bytes sent again because an attempt failed
    # time.monotonic() when the chunk began: Multi-Chunk runs chunks at once, so a
    # report cannot place them on a timeline by adding up their durations.
    started: float = 0.0
    transport: str = ""  # how the files travelled, where not the session's usual way (bundles)

    @property
    def throughput_mbit(self) -> float:
        """Payload rate in Mbit/s (10^6 bits), the unit of every report."""
        if self.seconds <= 0:
            return 0.0
        return self.bytes_moved * 8 / self.seconds / 1e6

    @property
    def failed(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if not o.ok]

    def summary(self, origin: float | None = None) -> dict:
        """Plain values for JSON; with `origin` (a monotonic time), also `start_s`: when the chunk began after it."""
        out = {
            "id": self.chunk_id,
            "files": self.files,
            "bytes": self.bytes,
            "pp": self.params.pp,
            "p": self.params.p,
            "cc": self.params.cc,
            "seconds": round(self.seconds, 3),
            "throughput_mbit": round(self.throughput_mbit, 2),
        }
        if origin is not None and self.started:
            out["start_s"] = round(self.started - origin, 3)
        if self.transport:
            out["transport"] = self.transport
        return out
