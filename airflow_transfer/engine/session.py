"""What moves a copy: the one surface job.py, the tuning executors and the fall-back use.

Three sessions implement it: the pipelined engine for local <-> SFTP
(engine/transfer.py), the generic path for any pair of backends
(engine/backend_copy.py), and the fall-back over several protocols
(engine/fallback.py). `SessionBase` gives the answers a session without that
feature gives, so callers ask every session the same questions instead of
telling them apart.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import TransferError
from ..manifest import Manifest, list_local

if TYPE_CHECKING:
    import pyarrow as pa

    from ..protocols.endpoint import Endpoint
    from .accounting import Stats
    from .control import Control
    from .params import TransferParams
    from .result import ChunkResult
    from .retry import RetryPolicy
    from .runner import Mover, Runner
    from .transfer import TransferSession


class Session(Protocol):
    src: Endpoint
    dst: Endpoint
    stats: Stats
    retry: RetryPolicy
    journal: Any  # a store JournalWriter, or None
    verify: str | None  # checksum algorithm, None = no verification
    verifier: Any
    control: Control
    direction: str  # upload, download, local, or "<scheme>-><scheme>"
    remote: Endpoint | None  # the SFTP end the engine talks to, if any
    skip_existing: bool
    verify_mode: str
    pool: Any  # the SFTP connection pool, where the engine has one
    before_verify: Callable[[str], None] | None  # tests inject faults here
    on_runner: Callable[[Runner], None] | None
    switches: list[dict]  # protocol switches (a fall-back's)
    on_switch: Callable[[dict], None] | None
    bandwidth_bps: float | None
    resume_blocks: dict[str, list]

    def list_source(self) -> Manifest: ...
    def warm(self, connections: int) -> None: ...
    def ensure_dirs(self, dst_root: str, rel_dirs: list[str]) -> None: ...
    def perform(
        self,
        files: pa.Table,
        params: TransferParams,
        *,
        src_root: str,
        dst_root: str,
        chunk_id: str = "chunk-0",
        modes: list[int] | None = None,
        resume: dict[str, list] | None = None,
    ) -> ChunkResult: ...
    def drive_engine(self) -> TransferSession | None: ...
    def complete(
        self, chunks: list[ChunkResult], files: pa.Table, params: TransferParams, **kw: Any
    ) -> list[ChunkResult]: ...
    def time_left(self) -> float: ...
    def mover(self, runner: Runner) -> Mover: ...
    def verify_summary(self) -> dict: ...
    def server_summary(self) -> tuple[dict | None, list[str]]: ...
    def summary_extra(self) -> dict: ...
    def close(self) -> None: ...
    def __enter__(self) -> Session: ...
    def __exit__(self, *exc: object) -> None: ...


class SessionBase:
    """Defaults for what a session does not have: no warm-up, no protocol switches, no remote
    server to describe, nothing left over for another protocol."""

    src: Endpoint
    control: Control
    retry: RetryPolicy
    verify_mode = "file"  # how a verifying session checks files (the engine chooses per direction)
    pool: Any = None  # the SFTP connection pool, where the engine has one

    def __init__(self) -> None:
        self.switches: list[dict] = []
        self.on_switch: Callable[[dict], None] | None = None
        self.on_runner: Callable[[Runner], None] | None = None  # sees each chunk's runner before it runs
        self.bandwidth_bps: float | None = None  # the link's, when known: balances block checksum threads
        self.resume_blocks: dict[str, list] = {}  # path -> journaled block digests (block mode)
        self.before_verify: Callable[[str], None] | None = None
        self.verifier: Any = None

    def list_source(self) -> Manifest:
        if not os.path.exists(self.src.path):
            raise TransferError("source does not exist", self.src.path, "check the source path")
        return list_local(self.src.path)

    def warm(self, connections: int) -> None:
        """Open the first connections in the background while the copy lists and plans."""

    def drive_engine(self) -> TransferSession | None:
        """The pipelined engine session the tuning algorithms drive (Multi-Chunk), if any."""
        return None

    def complete(
        self, chunks: list[ChunkResult], files: pa.Table, params: TransferParams, **kw: Any
    ) -> list[ChunkResult]:
        """After the tuning algorithm ran: carry what it left (a fall-back's business)."""
        return chunks

    def time_left(self) -> float:
        """Seconds the copy may still spend here: none once a fall-back abandons this protocol."""
        return 0.0 if self.control.aborted() else self.retry.time_left()

    def server_summary(self) -> tuple[dict | None, list[str]]:
        """What the remote server turned out to support, and the decisions that forced."""
        return None, []

    def summary_extra(self) -> dict:
        return {}

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass
