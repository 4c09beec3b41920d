"""One copy from SRC to DST: list, plan, move, summarise. Shared by the CLI and the operators."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import posixpath
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .engine.accounting import Reporter, Stats
from .engine.backend_copy import BackendSession
from .engine.choose import session_for
from .engine.chunk_session import EngineChunkSession
from .engine.fallback import FallbackSession
from .engine.params import TransferParams
from .engine.retry import RetryPolicy
from .engine.session import Session, SessionOptions
from .engine.switching import quick_switching
from .engine.transfer import TransferSession
from .errors import Interrupted, TransferError, UsageError, describe_oserror
from .integrity.algorithms import algorithm_info
from .manifest import Manifest
from .protocols.endpoint import Endpoint
from .protocols.fallback import alternate_endpoints
from .protocols.pool import SFTPPool, warm_count
from .protocols.replicas import ReplicaSet
from .protocols.resolve import resolve_endpoint
from .store import FAILED, INTERRUPTED, LOST, RUNNING, SUCCEEDED, decode, decode_blocks, mask_url, open_store
from .summary import TransferSummary
from .tuning import LinkInfo, get_algorithm
from .tuning.executor import bundled_up_to
from .tuning.library import StartingPoint, choose, remember_first_contact
from .tuning.models import OPENSSH_CHANNEL_WINDOW, SFTP_FILE_RTTS


@dataclass
class CopyRequest:
    src: Endpoint
    dst: Endpoint
    params: TransferParams = field(default_factory=TransferParams)
    algorithm: str = "fixed"
    manifest: Manifest | None = None  # pre-listed source (else listed now)
    progress: Callable[[dict], None] | None = None
    progress_interval: float = 5.0
    skip_existing: bool = True
    store_url: str | None = None  # None: [airflow_transfer] store_url / env / default SQLite
    transfer_key: str | None = None  # None: derived from SRC and DST
    restart: bool = False  # ignore the journal of an earlier attempt
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    use_store: bool = True
    link: LinkInfo | None = None  # None: unknown (auto then adapts by measurement)
    verify: str | None = "sha256"  # checksum algorithm for end-to-end verification; None = off
    before_verify: Callable[[str], None] | None = None  # fault injection for tests: called with each temp path
    measure_link: bool | None = None  # no library entry: True/False measure or not; None decides (should_measure)
    verify_mode: str = "auto"  # auto | sequential | file | block (docs/integrity.md)
    verify_block_size: int | None = None  # block mode; None: the engine's default
    verify_threads: int | None = None  # block mode checksum threads; None: balanced from t and c
    bundle: bool = True  # small files of an upload in bundles over SSH exec, where the server allows
    replicas: list[str] = field(default_factory=list)  # more URLs of the same source tree (read from all)
    alt_protocols: list[str] = field(default_factory=list)  # fall-back protocols for the remote end, in order
    switch_after: int = 3  # consecutive failures before switching protocol
    probe_interval: float = 5.0  # seconds between probes of a preferred protocol while on an alternate
    make_endpoint: Callable[[str], Endpoint] | None = None  # URL -> Endpoint (the CLI's SSH options)
    log: Callable[[str], None] | None = None  # one-line notices (protocol switches)
    pool: SFTPPool | None = None  # to the remote end, already warming (the CLI's); unused ones are closed
    # besides KeyboardInterrupt (SIGINT, Interrupted) and SystemExit: exceptions that mean the copy
    # was stopped from outside, not that it went wrong (the operator's: Airflow's task timeout)
    interrupted_by: tuple[type[BaseException], ...] = ()
    # (what, todo) of an error as the caller's users act on it, for the store's record of a failed
    # transfer: the operator words hints for Airflow connections instead of command-line flags
    reword: Callable[[TransferError], tuple[str, str]] | None = None


def engine_options(req: CopyRequest) -> dict:
    """The pipelined engine's verification options a CopyRequest carries (those it has)."""
    out = {}
    for name, key in (
        ("verify_mode", "verify_mode"),
        ("verify_block_size", "block_size"),
        ("verify_threads", "verify_threads"),
        ("bundle", "bundle"),
    ):
        if getattr(req, name, None) is not None:
            out[key] = getattr(req, name)
    return out


def open_session(req: CopyRequest, stats: Stats | None) -> Session:
    """The session that moves `req` (opens nothing yet): the pipelined engine (TransferSession)
    for local <-> SFTP, the generic path (BackendSession) for other pairs and for replicas, or
    the fall-back over several protocols (FallbackSession), whose first phase is that same
    engine when the preferred pair is one it moves."""
    opts: SessionOptions = {
        "stats": stats,
        "skip_existing": req.skip_existing,
        "retry": req.retry,
        "verify": req.verify,
    }
    if getattr(req, "replicas", None):
        make = req.make_endpoint or resolve_endpoint
        rs = ReplicaSet([req.src, *[make(u) for u in req.replicas]], drop_after=req.switch_after)
        src = Endpoint("replicas", req.src.path, options={"set": rs})
        return BackendSession(src, req.dst, **opts)
    if req.alt_protocols:
        side = "dst" if req.dst.scheme != "file" else "src"
        primary = req.dst if side == "dst" else req.src
        alts = alternate_endpoints(primary, list(req.alt_protocols), req.make_endpoint or resolve_endpoint)
        return FallbackSession(
            req.src,
            req.dst,
            [primary, *alts],
            side=side,
            threshold=req.switch_after,
            probe_interval=req.probe_interval,
            log=req.log,
            engine_options=engine_options(req),
            pool=req.pool,
            **opts,
        )
    return session_for(req.src, req.dst, engine_options=engine_options(req), pool=req.pool, **opts)


def default_key(src: Endpoint, dst: Endpoint) -> str:
    return "cli:" + hashlib.sha256(f"{src.display}\0{dst.display}".encode()).hexdigest()[:20]


VERIFY_MODES = ("auto", "sequential", "file", "block")


def _resume_blocks(store, transfer_id: int, resume: dict[str, list]) -> dict[str, list]:
    """Journaled source block digests of the files that resume (block mode verifies them)."""

    old = store.file_states(transfer_id)
    return {
        p: decode_blocks(b) for p, b in zip(old["path"].to_pylist(), old["blocks"].to_pylist()) if b and p in resume
    }


def _resume_map(store, transfer_id: int, manifest: Manifest) -> dict[str, list]:
    """Files whose size and mtime match the journal's earlier listing, with their committed ranges.

    Only for those can bytes already at the destination belong to this very source version."""

    old = store.file_states(transfer_id)
    if old.num_rows == 0:
        return {}
    prev = {
        p: (sz, mt, rg)
        for p, sz, mt, rg in zip(
            old["path"].to_pylist(), old["size"].to_pylist(), old["mtime"].to_pylist(), old["ranges"].to_pylist()
        )
    }
    out: dict[str, list] = {}
    for p, sz, mt in zip(
        manifest.table["path"].to_pylist(), manifest.table["size"].to_pylist(), manifest.table["mtime"].to_pylist()
    ):
        hit = prev.get(p)
        if hit and hit[0] == sz and hit[1] is not None and abs(hit[1] - mt) < 1e-6:
            out[p] = decode(hit[2]) if isinstance(hit[2], str) or hit[2] is None else hit[2]
    return out


def run_copy(req: CopyRequest) -> dict:
    """Copy and return the summary (fields: docs/summary.md; those a copy does not fill stay empty).

    With a store, the transfer ends there as succeeded, failed or interrupted whatever stops
    it (docs/durability.md, "How a transfer ends"); an exception that stopped it carries how
    it was recorded (transfer_end)."""
    # A head start (engine/head_start.py) may have moved files already: its time counts.
    t0 = min(time.monotonic(), getattr(getattr(req.pool, "ahead", None), "started", float("inf")))
    stats = Stats()
    _check_request(req)
    session = open_session(req, stats)  # opens nothing yet
    if req.pool is not None and getattr(session, "pool", None) is not req.pool:
        req.pool.close()  # warmed for a session this request did not get
    store = None
    # A shorter switch interval for the copy's threads (engine/switching.py), put back after:
    # an Airflow task's process, or any caller's, gets its own back.
    with _sigterm_interrupts(), quick_switching(), session:
        # The first SSH handshakes run while the store opens and the source is listed.
        session.warm(warm_count(req.algorithm, req.params.p * req.params.cc, req.verify is not None))
        if req.use_store:
            store = open_store(req.store_url)
        try:
            return _run(req, t0, stats, store, session)
        finally:
            if store is not None:
                store.close()


def _check_request(req: CopyRequest) -> None:
    if req.verify is not None:
        try:
            algorithm_info(req.verify)
        except ValueError as exc:
            raise UsageError(str(exc), "", "use --verify none to turn verification off") from exc
    if not 0 < req.progress_interval <= 86400:  # a negative or NaN wait would spin; inf overflows the timer
        raise UsageError(
            f"progress interval must be 0-86400 seconds (got {req.progress_interval})", "", "e.g. --progress-interval 5"
        )
    if req.verify_mode not in VERIFY_MODES:
        raise UsageError(f"unknown verify mode {req.verify_mode!r}", "", f"use one of {', '.join(VERIFY_MODES)}")
    if req.verify_block_size is not None and req.verify_block_size < 64 * 1024:
        raise UsageError(
            f"verify block size {req.verify_block_size} is below 64 KiB",
            "",
            "give at least 65536 bytes (the default is 8 MiB)",
        )
    if req.verify_threads is not None and req.verify_threads < 1:
        raise UsageError("verify threads must be >= 1", "", "omit it to balance them from measured t and c")


def _run(req: CopyRequest, t0: float, stats: Stats, store, session) -> dict:
    key = req.transfer_key or default_key(req.src, req.dst)
    if store is None:
        return _copy(req, t0, stats, None, None, session, key)
    # Recorded before the first contact with either end, so a refused login, an unknown host
    # key or a bad destination ends a transfer the store shows as failed, with that error.
    record = store.begin_transfer(
        key, req.src.display, req.dst.display, algorithm=req.algorithm, resume=not req.restart
    )
    if record.resumed_from == LOST and req.log is not None:
        req.log(f"transfer {record.id} had no heartbeat for its lease (its process died); this copy takes it over")
    with store.heartbeat(record.id):
        try:
            return _copy(req, t0, stats, store, record, session, key)
        except BaseException as exc:
            _record_end(store, record, key, exc, req)
            raise


def _copy(req: CopyRequest, t0: float, stats: Stats, store, record, session, key: str) -> dict:
    journal = listing = None
    resume: dict[str, list] | None = None
    session.before_verify = req.before_verify
    if req.link is not None and getattr(req.link, "measured", False):
        session.bandwidth_bps = req.link.bandwidth_bps
    manifest = req.manifest or session.list_source()
    manifest.validate(req.src.display)
    if record is not None:
        resume = _resume_map(store, record.id, manifest) if record.resumed else {}
        if resume and req.verify is not None and session.verify_mode == "block":
            session.resume_blocks = _resume_blocks(store, record.id, resume)
        listing = store.record_listing_behind(record.id, manifest.table)
        # the lease is kept by _run's heartbeat for the whole copy, not only while the journal is open
        journal = store.journal_writer(record.id, max_delay_ms=200, heartbeat=False, after=listing)
        session.journal = journal
        session.on_switch = lambda rec, tid=record.id: store.record_protocol_switch(tid, rec)
    try:
        src_root = req.src.path
        if manifest.root_is_file:
            src_root = (os.path if req.src.scheme == "file" else posixpath).dirname(req.src.path.rstrip("/")) or "/"
        ordered = manifest.sorted_by_size()
        stats.add_total(ordered.files, ordered.bytes)
        session.ensure_dirs(req.dst.path, ordered.empty_dirs)
        modes = ordered.modes.to_pylist() if ordered.modes is not None else None
        emit = req.progress or (lambda s: None)

        start = choose(
            req.src,
            req.dst,
            req.link,
            store,
            measure=req.measure_link,
            algorithm=req.algorithm,
            total_bytes=ordered.bytes,
            progress=req.log,
        )
        link = start.link or _unknown_link()
        if session.remote is not None:
            link = sftp_link(link)
        with Reporter(stats, emit, req.progress_interval):
            if req.algorithm == "fixed":
                chunks = [
                    session.perform(
                        ordered.table,
                        start.params(req.params),
                        src_root=src_root,
                        dst_root=req.dst.path,
                        chunk_id="chunk-0",
                        modes=modes,
                        resume=resume,
                    )
                ]
            else:
                # The pipelined engine also runs chunks at once (Multi-Chunk); other sessions one by one.
                # A fall-back whose preferred pair the engine moves runs the algorithm on that engine,
                # exactly as a plain copy would, and then carries what it left (complete()).
                engine = session.drive_engine()
                make = EngineSessionExecutor if engine is not None else EngineExecutor
                executor = make(engine or session, src_root, req.dst.path, modes, resume)
                executor.adjust = start.params  # tuned block size / TCP buffer where a plan leaves 0
                algorithm = get_algorithm(req.algorithm)
                chunks = algorithm.run(ordered.table, link, executor)
                _learned_notes(algorithm, start, store, req)
                chunks = session.complete(
                    chunks,
                    ordered.table,
                    start.params(req.params),
                    src_root=src_root,
                    dst_root=req.dst.path,
                    modes=modes,
                    resume=resume,
                )
    finally:
        try:
            if journal is not None:
                journal.close()
        finally:
            if listing is not None:
                listing.join()  # no row is written after the copy has ended, on any path
    if listing is not None:
        listing.wait()  # a copy that reported nothing never waited for its listing's rows
    verify_summary = session.verify_summary()
    seconds = time.monotonic() - t0
    tuning = start.summary()
    server, notes = session.server_summary()
    if notes:
        tuning["notes"] = tuning.get("notes", []) + notes
    summary = TransferSummary.from_results(
        "copy",
        chunks,
        origin=t0,
        files=ordered.files,
        bytes=ordered.bytes,
        seconds=seconds,
        algorithm=req.algorithm,
        src=req.src.display,
        dst=req.dst.display,
        direction=session.direction,
        skipped_entries=dict(manifest.skipped),
        verify=verify_summary,
        protocol_switches=list(session.switches),
        ssh_client=getattr(session.pool, "client", None),
        connections_lost=getattr(session.pool, "lost", 0),
        tuning=tuning,
        transfer_key=key,
        transfer_id=record.id if record else None,
        store=store.masked_url if store is not None else None,
        manifest_digest=manifest.digest(),
        server=server,
        extra=session.summary_extra(),  # fall-back: per-protocol totals; replicas: per-host
    ).as_dict()
    if record is not None:
        for c in chunks:
            store.record_chunk(record.id, c)
        if summary["failed"]:
            store.finish_transfer(record.id, FAILED, summary, error=files_failed_record(summary, req.dst.display))
        else:
            store.finish_transfer(record.id, SUCCEEDED, summary)
    return summary


# --- how a transfer ends (docs/durability.md) ---------------------------------------------

_END_ATTR = "transfer_end"
_URL = re.compile(r"[A-Za-z][\w+.-]*://\S+")
MAX_ERROR_CHARS = 2_000
RESUME_HINT = "run the same copy again to resume (completed files are kept)"


def transfer_end(exc: BaseException) -> dict | None:
    """How the transfer that ``exc`` stopped was recorded: ``{"transfer_id", "transfer_key",
    "state", "error"}``; None when it stopped before a transfer was recorded (or without a store)."""
    return getattr(exc, _END_ATTR, None)


def _record_end(store, record, key: str, exc: BaseException, req: CopyRequest) -> None:
    interrupted = isinstance(exc, (KeyboardInterrupt, SystemExit, *req.interrupted_by))
    state = INTERRUPTED if interrupted else FAILED
    error = error_record(exc, interrupted=interrupted, reword=req.reword)
    try:
        store.finish_transfer(record.id, state, error=error)
    except Exception as store_exc:  # noqa: BLE001 - the caller must see the copy's error, not the store's
        exc.add_note(
            f"the store could not record transfer {record.id} as {state} ({store_exc}); "
            "it shows as lost once its lease runs out"
        )
        state = RUNNING
    try:
        setattr(exc, _END_ATTR, {"transfer_id": record.id, "transfer_key": key, "state": state, "error": error})
    except AttributeError:  # an exception class with __slots__: the store still has it
        pass


def error_record(
    exc: BaseException,
    *,
    interrupted: bool = False,
    reword: Callable[[TransferError], tuple[str, str]] | None = None,
) -> dict[str, str]:
    """What the store keeps about the exception that ended a transfer: its ``kind`` (errors.py),
    Python ``type``, ``what`` / ``where`` / ``todo`` (``reword`` gives what and todo for a
    TransferError) and the one-line ``message``. URLs in it are masked: an exception's text is
    not known to be free of passwords."""
    kind, where, todo = "error", "", ""
    if isinstance(exc, TransferError):
        kind, where = exc.kind, exc.where
        what, todo = reword(exc) if reword is not None else (exc.what, exc.todo)
    elif isinstance(exc, Interrupted):
        kind, what, todo = "interrupted", str(exc) or "stopped by a signal", RESUME_HINT
    elif isinstance(exc, KeyboardInterrupt):
        kind, what, todo = "interrupted", "interrupted (SIGINT, Ctrl-C)", RESUME_HINT
    elif isinstance(exc, SystemExit):
        kind, what, todo = "interrupted", f"the process exited (status {exc.code})", RESUME_HINT
    elif interrupted:
        kind, what, todo = (
            "interrupted",
            f"stopped by {type(exc).__name__}" + (f": {exc}" if str(exc) else ""),
            RESUME_HINT,
        )
    elif isinstance(exc, OSError):
        what = describe_oserror(exc) + (f": {exc.filename}" if exc.filename else "")
    else:
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    what, where = _masked(what)[:MAX_ERROR_CHARS], _masked(where)
    message = TransferError(what, where, todo).message
    return {"kind": kind, "type": type(exc).__name__, "what": what, "where": where, "todo": todo, "message": message}


def files_failed_record(summary: dict, dst: str) -> dict[str, str]:
    """The store's error of a copy that ran to its end with files that did not arrive verified."""
    failed = summary["failed"]
    first = failed[0]
    what = (
        f"{len(failed)} of {summary['files']} files did not arrive verified (first: {first['path']}: {first['error']})"
    )
    todo = "run the same copy again to finish (completed files are kept)"
    what = _masked(what)[:MAX_ERROR_CHARS]
    return {
        "kind": "files_failed",
        "type": "",
        "what": what,
        "where": dst,
        "todo": todo,
        "message": TransferError(what, dst, todo).message,
    }


def _masked(text: str) -> str:
    return _URL.sub(lambda m: mask_url(m.group()), text)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While a copy runs, SIGTERM raises Interrupted where nothing else handles it (the CLI, a
    plain script), so the copy records itself interrupted instead of vanishing mid-write.

    Only in the main thread (the only one signals reach) and only over the default action:
    Airflow's task runner has its own handler, which calls the operator's on_kill."""
    install = (
        threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    )
    if install:
        signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
    finally:
        if install:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(f"stopped by {signal.Signals(signum).name}")


def _learned_notes(algorithm, start: StartingPoint, store, req: CopyRequest) -> None:
    """What the algorithm that ran found out (auto's decision, a first contact's measurements) goes
    into the summary's tuning notes; a first contact's figures also go into the tuning library."""
    ran = getattr(algorithm, "last_algorithm", None) or algorithm
    decision = getattr(algorithm, "last_decision", None)
    if decision is not None:
        start.notes.append(f"auto chose {decision.algorithm}: {decision.reason}")
    start.notes.extend(getattr(ran, "notes", []))
    learned = getattr(ran, "learned", None)
    if learned and start.link is None:
        start.source = "first contact (measured by this copy)"
    if learned and req.link is None:
        kept = remember_first_contact(store, req.src, req.dst, learned)
        if kept:
            start.notes.append(kept)


class EngineExecutor:
    """The tuning algorithms' ChunkExecutor over the real engine (tuning/executor.py)."""

    def __init__(
        self, session: TransferSession, src_root: str, dst_root: str, modes: list[int] | None, resume: dict | None
    ) -> None:
        self.session, self.src_root, self.dst_root = session, src_root, dst_root
        self.modes, self.resume = modes, resume
        self.adjust: Callable[[TransferParams], TransferParams] = lambda params: params

    def link_rtt(self) -> tuple[float, float, str] | None:
        """RTT of the first connection to the remote side (tuning/first_contact.py); None for a
        local copy or when no connection can be opened now (the copy itself will say why)."""
        pool = getattr(self.session, "pool", None)
        if pool is None:
            return None
        try:
            return pool.rtt()
        except Exception:  # noqa: BLE001 - only a hint: the copy's own first connection reports the real error
            return None

    def warm(self, connections: int) -> None:
        """Have `connections` idle connections opening in the background (first contact opens
        the next level's ahead of the ramp)."""
        warm = getattr(self.session, "warm", None)
        if callable(warm):
            warm(connections)

    def bundle_max_file(self) -> int:
        """The largest file the session moves in bundles; 0: none."""
        return bundled_up_to(self.session)

    def run_chunk(self, manifest_sorted, start: int, stop: int, params: TransferParams, chunk_id: str):
        rows = manifest_sorted.slice(start, stop - start)
        modes = self.modes[start:stop] if self.modes is not None else None
        return self.session.perform(
            rows,
            self.adjust(params),
            src_root=self.src_root,
            dst_root=self.dst_root,
            chunk_id=chunk_id,
            modes=modes,
            resume=self.resume,
        )


class EngineSessionExecutor(EngineExecutor):
    """EngineExecutor that also runs several chunks at once, for Multi-Chunk (engine/chunk_session.py)."""

    def open_session(self, manifest_sorted):

        return EngineChunkSession(self, manifest_sorted)


def _unknown_link():

    return LinkInfo.unknown()


def sftp_link(link):
    """The link as the SFTP engine sees it: two control round trips per file to pipeline, and
    the SSH channel window on every connection (the receiving sshd's: OpenSSH's 2 MiB for
    uploads; for downloads our own window is larger, so 2 MiB is the conservative figure)."""

    return dataclasses.replace(
        link, file_rtts=SFTP_FILE_RTTS, channel_window_bytes=link.channel_window_bytes or OPENSSH_CHANNEL_WINDOW
    )


def link_from_args(rtt_ms: float | None, bandwidth_mbit: float | None, bdp: int | None):
    """LinkInfo from --rtt-ms/--bandwidth-mbit or --bdp; None when neither was given."""

    if bdp is not None:
        if rtt_ms is not None or bandwidth_mbit is not None:
            raise UsageError("give either --bdp or --rtt-ms with --bandwidth-mbit, not both")
        if bdp <= 0:
            raise UsageError(f"--bdp must be a positive number of bytes (got {bdp})")
        return LinkInfo.from_bdp(bdp, source="given")
    if rtt_ms is None and bandwidth_mbit is None:
        return None
    if rtt_ms is None or bandwidth_mbit is None or not 0 < rtt_ms < math.inf or not 0 < bandwidth_mbit < math.inf:
        raise UsageError(
            "--rtt-ms and --bandwidth-mbit go together, both positive and finite",
            "",
            "e.g. --rtt-ms 50 --bandwidth-mbit 500",
        )
    return LinkInfo(rtt_s=rtt_ms / 1000, bandwidth_bps=bandwidth_mbit * 1e6, source="given")
