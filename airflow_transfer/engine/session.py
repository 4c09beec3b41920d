"""What moves a copy: the one surface job.py, the tuning executors and the fall-back use.

Three sessions implement it: the pipelined engine for local <-> SFTP
(engine/transfer.py), the generic path for any pair of backends
(engine/backend_copy.py), and the fall-back over several protocols
(engine/fallback.py). The base class gives the answers a session without a
feature gives, so callers ask every session the same questions instead of
telling them apart; the first two move a chunk the same way (`perform`) and
differ only in the tasks they build, the mover beneath the runner and how
verification is attached.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Required, TypedDict, Unpack, cast

import pyarrow.compute as pc

from .. import manifest_schema as ms
from ..errors import TransferError
from ..manifest import Manifest, list_local
from ..paths import TEMP_SUFFIX, UNSAFE_NAME, check_relative, temp_name
from .accounting import Stats
from .control import Control
from .resume import plan as plan_resume
from .retry import RetryPolicy
from .runner import run_chunk
from .sftp_jobs import FileTask

if TYPE_CHECKING:
    import pyarrow as pa

    from ..protocols.endpoint import Endpoint
    from .params import TransferParams
    from .result import ChunkResult
    from .runner import Mover, Runner
    from .transfer import TransferSession


class ChunkPlace(TypedDict, total=False):
    """Where a chunk's files come from and go, and what an earlier attempt left of them."""

    src_root: Required[str]
    dst_root: Required[str]
    chunk_id: str  # default "chunk-0"
    modes: list[int] | None  # permission bits per file, in the table's order
    resume: dict[str, list] | None  # path -> byte ranges the journal holds (listing unchanged)


class SessionOptions(TypedDict, total=False):
    """What every session takes besides its endpoints."""

    stats: Stats | None  # progress counters (a fresh Stats when not given)
    skip_existing: bool  # skip files whose destination has the same size and mtime (default True)
    retry: RetryPolicy | None  # attempts, backoff and deadline (defaults when not given)
    journal: Any  # a store JournalWriter, or None
    verify: str | None  # checksum algorithm, None = no verification
    control: Control | None  # a fall-back's hooks (engine/control.py); default: none


class Session:
    """A session over a source and a destination."""

    direction: str  # upload, download, local, "<scheme>-><scheme>" or fallback
    remote: Endpoint | None  # the SFTP end the engine talks to, if any
    skip_existing: bool
    verify_mode = "file"  # how a verifying session checks files (the engine chooses per direction)
    pool: Any = None  # the SFTP connection pool, where the engine has one

    def __init__(self, src: Endpoint, dst: Endpoint, **opts: Unpack[SessionOptions]) -> None:
        self.src, self.dst = src, dst
        self.stats: Stats = opts.get("stats") or Stats()
        self.skip_existing: bool = opts.get("skip_existing", True)
        self.retry: RetryPolicy = opts.get("retry") or RetryPolicy()
        self.journal: Any = opts.get("journal")
        self.verify: str | None = opts.get("verify")
        self.control: Control = opts.get("control") or Control()
        self.switches: list[dict] = []  # protocol switches (a fall-back's)
        self.on_switch: Callable[[dict], None] | None = None
        self.on_runner: Callable[[Runner], None] | None = None  # sees each chunk's runner before it runs
        self.bandwidth_bps: float | None = None  # the link's, when known: balances block checksum threads
        self.resume_blocks: dict[str, list] = {}  # path -> journaled block digests (block mode)
        self.before_verify: Callable[[str], None] | None = None  # tests inject faults here
        # Paths an earlier phase of a fall-back sent whole without hearing the outcome (a bundle
        # group whose commit reply was lost): found in place with their size and mtime, they
        # landed (every path renames only after verifying and setting the mtime), not sent again.
        self.adopt: frozenset[str] = frozenset()
        self.verifier: Any = None

    def options(self) -> SessionOptions:
        """This session's options, for a session over the same copy (a sibling chunk's)."""
        return cast(SessionOptions, {name: getattr(self, name) for name in SessionOptions.__annotations__})

    # -- moving a chunk ------------------------------------------------------------
    def perform(self, files: pa.Table, params: TransferParams, **place: Unpack[ChunkPlace]) -> ChunkResult:
        """Move `files` with `params`: the one way through the runner (engine/runner.py)."""
        resume = place.get("resume")
        params = self.chunk_params(params)
        tasks = self.tasks(files, place["src_root"], place["dst_root"], place.get("modes"))
        plan_resume(tasks, resume, params.p)
        return run_chunk(
            self,
            tasks,
            params,
            chunk_id=place.get("chunk_id", "chunk-0"),
            dst_root=place["dst_root"],
            attach=lambda runner: self.attach(runner, resume),
        )

    def chunk_params(self, params: TransferParams) -> TransferParams:
        """The parameters this session can use of those asked for."""
        return params

    def tasks(self, files: pa.Table, src_root: str, dst_root: str, modes: list[int] | None) -> list[FileTask]:
        """One FileTask per row, every path checked to stay inside its root."""
        paths = files[ms.PATH].to_pylist()
        # One search of the whole column (as Manifest.validate does); a name it flags is found
        # and reported by check_relative itself. Names that pass are never empty, so each
        # joins its roots as join_path would, without a call per path (100,000 files: 0.1 s).
        if pc.any(pc.match_substring_regex(files[ms.PATH], UNSAFE_NAME)).as_py():
            for rel in paths:
                check_relative(rel, self.src.display)
        sizes = files[ms.SIZE].to_pylist()
        mtimes = files[ms.MTIME].to_pylist()
        src_pre, dst_pre = _prefix(src_root), _prefix(dst_root)
        plain_temp = type(self).temp_for is Session.temp_for
        out = []
        for i, rel in enumerate(paths):
            dst = dst_pre + rel
            if plain_temp:
                head, sep, tail = dst.rpartition("/")
                tmp = f"{head}{sep}.{tail}{TEMP_SUFFIX}"  # temp_name's
            else:
                tmp = self.temp_for(dst)
            mode = modes[i] if modes else 0o644
            out.append(FileTask(rel, int(sizes[i]), float(mtimes[i]), src_pre + rel, dst, tmp, mode))
        return out

    def temp_for(self, dst: str) -> str:
        """Where a file is written until it is complete (renamed into place then)."""
        return temp_name(dst)

    def already_there(self, tasks: list[FileTask]) -> set[int]:
        """Indices of files whose destination has the same size and mtime (skipped)."""
        return set()

    def attach(self, runner: Runner, resume: dict[str, list] | None) -> None:
        """Wire the session's verifier to a chunk's runner, if it verifies that way."""

    def mover(self, runner: Runner) -> Mover:
        raise NotImplementedError

    def ensure_dirs(self, dst_root: str, rel_dirs: list[str]) -> None:
        raise NotImplementedError

    def claim_fresh_dirs(self) -> set[str]:
        """Directories this session created since the last claim (normalised paths), and forget
        them. A chunk claims once before its ensure_dirs and once after: a file of the chunk whose
        directory that call created cannot be at the destination yet, so the chunk does not look
        for it there. A directory made earlier (a fall-back's earlier phase) is never fresh: another
        protocol may have put files in it since."""
        return set()

    def verify_summary(self) -> dict:
        raise NotImplementedError

    # -- defaults for what a session does not have -------------------------------------
    def list_source(self) -> Manifest:
        if not os.path.exists(self.src.path):
            raise TransferError("source does not exist", self.src.path, "check the source path")
        return list_local(self.src.path, self.walked_ahead())

    def walked_ahead(self) -> list[list] | None:
        """The local source's records, walked ahead of the copy (listing_ahead.LocalWalk), if any."""
        return None

    def warm(self, connections: int) -> None:
        """Open the first connections in the background while the copy lists and plans."""

    def bundle_max_file(self) -> int:
        """The largest file this session moves in bundles; 0: none (engine/bundle.py)."""
        return 0

    def drive_engine(self) -> TransferSession | None:
        """The pipelined engine session the tuning algorithms drive (Multi-Chunk), if any."""
        return None

    def complete(
        self, chunks: list[ChunkResult], files: pa.Table, params: TransferParams, **place: Unpack[ChunkPlace]
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

    def close(self) -> None:
        pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prefix(root: str) -> str:
    """What join_path puts before a non-empty name under `root`."""
    return root if not root or root.endswith("/") else root + "/"
