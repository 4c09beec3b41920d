"""A transfer split into steps that can run as separate tasks on different workers.

    stage_manifest(src, staging_dir, name)      list the source once, keep it as Parquet
    plan_chunks(manifest_uri, ...)              row ranges of that manifest + pp/p/cc each
    run_chunk(spec, src, dst, ...)              move the rows of one spec
    verify_tree(src, dst, manifest_uri, ...)    compare source and destination digests, repair
    finish_transfer(store_url, key, verify)     close the shared store record with a summary
    fail_transfer(store_url, key, chunk, ...)   a chunk failed for good: end the shared record failed

The staged manifest is written sorted by (size, path), so a chunk spec is just
a row range of the file (plus its knobs): specs stay a few hundred bytes each
whatever the dataset size, and every worker rebuilds the same file list from
the same Parquet file. All chunks of one run journal into one store transfer
(the spec carries its key), so the UI and a retried chunk see one transfer.

No Airflow imports here: the operators in airflow_transfer/operators/ only
resolve connections and call these functions.
"""

from __future__ import annotations

import os
import posixpath
import re
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import manifest_schema as ms
from .engine.accounting import Reporter, Stats
from .engine.params import TransferParams
from .engine.retry import RetryPolicy
from .engine.transfer import TransferSession
from .engine.verify import DestinationDigests, Piece, VerifyItem
from .errors import TransferError, UsageError
from .integrity.algorithms import algorithm_info
from .job import _resume_map, sftp_link
from .manifest import Manifest
from .protocols.endpoint import Endpoint
from .store import Store, TransferRecord, open_store
from .summary import TransferSummary
from .tuning import LinkInfo, get_algorithm
from .tuning.chunks import ChunkSpec, make_spec
from .tuning.dataset import SortedSizes
from .tuning.library import GIVEN, StartingPoint, choose

SPEC_VERSION = 1
# Size classes of the manifest histogram: small files are dominated by per-file
# round trips, large ones by bandwidth (paper 000), so the classes follow that split.
HISTOGRAM_EDGES = (4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 4 << 30)
HISTOGRAM_LABELS = ("< 4 KiB", "4-64 KiB", "64 KiB-1 MiB", "1-16 MiB", "16-256 MiB", "256 MiB-4 GiB", ">= 4 GiB")


# -- manifests -----------------------------------------------------------------
def manifest_path(uri: str) -> str:
    """Local path of a staged manifest given as ``file:///...`` or a plain path."""
    if not isinstance(uri, str) or not uri:
        raise UsageError(f"manifest must be a file URI or path (got {uri!r})")
    if uri.startswith("file://"):
        return unquote(urlparse(uri).path)
    if "://" in uri:
        raise UsageError(
            f"staged manifests are local files; {uri!r} is not",
            uri,
            "use a staging directory every worker can read (a shared mount on many hosts)",
        )
    return uri


def manifest_uri_of(value) -> str:
    """Accept a manifest URI/path or the dict stage_manifest returns (its XCom)."""
    if isinstance(value, dict):
        if "manifest" not in value:
            raise UsageError("manifest info has no 'manifest' key; pass DatasetManifestOperator's output")
        return value["manifest"]
    return value


def safe_name(text: str) -> str:
    """A file-name-safe form of an Airflow id or run id."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "x"


def size_histogram(sizes: np.ndarray) -> list[dict]:
    """Files and bytes per size class (HISTOGRAM_LABELS), vectorised."""
    sizes = np.asarray(sizes, dtype=np.int64)
    idx = np.searchsorted(np.asarray(HISTOGRAM_EDGES, dtype=np.int64), sizes, side="right")
    files = np.bincount(idx, minlength=len(HISTOGRAM_LABELS))
    nbytes = np.bincount(idx, weights=sizes, minlength=len(HISTOGRAM_LABELS))
    return [{"size": label, "files": int(f), "bytes": int(b)} for label, f, b in zip(HISTOGRAM_LABELS, files, nbytes)]


def list_tree(src: Endpoint) -> Manifest:
    """List a source tree (the fast remote lister over SSH exec for sftp)."""
    with TransferSession(src, Endpoint("file", os.getcwd()), verify=None) as session:
        return session.list_source()


def stage_manifest(src: Endpoint, staging_dir: str, name: str) -> dict:
    """List `src`, write the manifest sorted by (size, path) to staging_dir/name.parquet.

    Returns the manifest info: its URI, source, files, bytes, empty directories and
    the size histogram (what DatasetManifestOperator pushes as XCom)."""
    manifest = list_tree(src)
    manifest.validate(src.display)
    ordered = manifest.sorted_by_size()
    os.makedirs(staging_dir, exist_ok=True)
    path = os.path.join(os.path.abspath(staging_dir), f"{name}.parquet")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        ordered.write(path)
    except OSError as exc:
        raise TransferError(
            f"cannot write the manifest: {exc.strerror or exc}", path, "check the staging directory and its permissions"
        ) from exc
    sizes = ordered.table[ms.SIZE].to_numpy() if ordered.files else np.zeros(0, dtype=np.int64)
    return {
        "manifest": "file://" + path,
        "src": src.display,
        "root_is_file": manifest.root_is_file,
        "files": ordered.files,
        "bytes": ordered.bytes,
        "empty_dirs": len(ordered.empty_dirs),
        "skipped_entries": dict(manifest.skipped),
        "histogram": size_histogram(sizes),
        "manifest_digest": ordered.digest(),
    }


def read_manifest(uri: str) -> Manifest:
    return Manifest.read(manifest_path(manifest_uri_of(uri)))


# -- planning ---------------------------------------------------------------------
def starting_point(
    src: Endpoint | None, dst: Endpoint | None, given_link, *, store_url: str | None = None, algorithm: str = "fixed"
):
    """(link for the planners, StartingPoint): given figures, else the tuning library's row for
    src host -> dst host (docs/profilers.md), else unknown. Without endpoints: given or unknown."""

    if src is None or dst is None:
        start = StartingPoint(
            given_link, GIVEN if given_link is not None or algorithm == "fixed" else "unknown (adapting by measurement)"
        )
    else:
        store = _open_store(store_url)
        try:
            start = choose(src, dst, given_link, store, algorithm=algorithm)
        finally:
            store.close()
    link = start.link
    if link is not None and src is not None and dst is not None and "sftp" in (src.scheme, dst.scheme):
        link = sftp_link(link)
    return link, start


def plan_chunks(
    manifest,
    *,
    algorithm: str = "fixed",
    params: TransferParams | None = None,
    link=None,
    transfer_key: str,
    min_chunks: int = 1,
    chunk_bytes: int | None = None,
    root_is_file: bool = False,
    options: dict | None = None,
    start=None,
) -> list[dict]:
    """Chunk specs (plain dicts, XCom-sized) for the staged manifest.

    `algorithm` picks the per-chunk pp/p/cc (fixed: `params` for every chunk). The
    adaptive algorithms contribute their up-front plan: feedback between chunks needs
    one task (TunedTransferOperator). `min_chunks` splits the largest chunks until
    there are at least that many (at most one per file), so mapped tasks can spread
    over that many workers. `start` (a tuning-library StartingPoint) fills the block size
    and TCP buffer a chunk leaves to the backend with the tuned values."""

    if isinstance(min_chunks, bool) or not isinstance(min_chunks, int) or min_chunks < 1:
        raise UsageError(f"min_chunks must be a whole number >= 1 (got {min_chunks!r})")
    uri = manifest_uri_of(manifest)
    if isinstance(manifest, dict):
        root_is_file = bool(manifest.get("root_is_file", root_is_file))
    m = read_manifest(uri)
    table = m.table
    sizes = table[ms.SIZE].to_numpy() if m.files else np.zeros(0, dtype=np.int64)
    if len(sizes) > 1 and np.any(np.diff(sizes) < 0):
        raise UsageError("manifest is not sorted by size", uri, "stage it with DatasetManifestOperator")
    link = link or LinkInfo.unknown()
    options = dict(options or {})
    try:
        if algorithm == "fixed":
            p = params or TransferParams()
            algo = get_algorithm(
                "fixed",
                pp=p.pp,
                p=p.p,
                cc=p.cc,
                block_size=p.block_size,
                tcp_buffer=p.tcp_buffer,
                chunk_bytes=chunk_bytes,
                **options,
            )
        else:
            algo = get_algorithm(algorithm, **options)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    specs = algo.plan(sizes, link) if m.files else []
    ranges = [(s.start, s.stop, start.params(s.params) if start is not None else s.params) for s in specs]
    # Split the chunk with the most bytes in half (by bytes) until there are enough.
    ss = SortedSizes.of(sizes)
    while ranges and len(ranges) < min_chunks:
        k = max(range(len(ranges)), key=lambda i: (ss.bytes(ranges[i][0], ranges[i][1]), ranges[i][1] - ranges[i][0]))
        lo, hi, prm = ranges[k]
        if hi - lo < 2:
            splittable = [i for i, r in enumerate(ranges) if r[1] - r[0] >= 2]
            if not splittable:
                break
            k = max(splittable, key=lambda i: ranges[i][1] - ranges[i][0])
            lo, hi, prm = ranges[k]
        half = ss.bytes(lo, hi) / 2
        cut = int(np.searchsorted(ss.cum[lo : hi + 1] - ss.cum[lo], half, side="left")) + lo
        cut = min(max(cut, lo + 1), hi - 1)
        ranges[k : k + 1] = [(lo, cut, prm), (cut, hi, prm)]
    out = []
    n = len(ranges)
    for i, (lo, hi, prm) in enumerate(ranges):
        spec = make_spec(ss, f"chunk-{i + 1:03d}-of-{n:03d}", lo, hi, prm).to_dict()
        spec.update(
            manifest="file://" + os.path.abspath(manifest_path(uri)),
            transfer_key=transfer_key,
            algorithm=algorithm,
            root_is_file=root_is_file,
            index=i,
            count=n,
            v=SPEC_VERSION,
        )
        out.append(spec)
    return out


def spec_params(spec: dict) -> TransferParams:

    try:
        return ChunkSpec.from_dict(spec).params
    except (TypeError, ValueError) as exc:
        raise UsageError(f"not a chunk spec: {exc}", "", "pass ChunkPlanOperator's output") from exc


# -- moving one chunk ---------------------------------------------------------------
def _src_root(src: Endpoint, root_is_file: bool) -> str:
    if not root_is_file:
        return src.path
    mod = posixpath if src.scheme == "sftp" else os.path
    return mod.dirname(src.path.rstrip("/")) or "/"


def _open_store(store_url: str | None) -> Store:
    return open_store(store_url, "check [airflow_transfer] store_url")


def run_chunk(
    spec: dict,
    src: Endpoint,
    dst: Endpoint,
    *,
    store_url: str | None = None,
    progress: Callable[[dict], None] | None = None,
    progress_interval: float = 5.0,
    retry: RetryPolicy | None = None,
    verify: str | None = "sha256",
    use_store: bool = True,
) -> dict:
    """Move rows [start, stop) of the spec's manifest; return a summary shaped like run_copy's."""

    params = spec_params(spec)
    m = read_manifest(spec["manifest"])
    start, stop = int(spec["start"]), int(spec["stop"])
    rows = m.table.slice(start, stop - start)
    got_bytes = int(pc.sum(rows[ms.SIZE]).as_py() or 0) if rows.num_rows else 0
    if rows.num_rows != spec["files"] or got_bytes != spec["bytes"]:
        raise TransferError(
            f"chunk {spec['id']} does not match its manifest (rows {rows.num_rows}, "
            f"{got_bytes} bytes; the plan said {spec['files']}, {spec['bytes']})",
            spec["manifest"],
            "re-run the manifest and plan tasks",
        )
    chunk_manifest = Manifest(rows, root=m.root)
    chunk_manifest.validate(src.display)
    t0 = time.monotonic()
    stats = Stats()
    store = _open_store(store_url) if use_store else None
    record = journal = None
    try:
        with TransferSession(
            src, dst, stats=stats, skip_existing=True, retry=retry or RetryPolicy(), verify=verify
        ) as session:
            if store is not None:
                record, reopened = _join_transfer(store, spec, src, dst)
                resume = _resume_map(store, record.id, chunk_manifest) if reopened else {}
                store.record_listing(record.id, rows)
                journal = store.journal_writer(record.id, max_delay_ms=200)
                session.journal = journal
            else:
                resume = None
            stats.add_total(rows.num_rows, got_bytes)
            if spec.get("index", 0) == 0:
                session.ensure_dirs(dst.path, m.empty_dirs)
            try:
                # wall-clock times: chunks run on several workers, the UI lays them on one time axis
                started_at = datetime.now(UTC)
                with Reporter(stats, progress or (lambda s: None), progress_interval):
                    result = session.perform(
                        rows,
                        params,
                        src_root=_src_root(src, spec.get("root_is_file", False)),
                        dst_root=dst.path,
                        chunk_id=spec["id"],
                        resume=resume,
                    )
            finally:
                ended_at = datetime.now(UTC)
                if journal is not None:
                    journal.close()
            verify_summary = session.verify_summary()
        if store is not None and record is not None:
            store.record_chunk(record.id, result, started_at=started_at, ended_at=ended_at)
    finally:
        if store is not None:
            store.close()
    return TransferSummary.from_results(
        "chunk",
        [result],
        files=result.files,
        bytes=result.bytes,
        seconds=time.monotonic() - t0,
        algorithm=spec.get("algorithm", "fixed"),
        src=src.display,
        dst=dst.display,
        direction=session.direction,
        verify=verify_summary,
        connections_lost=getattr(session.pool, "lost", 0),
        transfer_key=spec["transfer_key"],
        transfer_id=record.id if record else None,
        host=_hostname(),
        pid=os.getpid(),
    ).as_dict()


def _join_transfer(store: Store, spec: dict, src: Endpoint, dst: Endpoint) -> tuple[TransferRecord, bool]:
    """The shared record this chunk journals into, and whether it existed before (then its
    journal holds earlier progress to resume from).

    A record that another chunk ended failed (fail_transfer) stays failed: this chunk still
    journals its files, but reopening the record would leave it running with nobody to close
    it (the verify step does not run after a failed chunk). Re-running the failed chunk itself
    reopens it, like any resumed copy."""
    key = spec["transfer_key"]
    latest = _find_transfer(store, key)
    if latest is not None and latest.state == "failed" and (latest.error or {}).get("chunk") not in (None, spec["id"]):
        return latest, True
    record = store.begin_transfer(key, src.display, dst.display, algorithm=spec.get("algorithm"), resume=True)
    return record, record.resumed


def _find_transfer(store: Store, key: str) -> TransferRecord | None:
    found = [r for r in store.list_transfers(key_prefix=key, limit=20) if r.key == key]
    return max(found, key=lambda r: r.id) if found else None


def fail_transfer(
    store_url: str | None, transfer_key: str, chunk_id: str, error: dict, src: Endpoint, dst: Endpoint
) -> TransferRecord:
    """A chunk failed for good (no retry left): end the transfer all chunks journal into as
    failed with ``error`` (job.error_record's fields), its ``what`` naming the chunk.

    Only the verify step closes a distributed transfer, and it never runs once a chunk failed:
    without this the record stayed running until its lease ran out. A record that already
    ended is left as it is; one the chunk never reached (it failed before its first contact)
    is created, so the failure shows in the store and the UI all the same."""
    store = _open_store(store_url)
    try:
        record = _find_transfer(store, transfer_key)
        if record is not None and record.state != "running":
            return record
        if record is None:
            record = store.begin_transfer(transfer_key, src.display, dst.display, resume=True)
        what = f"chunk {chunk_id}: {error['what']}"
        ended = {
            **error,
            "what": what,
            "chunk": chunk_id,
            "message": TransferError(what, error.get("where", ""), error.get("todo", "")).message,
        }
        return store.finish_transfer(record.id, "failed", error=ended)
    finally:
        store.close()


def _hostname() -> str:

    return socket.gethostname()


# -- verification -----------------------------------------------------------------------
def verify_tree(
    src: Endpoint,
    dst: Endpoint,
    manifest,
    *,
    algorithm: str = "sha256",
    repair: bool = False,
    params: TransferParams | None = None,
    retry: RetryPolicy | None = None,
    batch: int = 256,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Digest every manifest file at the source and at the destination and compare.

    Digests are computed where the bytes are (the stdlib helper over SSH exec on a
    remote side, then coreutils, then read-back; fsync and page cache dropped on a
    local side), by the same code the engine verifies with. With `repair`, files
    that are missing or differ are sent again, verified end to end on the way."""

    try:
        algorithm_info(algorithm)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    uri = manifest_uri_of(manifest)
    root_is_file = bool(manifest.get("root_is_file")) if isinstance(manifest, dict) else False
    m = read_manifest(uri)
    table = m.table
    paths, sizes = table[ms.PATH].to_pylist(), table[ms.SIZE].to_pylist()
    src_root = _src_root(src, root_is_file)
    join_src = posixpath.join if src.scheme == "sftp" else os.path.join
    join_dst = posixpath.join if dst.scheme == "sftp" else os.path.join
    t0 = time.monotonic()
    problems: list[dict] = []
    bad_rows: list[int] = []
    say = progress or (lambda line: None)
    with TransferSession(src, dst, skip_existing=False, retry=retry or RetryPolicy(), verify=algorithm) as session:
        sides = []
        for ep in (src, dst):
            side = DestinationDigests(algorithm, session.pool if ep.scheme == "sftp" else None)
            side.start()
            sides.append(side)
        try:
            for lo in range(0, len(paths), batch):
                idx = range(lo, min(lo + batch, len(paths)))
                s_items = [VerifyItem(i, join_src(src_root, paths[i]), [Piece(0, sizes[i], "")]) for i in idx]
                d_items = [VerifyItem(i, join_dst(dst.path, paths[i]), [Piece(0, sizes[i], "")]) for i in idx]
                s_res, d_res = sides[0].digests(s_items), sides[1].digests(d_items)
                for i, s, d in zip(idx, s_res, d_res):
                    if isinstance(s, BaseException):
                        problems.append({"path": paths[i], "problem": f"source unreadable: {_short(s)}"})
                        continue
                    if isinstance(d, BaseException):
                        what = (
                            "missing"
                            if isinstance(d, FileNotFoundError) or getattr(d, "code", "") == "ENOENT"
                            else f"unreadable: {_short(d)}"
                        )
                        problems.append({"path": paths[i], "problem": what})
                        bad_rows.append(i)
                    elif s != d:
                        problems.append({"path": paths[i], "problem": "digest differs"})
                        bad_rows.append(i)
                say(f"verified {min(lo + batch, len(paths))}/{len(paths)} files, {len(problems)} problems")
            where = {"source": sides[0].where, "destination": sides[1].where}
        finally:
            for side in sides:
                side.close()
        repaired = 0
        still_bad = list(problems)
        if repair and bad_rows:
            rows = table.take(pa.array(bad_rows, pa.int64()))
            result = session.perform(
                rows, params or TransferParams(pp=8, cc=2), src_root=src_root, dst_root=dst.path, chunk_id="repair"
            )
            fixed = {o.path for o in result.outcomes if o.ok}
            repaired = len(fixed)
            still_bad = [p for p in problems if p["path"] not in fixed]
            for p in still_bad:
                err = next((o.error for o in result.outcomes if o.path == p["path"] and o.error), None)
                if err:
                    p["problem"] += f"; repair failed: {err}"
    return {
        "algorithm": algorithm,
        "where": where,
        "files": len(paths),
        "bytes": int(sum(sizes)),
        "verified": len(paths) - len(problems),
        "mismatched": len(problems),
        "repaired": repaired,
        "problems": still_bad[:100],
        "problems_total": len(still_bad),
        "found": problems[:100],
        "seconds": round(time.monotonic() - t0, 3),
        "ok": not still_bad,
        "manifest_digest": m.digest(),
    }


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    return text[:200]


# -- the shared store record -------------------------------------------------------------
def transfer_summary(
    store_url: str | None, transfer_key: str, verify: dict | None = None, finish: bool = True
) -> dict | None:
    """The summary of all chunks journalled under `transfer_key`; with `finish`, close the record."""
    store = _open_store(store_url)
    try:
        recs = [r for r in store.list_transfers(key_prefix=transfer_key, limit=20) if r.key == transfer_key]
        rec = recs[0] if recs else None
        if rec is None:
            return None
        chunks = store.chunks(rec.id)
        counts = store.journal_counts(rec.id)
        failed_files = counts.get("failed", {}).get("files", 0)
        starts = [c.started_at for c in chunks if c.started_at] or [rec.started_at]
        ends = [c.ended_at for c in chunks if c.ended_at] or [rec.updated_at]
        summary = TransferSummary(
            "transfer",
            files=sum(v["files"] for v in counts.values()),
            bytes=sum(v["bytes"] for v in counts.values()),
            seconds=max((max(ends) - min(starts)).total_seconds(), 1e-6),
            bytes_moved=sum(c.bytes_moved for c in chunks),
            algorithm=rec.algorithm or "fixed",
            src=rec.src_url,
            dst=rec.dst_url,
            verify=verify or {},
            chunks=[
                {
                    "id": c.chunk_id,
                    "files": c.files,
                    "bytes": c.bytes,
                    "pp": c.pp,
                    "p": c.p,
                    "cc": c.cc,
                    "seconds": round(c.seconds, 3),
                    "throughput_mbit": round(c.throughput_mbit, 2),
                }
                for c in chunks
            ],
            failed=[{"path": p["path"], "error": p["problem"]} for p in (verify or {}).get("problems", [])],
            journal=counts,
            transfer_key=transfer_key,
            transfer_id=rec.id,
            store=store.masked_url,
            manifest_digest=(verify or {}).get("manifest_digest"),
        ).as_dict()
        if finish and rec.state == "running":
            # A verification (with repair) is the final word on the destination.
            ok = verify.get("ok", False) if verify is not None else failed_files == 0
            store.finish_transfer(rec.id, "succeeded" if ok else "failed", summary)
        return summary
    finally:
        store.close()
