"""The Store: one object per process over the project's database."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from ..errors import TransferError
from . import journal, transfers
from . import protocols as hp
from . import tuning_library as tl
from .closing import Closing
from .coltypes import utcnow
from .config import mask_url, resolve_store_url
from .connection import DEFAULT_BUSY_TIMEOUT_MS, make_engine, run_transaction
from .errors import StoreError
from .lease import Heartbeat
from .migrations import migrate
from .records import ChunkRecord, TransferRecord
from .schema import HEARTBEAT_INTERVAL_S, LEASE_S
from .writer import DEFAULT_MAX_DELAY_MS, DEFAULT_MAX_EVENTS, JournalWriter, ListingWrite

if TYPE_CHECKING:
    from ..engine.result import ChunkResult

T = TypeVar("T")


def _forget_pool(engine_ref: weakref.ReferenceType[Engine]) -> None:
    engine = engine_ref()
    if engine is not None:
        engine.dispose(close=False)


class Store(Closing):
    """Transfers, chunks and the per-file journal (later: tuning and host-protocol libraries).

    Open with ``Store.open(url)``; it migrates the schema first. Thread-safe;
    one per process is enough (it holds a connection pool).
    """

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self._url = url  # holds the password: never log it, use masked_url
        self.schema_version = 0  # set by open()
        # A forked child (Airflow's LocalExecutor, Celery prefork) must not use
        # the parent's pooled connections: give it an empty pool, leave the
        # parent's sockets alone (SQLAlchemy's "using pools with multiprocessing").
        engine_ref = weakref.ref(engine)
        os.register_at_fork(after_in_child=lambda: _forget_pool(engine_ref))

    @classmethod
    def open(cls, url: str | None = None, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS) -> Store:
        """Open (creating and migrating as needed) the store at ``url`` — see config.resolve_store_url."""
        resolved = resolve_store_url(url)
        store = cls(make_engine(resolved, busy_timeout_ms=busy_timeout_ms), resolved)
        try:
            store.schema_version = migrate(store.engine, url_for_errors=resolved)
        except BaseException:
            store.close()
            raise
        return store

    @property
    def masked_url(self) -> str:
        return mask_url(self._url)

    @property
    def backend(self) -> str:
        """'sqlite' or 'postgresql'."""
        return self.engine.dialect.name

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({self.masked_url!r})"

    # --- transactions (for this package and the tables later tasks add) ---

    def write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one short write transaction, retried whole on lock conflicts."""
        return run_transaction(self.engine, fn, write=True, url_for_errors=self._url)

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in a read transaction (a consistent snapshot)."""
        return run_transaction(self.engine, fn, write=False, url_for_errors=self._url)

    # --- transfers --------------------------------------------------------

    def begin_transfer(
        self,
        key: str,
        src_url: str,
        dst_url: str,
        *,
        algorithm: str | None = None,
        resume: bool = True,
    ) -> TransferRecord:
        """Start a transfer, or pick up the unfinished (running/failed) one with the same key.

        ``record.resumed`` tells which; a resumed transfer keeps its journal.
        URLs are stored with passwords masked. ``resume=False`` always starts
        a new transfer (and journal).
        """
        return self.write(lambda conn: transfers.begin(conn, key, src_url, dst_url, algorithm, resume))

    def finish_transfer(
        self,
        transfer_id: int,
        state: str,
        summary: Mapping[str, Any] | None = None,
        *,
        error: Mapping[str, Any] | None = None,
    ) -> TransferRecord:
        """Close a transfer as 'succeeded', 'failed' or 'interrupted' with its summary (the ``copy
        --json`` object, when the copy got that far) and, unless it succeeded, why (``error``:
        kind, what, where, todo, message; job.error_record builds it from an exception)."""
        return self.write(lambda conn: transfers.finish(conn, transfer_id, state, summary, error))

    def heartbeat(self, transfer_id: int, *, interval_s: float = HEARTBEAT_INTERVAL_S) -> Heartbeat:
        """Keep the lease of a running transfer from a thread until closed (``with``; lease.py)."""
        return Heartbeat(self, transfer_id, interval_s)

    def record_chunk(
        self,
        transfer_id: int,
        chunk: ChunkResult | Mapping[str, Any],
        *,
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
    ) -> int:
        """Store one chunk run (a ChunkResult, or a dict shaped like its summary()); returns its row id."""
        with _transfer_must_exist(transfer_id):
            return self.write(lambda conn: transfers.add_chunk(conn, transfer_id, chunk, started_at, ended_at))

    def get_transfer(self, transfer_id: int, *, with_chunks: bool = True) -> TransferRecord | None:
        """One transfer with its chunks in run order, or None."""
        return self.read(lambda conn: transfers.find(conn, transfer_id, with_chunks))

    def list_transfers(
        self,
        *,
        state: str | Iterable[str] | None = None,
        key_prefix: str | None = None,
        limit: int = 100,
        offset: int = 0,
        now: datetime | None = None,
        lease_s: float = LEASE_S,
    ) -> list[TransferRecord]:
        """Transfers, newest first, optionally only some states / keys starting with a prefix.

        States are those shown (schema.SHOWN_STATES): ``running`` and ``lost`` split running
        rows on whether their heartbeat is within ``lease_s`` of ``now``."""
        return self.read(lambda conn: transfers.list_transfers(conn, state, key_prefix, limit, offset, now, lease_s))

    def chunks(self, transfer_id: int) -> list[ChunkRecord]:
        return self.read(lambda conn: transfers.list_chunks(conn, transfer_id))

    # --- journal ------------------------------------------------------------

    def record_listing(self, transfer_id: int, files: pa.Table) -> int:
        """Journal the manifest (path, size, mtime) as pending; returns the row count.

        Idempotent: on resume, files already journaled keep their progress
        unless their size or mtime changed (then they start over). Written
        in batches of journal.LISTING_BATCH_ROWS rows, one short transaction
        each, so other writers are never held up for long; a crash midway is
        repaired by calling it again.
        """
        self._write_listing(transfer_id, journal.listing_batches(files, self.backend))
        return files.num_rows

    def record_listing_behind(self, transfer_id: int, files: pa.Table) -> ListingWrite:
        """record_listing, checked now and written by a thread of its own while the copy starts.

        Writing 100,000 rows takes about 0.4 s on SQLite, which a copy would otherwise spend
        before its first file. Whatever reports on these files waits for it first: pass the
        returned handle as the journal writer's `after` (writer.py)."""
        return ListingWrite(partial(self._write_listing, transfer_id, journal.listing_batches(files, self.backend)))

    def _write_listing(self, transfer_id: int, batches: Iterator[pa.RecordBatch]) -> None:
        for batch in batches:
            with _transfer_must_exist(transfer_id):
                self.write(partial(journal.upsert_listing, transfer_id=transfer_id, batch=batch))

    def journal_writer(
        self,
        transfer_id: int,
        *,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
        max_events: int = DEFAULT_MAX_EVENTS,
        background: bool = True,
        heartbeat: bool = True,
        after: ListingWrite | None = None,
    ) -> JournalWriter:
        """A thread-safe buffered writer for the engine's per-range reports (see writer.py).

        With ``heartbeat`` (and ``background``) it also keeps the transfer's lease while open,
        for callers that hold no Store.heartbeat of their own (a chunk of a distributed copy).
        ``after``: a listing still being written (record_listing_behind), which the writer's
        first write waits for (and fails with)."""
        return JournalWriter(
            self,
            transfer_id,
            max_delay_ms=max_delay_ms,
            max_events=max_events,
            background=background,
            heartbeat_s=HEARTBEAT_INTERVAL_S if heartbeat and background else None,
            after=after,
        )

    def mark_range(self, transfer_id: int, path: str, offset: int, length: int) -> None:
        """Unbuffered: one transaction. The engine should use journal_writer() instead."""
        self._write_one(transfer_id, lambda w: w.mark_range(path, offset, length))

    def mark_done(
        self,
        transfer_id: int,
        path: str,
        size: int,
        mtime: float | None = None,
        checksum: str | None = None,
        attempts: int | None = None,
    ) -> None:
        """Unbuffered: ``path`` is complete (ranges become [[0, size]])."""
        self._write_one(transfer_id, lambda w: w.mark_done(path, size, mtime, checksum, attempts))

    def mark_failed(self, transfer_id: int, path: str, error: str, attempts: int | None = None) -> None:
        """Unbuffered: the last attempt at ``path`` failed; committed ranges are kept for resume."""
        self._write_one(transfer_id, lambda w: w.mark_failed(path, error, attempts))

    def apply_journal_events(self, transfer_id: int, events: Sequence[journal.Event]) -> list[str]:
        """Write a batch of journal events in one transaction; returns paths not in the journal."""
        return self.write(lambda conn: journal.apply_events(conn, transfer_id, events))

    def file_states(self, transfer_id: int, states: str | Sequence[str] | None = None) -> pa.Table:
        """The journal as an Arrow table (journal.FILE_STATES_SCHEMA), sorted by path.

        ``states`` narrows it, e.g. ``("pending", "partial", "failed")`` for
        what is left to do; ranges.missing_ranges(size, ranges.decode(row))
        gives a partial file's missing bytes.
        """
        wanted = (states,) if isinstance(states, str) else states
        return self.read(lambda conn: journal.file_states(conn, transfer_id, wanted))

    def journal_counts(self, transfer_id: int) -> dict[str, dict[str, int]]:
        """Per state: files, bytes (sizes) and bytes_done — progress and resume summaries."""
        return self.read(lambda conn: journal.state_counts(conn, transfer_id))

    # --- protocol switches and the host-protocol library (docs/protocols.md) ----

    def record_protocol_switch(self, transfer_id: int, rec: Mapping[str, Any]) -> None:
        """One switch of a transfer: {"at": ISO time, "from": protocol, "to": protocol, "reason": text}."""
        with _transfer_must_exist(transfer_id):
            self.write(lambda conn: hp.add_switch(conn, transfer_id, dict(rec)))

    def protocol_switches(self, transfer_id: int) -> list[dict[str, Any]]:
        return self.read(lambda conn: hp.list_switches(conn, transfer_id))

    def put_host_protocol(
        self,
        host: str,
        protocol: str,
        port: int,
        available: bool,
        *,
        detail: str | None = None,
        ttl_s: float = 3600.0,
        probe_ms: int | None = None,
    ) -> None:
        """Record a probe result for (host, protocol, port), valid for ttl_s seconds."""
        self.write(lambda conn: hp.put_host_protocol(conn, host, protocol, port, available, detail, ttl_s, probe_ms))

    def host_protocols(self, host: str | None = None, *, fresh_only: bool = False) -> list[dict[str, Any]]:
        """The host-protocol library (plain dicts), optionally one host, optionally only unexpired entries."""
        return self.read(lambda conn: hp.host_protocols(conn, host, fresh_only))

    # --- tuning library (paper 003; docs/profilers.md "The tuning library") ----

    def add_profile(
        self, host: str, kind: str, payload: Mapping[str, Any], *, peer: str = "", measured_at: datetime | None = None
    ) -> int:
        """Store one profiler result (its JSON object) for ``host`` (and ``peer`` for network); returns its id.

        kind: disk, memory, kernel (the network profiler's /proc limits), network or network-light.
        """
        return self.write(lambda conn: tl.add_profile(conn, host, kind, payload, peer, measured_at))

    def latest_profile(
        self, host: str, kind: str | tuple[str, ...], *, peer: str = "", ok_only: bool = True
    ) -> dict[str, Any] | None:
        """The newest profile of that kind (or kinds), as a dict with its payload; None when there is none."""
        return self.read(lambda conn: tl.latest_profile(conn, host, kind, peer, ok_only))

    def profiles(self, *, host: str | None = None, kind: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """Raw profiles, newest first."""
        return self.read(lambda conn: tl.list_profiles(conn, host, kind, limit))

    def save_tuned(self, params: Mapping[str, Any], *, measured_at: datetime, profile_ids: Sequence[int] = ()) -> int:
        """Store a tuner result (TunedParameters.to_dict()) for its source -> destination and protocol."""
        return self.write(lambda conn: tl.save_tuned(conn, params, measured_at, list(profile_ids)))

    def tuned_for(self, source_host: str, dest_host: str, protocol: str = "sftp") -> dict[str, Any] | None:
        """The newest tuned parameters of one direction and protocol, or None."""
        return self.read(lambda conn: tl.tuned_for(conn, source_host, dest_host, protocol))

    def tuned_history(
        self, source_host: str, dest_host: str, protocol: str = "sftp", *, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Every tuner result of one direction and protocol, newest first."""
        return self.read(lambda conn: tl.tuned_history(conn, source_host, dest_host, protocol, limit))

    def tuning_library(self, *, protocol: str | None = None, host: str | None = None) -> list[dict[str, Any]]:
        """The library as plain dicts: the newest tuned row per (source, destination, protocol)."""
        return self.read(lambda conn: tl.library(conn, protocol, host))

    def light_schedule(self, source_host: str, dest_host: str) -> dict[str, Any] | None:
        """Back-off state of the light network profiler for one ordered pair (None before its first run)."""
        return self.read(lambda conn: tl.get_schedule(conn, source_host, dest_host))

    def light_schedules(self) -> list[dict[str, Any]]:
        return self.read(tl.list_schedules)

    def light_due(self, source_host: str, dest_host: str, now: datetime | None = None) -> bool:
        """Whether the light profiler should run for this pair now (never run, or its interval has passed)."""
        return self.read(lambda conn: tl.is_due(conn, source_host, dest_host, now or utcnow()))

    def record_light_result(
        self,
        source_host: str,
        dest_host: str,
        rtt_ms: float | None,
        bandwidth_mbit: float | None,
        *,
        k: int = tl.DEFAULT_STABLE_RUNS,
        tolerance: float = tl.DEFAULT_TOLERANCE,
        base_interval_s: float = tl.DEFAULT_BASE_INTERVAL_S,
        max_interval_s: float = tl.DEFAULT_MAX_INTERVAL_S,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """Apply the back-off rule to a light result; returns the new state plus ``moved`` and ``doubled``."""
        rule = tl.Backoff(k, tolerance, base_interval_s, max_interval_s)
        return self.write(lambda conn: tl.record_light(conn, source_host, dest_host, rtt_ms, bandwidth_mbit, rule, now))

    def _write_one(self, transfer_id: int, add: Callable[[JournalWriter], None]) -> None:
        # max_events=1: the event is written (or its error raised) inside add()
        with JournalWriter(self, transfer_id, max_delay_ms=0, max_events=1, background=False) as writer:
            add(writer)


@contextmanager
def _transfer_must_exist(transfer_id: int) -> Iterator[None]:
    """Turn the foreign-key violation of a row for a missing transfer into a one-line error."""
    try:
        yield
    except IntegrityError as exc:
        if "foreign key" not in str(exc.orig).lower():
            raise
        raise StoreError(
            f"no transfer with id {transfer_id} in the store", todo="call begin_transfer first and use its id"
        ) from exc


def open_store(url: str | None = None, hint: str = "check --store / [airflow_transfer] store_url") -> Store:
    """Store.open for a command or a task: a failure is a TransferError saying what to check."""
    try:
        return Store.open(url)
    except StoreError as exc:
        raise TransferError(f"cannot open the transfer store: {exc}", "", hint) from exc
