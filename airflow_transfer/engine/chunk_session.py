"""Several chunks at once on the real engine: the ChunkSession of tuning/executor.py.

Multi-Chunk (tuning/multichunk.py) starts its Small, Middle, Large and Huge
chunks together and moves channels between them as they finish. Here each
started chunk is one `TransferSession.perform` on its own thread, over a
sibling session: same endpoints, connection pool, journal and totals as the
copy's session, but a verifier of its own, because a verifier calls back
into exactly one chunk's runner (renames, repairs, block bookkeeping keyed
by the chunk's file index). `set_channels` changes the number of the
chunk's worker threads while it runs (Runner.set_workers): more start at
once, surplus ones leave after the files they have in flight.

Events: every `PROGRESS_INTERVAL` seconds a progress event per running chunk
with the payload bytes it has at the destination (acknowledged writes,
skipped and resumed files; re-sent bytes not counted twice beyond the
chunk's size), and exactly one done event per chunk with its ChunkResult
(params.cc = its channels at the end). An exception out of a chunk's
perform (the destination cannot be created, ...) is raised by `wait_any`,
as the sequential engine would raise it; failed files are outcomes, as
always, and do not stop the other chunks.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import replace
from typing import Any

import pyarrow as pa

from .. import manifest_schema as ms
from ..tuning.chunks import ChunkSpec
from ..tuning.executor import ChunkEvent
from .accounting import Stats
from .result import ChunkResult, FileOutcome
from .transfer import TransferSession

PROGRESS_INTERVAL = 1.0


class _ChunkStats(Stats):
    """One chunk's bytes and files, passed on to the copy's totals (the progress line)."""

    def __init__(self, parent: Stats) -> None:
        super().__init__()
        self.parent = parent

    def add_total(self, files: int, nbytes: int) -> None:
        super().add_total(files, nbytes)
        self.parent.add_total(files, nbytes)

    def add_bytes(self, n: int) -> None:
        super().add_bytes(n)
        self.parent.add_bytes(n)

    def add_skipped_bytes(self, n: int) -> None:
        super().add_skipped_bytes(n)
        self.parent.add_skipped_bytes(n)

    def file_finished(self, ok: bool, skipped: bool = False) -> None:
        super().file_finished(ok, skipped)
        self.parent.file_finished(ok, skipped)

    def files_finished(self, files: int) -> None:
        super().files_finished(files)
        self.parent.files_finished(files)


class _Chunk:
    def __init__(self, spec: ChunkSpec, channels: int, session: TransferSession) -> None:
        self.spec, self.channels, self.session = spec, channels, session
        self.stats: _ChunkStats = session.stats  # type: ignore[assignment]
        self.runner = None  # the chunk's Runner, once perform has made it
        self.thread: threading.Thread | None = None
        self.stopping = False
        self.done = False
        self.error: BaseException | None = None

    @property
    def bytes_done(self) -> int:
        return min(self.stats.bytes_done, self.spec.bytes)


class EngineChunkSession:
    """ChunkSession over a TransferSession (see the module docstring)."""

    def __init__(self, executor: Any, manifest_sorted: pa.Table, interval: float = PROGRESS_INTERVAL) -> None:
        self.x = executor  # job.EngineExecutor: session, roots, modes, resume, adjust
        self.manifest = manifest_sorted
        self.interval = interval
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._events: queue.Queue[ChunkEvent] = queue.Queue()
        self._chunks: dict[str, _Chunk] = {}
        self._undelivered = 0  # started chunks whose done event wait_any has not returned yet
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="mc-progress", daemon=True)
        self._ticker.start()

    # -- ChunkSession -------------------------------------------------------------------
    def start(self, spec: ChunkSpec, channels: int) -> None:
        _check_channels(spec.id, channels)
        if not 0 <= spec.start <= spec.stop <= self.manifest.num_rows:
            raise ValueError(
                f"chunk {spec.id}: rows [{spec.start}, {spec.stop}) are outside the manifest "
                f"({self.manifest.num_rows} rows)"
            )
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("start() on a closed chunk session")
            if spec.id in self._chunks:
                raise ValueError(f"chunk {spec.id} was already started in this session")
            sib = self.x.session.sibling()
            sib.stats = _ChunkStats(self.x.session.stats)
            chunk = self._chunks[spec.id] = _Chunk(spec, channels, sib)
            sib.on_runner = lambda runner, c=chunk: self._attach(c, runner)
            self._undelivered += 1
            chunk.thread = threading.Thread(target=self._run, args=(chunk,), name=f"mc-{spec.id}", daemon=True)
            self._show_params()
        chunk.thread.start()

    def set_channels(self, chunk_id: str, channels: int) -> None:
        _check_channels(chunk_id, channels)
        with self._lock:
            chunk = self._chunks.get(chunk_id)
            if chunk is None:
                raise ValueError(f"chunk {chunk_id} was never started in this session")
            if chunk.done:
                # It finished after the caller's last wait_any(); its event is on its way, and a
                # rebalance racing it has nothing left to change.
                return
            chunk.channels = channels
            runner = chunk.runner
            self._show_params()
        if runner is not None:
            runner.set_workers(channels)

    def wait_any(self) -> ChunkEvent:
        with self._lock:
            if not self._undelivered and self._events.empty():
                raise RuntimeError("wait_any() with no chunk running in this session; start() one first")
        event = self._events.get()
        if event.done:
            with self._lock:
                self._undelivered -= 1
                error = self._chunks[event.chunk_id].error
            if error is not None:
                raise error
        return event

    def close(self) -> None:
        """Stop what still runs: workers leave at their next file boundary (files in flight are
        finished and journaled, files not started stay not done), then wait for them."""
        with self._lock:
            self._closed.set()
            chunks = list(self._chunks.values())
            for c in chunks:
                c.stopping = True
                runner = c.runner if not c.done else None
                if runner is not None:
                    runner.stop()
        for c in chunks:
            if c.thread is not None:
                c.thread.join()
        self._ticker.join()

    # -- internals ------------------------------------------------------------------------
    def _attach(self, chunk: _Chunk, runner) -> None:
        """Runs on the chunk's thread inside perform, before its workers start."""
        with self._lock:
            chunk.runner = runner
            if chunk.stopping:
                runner.stop()
            elif chunk.channels != runner.wanted:
                runner.set_workers(chunk.channels)  # moved while the chunk was still being prepared

    def _run(self, chunk: _Chunk) -> None:
        spec, x = chunk.spec, self.x
        params = x.adjust(replace(spec.params, cc=chunk.channels))
        rows = self.manifest.slice(spec.start, spec.stop - spec.start)
        modes = x.modes[spec.start : spec.stop] if x.modes is not None else None
        try:
            result = chunk.session.perform(
                rows, params, src_root=x.src_root, dst_root=x.dst_root, chunk_id=spec.id, modes=modes, resume=x.resume
            )
        except BaseException as exc:  # noqa: BLE001 - handed to wait_any, which raises it
            chunk.error = exc
            result = _failed(spec, rows, params, exc)
        finally:
            try:
                chunk.session.close()  # its verifier; the pool stays with the copy's session
            except Exception as exc:  # noqa: BLE001 - a verifier that will not stop must not hang MC
                chunk.error = chunk.error or exc
        with self._lock:
            result.params = replace(result.params, cc=chunk.channels)
            chunk.done = True
            self._events.put(
                ChunkEvent(spec.id, time.monotonic() - self.t0, chunk.bytes_done, done=True, result=result)
            )
            self._show_params()

    def _tick(self) -> None:
        while not self._closed.wait(self.interval):
            with self._lock:
                at = time.monotonic() - self.t0
                for c in self._chunks.values():
                    if not c.done:
                        self._events.put(ChunkEvent(c.spec.id, at, c.bytes_done))

    def _show_params(self) -> None:
        """The progress line's knobs: one value per running chunk, in start order (lock held)."""
        running = [c for c in self._chunks.values() if not c.done]
        if not running:
            return
        self.x.session.stats.params = {
            "pp": "/".join(str(c.spec.params.pp) for c in running),
            "p": "/".join(str(c.spec.params.p) for c in running),
            "cc": "/".join(str(c.channels) for c in running),
        }


def _failed(spec: ChunkSpec, rows: pa.Table, params, exc: BaseException) -> ChunkResult:
    message = getattr(exc, "message", None) or f"{exc.__class__.__name__}: {exc}"
    paths, sizes = rows[ms.PATH].to_pylist(), rows[ms.SIZE].to_pylist()
    return ChunkResult(
        spec.id,
        params,
        files=len(paths),
        bytes=sum(sizes),
        outcomes=[FileOutcome(p, int(s), ok=False, error=message) for p, s in zip(paths, sizes)],
    )


def _check_channels(chunk_id: str, channels: int) -> None:
    if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
        raise ValueError(f"chunk {chunk_id}: channels must be a whole number >= 1 (got {channels!r})")
