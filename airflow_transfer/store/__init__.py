"""airflow-transfer's persistent store: transfers, chunks and the per-file resume journal.

Airflow-free (SQLAlchemy 2 only). SQLite by default, PostgreSQL for many
workers. See docs/store.md for configuration and operations.

Opening
-------
``Store.open(url=None) -> Store``
    URL: argument > env ``AIRFLOW__AIRFLOW_TRANSFER__STORE_URL`` > SQLite file
    ``$AIRFLOW_HOME/airflow_transfer.db`` (or ``~/.airflow-transfer/store.db``).
    Migrates the schema to the latest version first (safe when many processes
    open at once). One Store per process; it is thread-safe. ``close()`` or
    ``with Store.open(...) as store:``.
``config.resolve_store_url(url=None) -> str``, ``config.mask_url(url) -> str``
    (``store.masked_url`` — the only form of the URL to log).

Transfers (one row per transfer; a retry resumes the same row)
--------------------------------------------------------------
``store.begin_transfer(key, src_url, dst_url, *, algorithm=None, resume=True) -> TransferRecord``
    Reuses the newest *running*, *failed* or *interrupted* transfer with ``key``
    (``record.resumed`` is then True, ``record.resumed_from`` the state it was found in,
    ``lost`` for a dead process's, and its journal is intact); else creates one. URLs are
    stored masked.
``store.finish_transfer(transfer_id, "succeeded" | "failed" | "interrupted", summary=None, *, error=None)``
    Every transfer ends in one of these; ``error`` (kind, what, where, todo, message) says
    why a failed or interrupted one stopped.
``store.heartbeat(transfer_id) -> Heartbeat``
    Renews the transfer's lease from a thread until closed (lease.py): a *running* row
    whose heartbeat is older than ``schema.LEASE_S`` shows as *lost*
    (``record.current_state()``; ``list_transfers(state="lost")``).
``store.record_chunk(transfer_id, chunk_result_or_summary_dict, *, started_at=None, ended_at=None) -> int``
``store.get_transfer(transfer_id, *, with_chunks=True) -> TransferRecord | None``
``store.list_transfers(*, state=None, key_prefix=None, limit=100, offset=0) -> list[TransferRecord]``
``store.chunks(transfer_id) -> list[ChunkRecord]``

Per-file journal (resume)
-------------------------
``store.record_listing(transfer_id, manifest_table) -> int``
    path/size/mtime as *pending*, in batched bulk inserts; idempotent (a file
    keeps its progress unless its size or mtime changed).
``store.record_listing_behind(transfer_id, manifest_table) -> ListingWrite``
    The same rows, checked now and written by a thread of its own; pass the
    result as ``journal_writer(..., after=...)``, whose first write waits for it.
``store.journal_writer(transfer_id, *, max_delay_ms=500, max_events=2000, after=None) -> JournalWriter``
    What the engine uses, from any thread: ``w.mark_range(path, offset, length)``,
    ``w.mark_done(path, size, mtime=None, checksum=None, attempts=None)``,
    ``w.mark_failed(path, error, attempts=None)``, ``w.flush()``, ``w.close()``
    (or ``with``). Writes one transaction per max_delay_ms or max_events.
``store.mark_range / mark_done / mark_failed(transfer_id, ...)``
    The same, unbuffered (one transaction each).
``store.file_states(transfer_id, states=None) -> pyarrow.Table``
    path, size, mtime, state (pending/partial/done/failed), ranges (JSON),
    bytes_done, attempts, last_error, checksum; sorted by path.
``store.journal_counts(transfer_id) -> {state: {"files", "bytes", "bytes_done"}}``
``ranges.missing_ranges(size, done_ranges) -> [[start, end), ...]``,
``ranges.decode(text)``, ``ranges.coalesce(ranges)``.

Tuning library (paper 003; docs/profilers.md): plain dicts, datetimes as ISO strings
---------------------------------------------------------------------------------
``store.add_profile(host, kind, payload, *, peer="", measured_at=None) -> int``
``store.latest_profile(host, kind, *, peer="", ok_only=True) -> dict | None``, ``store.profiles(...)``
``store.save_tuned(tuned.to_dict(), *, measured_at, profile_ids) -> int``
``store.tuned_for(src_host, dst_host, protocol="sftp") -> dict | None``, ``store.tuned_history(...)``
``store.tuning_library(*, protocol=None, host=None) -> list[dict]`` (newest per direction + protocol)
``store.light_due(src, dst, now=None)``, ``store.record_light_result(src, dst, rtt_ms, mbit, *, k, ...)``,
``store.light_schedule(src, dst)``, ``store.light_schedules()``

For later tables (host-protocol library, ...)
------------------------------------------------------------------
Add the table to schema.py, a frozen migration in migrations/ (see its
docstring), and query functions taking a Connection; run them with
``store.write(fn)`` / ``store.read(fn)`` (short transactions, retried on locks).
"""

from .config import ENV_VAR, mask_url, resolve_store_url
from .errors import StoreError, UnknownFileError
from .journal import FILE_STATES_SCHEMA, decode_blocks
from .lease import Heartbeat
from .ranges import coalesce, decode, missing_ranges
from .records import ChunkRecord, TransferRecord
from .schema import (
    DONE,
    FAILED,
    FILE_FAILED,
    INTERRUPTED,
    LOST,
    PARTIAL,
    PENDING,
    RUNNING,
    SUCCEEDED,
)
from .store import Store, open_store
from .writer import JournalWriter

__all__ = [
    "open_store",
    "DONE",
    "ENV_VAR",
    "FAILED",
    "FILE_FAILED",
    "FILE_STATES_SCHEMA",
    "INTERRUPTED",
    "LOST",
    "PARTIAL",
    "PENDING",
    "RUNNING",
    "SUCCEEDED",
    "ChunkRecord",
    "Heartbeat",
    "JournalWriter",
    "Store",
    "StoreError",
    "TransferRecord",
    "UnknownFileError",
    "coalesce",
    "decode",
    "decode_blocks",
    "missing_ranges",
    "mask_url",
    "resolve_store_url",
]
