"""The transfer summary: what `copy --json` prints, the operators return as XCom and the store keeps.

One builder for its three shapes, so the keys, their order and their types cannot drift apart:

    copy      one whole copy (job.run_copy): the CLI and TunedTransferOperator
    chunk     one chunk of a distributed copy (chunked.run_chunk): ChunkTransferOperator,
              plus the ``host`` and ``pid`` of the worker that ran it
    transfer  all chunks journalled under one key (chunked.transfer_summary):
              VerifyTransferOperator, plus the journal's per-state counts

The fields are a stable interface (docs/summary.md, docs/durability.md "Summary fields"):
add keys at the end of a shape, never rename or drop one. No Airflow imports here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .engine.result import ChunkResult

Kind = Literal["copy", "chunk", "transfer"]

# Every key a summary may carry, in output order; a shape emits the ones it lists.
ORDER = tuple(
    "files bytes seconds throughput_mbit algorithm src dst direction files_skipped bytes_moved skipped_entries verify"
    " chunks protocol_switches ssh_client tuning failed journal files_resumed files_retried bytes_resent transfer_key"
    " transfer_id store host pid manifest_digest connections_lost".split()
)
_COMMON = set(
    "files bytes seconds throughput_mbit algorithm src dst files_skipped bytes_moved verify chunks protocol_switches"
    " failed transfer_key transfer_id".split()
)
_RETRIES = {"files_resumed", "files_retried", "bytes_resent", "connections_lost"}
SHAPES: dict[str, tuple[str, ...]] = {
    kind: tuple(k for k in ORDER if k in keys)
    for kind, keys in {
        "copy": _COMMON
        | _RETRIES
        | {"direction", "skipped_entries", "ssh_client", "tuning", "store", "manifest_digest"},
        "chunk": _COMMON | _RETRIES | {"direction", "host", "pid"},
        "transfer": _COMMON | {"tuning", "journal", "store", "manifest_digest"},
    }.items()
}


def throughput_mbit(bytes_moved: int, seconds: float) -> float:
    """Payload rate in Mbit/s (10^6 bits), rounded as every report shows it; 0.0 for no time."""
    return round(bytes_moved * 8 / seconds / 1e6, 2) if seconds > 0 else 0.0


@dataclass
class TransferSummary:
    """The figures of one summary; ``as_dict()`` gives the JSON object of its shape (`kind`).

    `seconds` is the unrounded wall time; the output rounds it and derives ``throughput_mbit``
    from it and `bytes_moved`. Fields a shape does not list are left out of its output."""

    kind: Kind
    files: int
    bytes: int
    seconds: float
    algorithm: str
    src: str
    dst: str
    bytes_moved: int = 0
    files_skipped: int = 0
    verify: dict = field(default_factory=dict)
    chunks: list[dict] = field(default_factory=list)
    protocol_switches: list[dict] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    transfer_key: str | None = None
    transfer_id: int | None = None
    direction: str | None = None
    skipped_entries: dict = field(default_factory=dict)
    ssh_client: str | None = None
    tuning: dict = field(default_factory=dict)
    journal: dict = field(default_factory=dict)
    files_resumed: int = 0
    files_retried: int = 0
    bytes_resent: int = 0
    store: str | None = None  # masked URL
    host: str | None = None
    pid: int | None = None
    manifest_digest: str | None = None  # Manifest.digest() of the listing the copy worked from
    connections_lost: int = 0  # SSH connections that failed and were replaced (protocols/pool.py)
    server: dict | None = None  # copy: what the SFTP server reported, after the shape's keys when known
    extra: dict[str, Any] = field(default_factory=dict)  # session-specific sections, last (replicas, fall-back)

    def __post_init__(self) -> None:
        if self.kind not in SHAPES:
            raise ValueError(f"unknown summary kind {self.kind!r}; one of {', '.join(SHAPES)}")

    @classmethod
    def from_results(
        cls, kind: Kind, results: Iterable[ChunkResult], *, origin: float | None = None, **figures: Any
    ) -> TransferSummary:
        """A summary whose per-file counts, bytes moved and chunk rows come from engine results;
        `origin` (a monotonic time) adds each chunk's ``start_s``; `figures` fill the rest."""
        results = list(results)
        outcomes = [o for r in results for o in r.outcomes]
        return cls(
            kind,
            bytes_moved=sum(r.bytes_moved for r in results),
            files_skipped=sum(1 for o in outcomes if o.skipped),
            chunks=[r.summary(origin=origin) for r in results],
            failed=[{"path": o.path, "error": o.error} for o in outcomes if not o.ok],
            files_resumed=sum(r.resumed for r in results),
            files_retried=sum(r.retried for r in results),
            bytes_resent=sum(r.bytes_resent for r in results),
            **figures,
        )

    def value(self, key: str) -> Any:
        if key == "seconds":
            return round(self.seconds, 3)
        if key == "throughput_mbit":
            return throughput_mbit(self.bytes_moved, self.seconds)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        out = {key: self.value(key) for key in SHAPES[self.kind]}
        if self.server is not None:
            out["server"] = self.server
        out.update(self.extra)
        return out
