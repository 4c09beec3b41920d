"""Operators for a transfer split into tasks: manifest -> plan -> mapped chunks -> verify.

    manifest = DatasetManifestOperator(task_id="manifest", src=..., src_conn_id=...)
    plan = ChunkPlanOperator(task_id="plan", manifest=manifest.output, algorithm="globus", min_chunks=4)
    move = ChunkTransferOperator.partial(task_id="move", src=..., dst=..., src_conn_id=...).expand(chunk=plan.output)
    check = VerifyTransferOperator(task_id="verify", src=..., dst=..., manifest=manifest.output,
                                   transfer_key=plan.output["transfer_key"], repair=True, outlets=[asset])
    manifest >> plan >> move >> check

The work is done in airflow_transfer/chunked.py (no Airflow there); these classes
resolve connections, log and hand XComs on. Every operator here declares
``operator_extra_links`` so a UI plugin can add links by extending the tuple.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from .. import airflow_conf
from ..engine.accounting import format_line, human_bytes
from ..engine.params import check_params
from ..engine.retry import RetryPolicy
from ..errors import TransferError
from ..hooks.endpoint import TransferEndpointHook
from ..protocols.endpoint import Endpoint
from .failures import fail_on_failed_files, task_error
from .lineage import Ends, LineageMixin, asset_extra, declare_destination, emit_destination_events
from .transfer import ALGORITHMS, summary_table


def _endpoint(conn_id: str | None, url: str) -> Endpoint:
    return TransferEndpointHook(conn_id).endpoint(url)


def histogram_table(info: dict) -> str:
    """The manifest's size histogram as a small table for the task log."""
    rows = [(h["size"], str(h["files"]), human_bytes(h["bytes"])) for h in info["histogram"]]
    rows.append(("total", str(info["files"]), human_bytes(info["bytes"])))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"  {a.ljust(w0)}  {b.rjust(w1)} files  {c}" for a, b, c in rows)


def verify_table(report: dict) -> str:
    rows = [
        (
            "checksum",
            f"{report['algorithm']} (source: {report['where']['source']}, "
            f"destination: {report['where']['destination']})",
        ),
        ("files", f"{report['files']} ({human_bytes(report['bytes'])})"),
        ("verified", str(report["verified"])),
        ("mismatched", str(report["mismatched"])),
        ("repaired", str(report["repaired"])),
        ("still wrong", str(report["problems_total"])),
        ("seconds", f"{report['seconds']:.2f}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


def _last_try(task: BaseOperator, context: Any, exc: BaseException) -> bool:
    """Whether Airflow will not run this task again after ``exc``: AirflowFailException, or no
    retry left (``max_tries`` grows when a task is cleared, so it counts rather than ``retries``)."""
    if isinstance(exc, AirflowFailException):
        return True
    ti = context["ti"]
    max_tries = getattr(ti, "max_tries", None)
    allowed = task.retries if max_tries is None else max_tries
    return int(ti.try_number or 1) > int(allowed or 0)


class _TransferStep(BaseOperator, LineageMixin):
    """Shared by the step operators: a place for extra links (UI plugin), the colour and the
    OpenLineage methods (each step records the ends it touched in ``transfer_lineage``)."""

    operator_extra_links: Sequence[Any] = ()
    ui_color = "#d9ecff"


class _SourceToDestination(_TransferStep):
    """A step that works on both ends of the transfer: ``src`` and ``dst``, each with its connection."""

    def __init__(
        self, *, src: str, dst: str, src_conn_id: str | None = None, dst_conn_id: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.src, self.dst = src, dst
        self.src_conn_id, self.dst_conn_id = src_conn_id, dst_conn_id

    def endpoints(self) -> tuple[Endpoint, Endpoint]:
        """Both ends as the core takes them (resolved when the task runs, from the rendered fields)."""
        return _endpoint(self.src_conn_id, self.src), _endpoint(self.dst_conn_id, self.dst)

    def planned_ends(self) -> Ends:
        return Ends.of(*self.endpoints())


class DatasetManifestOperator(_TransferStep):
    """List a source tree once into a Parquet manifest that later tasks share.

    The manifest is sorted by (size, path) and written to
    ``<staging_dir>/<dag_id>/<run_id>/<task_id>.parquet``, so a retry rewrites the
    same file and ChunkPlanOperator can describe chunks as row ranges of it.
    Remote trees are listed by a small stdlib lister over one SSH exec (SFTP
    readdir where the host allows no exec).

    :param src: source tree: ``sftp://[user@]host[:port]/path``, a remote path when
        ``src_conn_id`` is given, or a local path. Templated.
    :param src_conn_id: Airflow ssh/sftp connection of the source host. Templated.
    :param staging_dir: directory for the manifest; every worker that runs chunks must read
        it. Default ``[airflow_transfer] staging_dir``, else
        ``$AIRFLOW_HOME/airflow_transfer/manifests``. Templated.
    :param manifest_name: file name (without ``.parquet``) inside ``staging_dir``; default
        ``<dag_id>/<run_id>/<task_id>``. Templated.

    Returns (XCom) ``{"manifest": "file:///...parquet", "src", "files", "bytes", "empty_dirs",
    "root_is_file", "skipped_entries", "histogram": [{"size", "files", "bytes"}, ...]}``.
    """

    template_fields: Sequence[str] = ("src", "src_conn_id", "staging_dir", "manifest_name")

    def __init__(
        self,
        *,
        src: str,
        src_conn_id: str | None = None,
        staging_dir: str | None = None,
        manifest_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.src, self.src_conn_id = src, src_conn_id
        self.staging_dir, self.manifest_name = staging_dir, manifest_name

    def planned_ends(self) -> Ends:
        return Ends.of(_endpoint(self.src_conn_id, self.src), None)

    def execute(self, context: Any) -> dict:
        # heavy: chunked loads the engine, pyarrow and NumPy (~0.2 s); DAG files import this module
        from ..chunked import safe_name, stage_manifest

        ti = context["ti"]
        name = self.manifest_name or "/".join(safe_name(x) for x in (ti.dag_id, ti.run_id, ti.task_id))
        try:
            src = _endpoint(self.src_conn_id, self.src)
            info = stage_manifest(src, self.staging_dir or airflow_conf.staging_dir(), name)
        except TransferError as exc:
            raise task_error(exc) from exc
        self.transfer_lineage = Ends.of(src, None)
        self.transfer_lineage.files, self.transfer_lineage.bytes = info["files"], info["bytes"]
        self.transfer_lineage.digest = info["manifest_digest"]
        self.log.info("listed %s into %s\n%s", info["src"], info["manifest"], histogram_table(info))
        return info


class ChunkPlanOperator(_TransferStep):
    """Split a staged manifest into chunk specs for ``ChunkTransferOperator.expand(chunk=...)``.

    A spec is a row range of the manifest plus its pp / p / cc (a few hundred bytes,
    whatever the dataset size). ``fixed`` gives every chunk ``pp`` / ``parallelism`` /
    ``concurrency``; ``globus``, ``pcp``, ``mc``, ``adaptive-cc`` and ``auto``
    contribute their up-front plan for the link (docs/tuning.md). Algorithms that
    adapt from one chunk's throughput to the next need one task: use
    TunedTransferOperator for those.

    :param manifest: DatasetManifestOperator's output (``manifest.output``) or a manifest URI. Templated.
    :param algorithm: ``fixed``, ``globus``, ``pcp``, ``mc``, ``adaptive-cc`` or ``auto``. Templated.
    :param pp: files in flight per connection (``fixed`` only).
    :param parallelism: connections per large file (``fixed`` only).
    :param concurrency: connections moving different files (``fixed`` only).
    :param chunk_bytes: ``fixed`` only: cut the dataset into chunks of about this many bytes.
    :param min_chunks: split the largest chunks until there are at least this many (at most
        one per file), e.g. the number of workers.
    :param rtt_ms: round-trip time of the link, for the tuning models (with ``bandwidth_mbit``).
    :param bandwidth_mbit: bottleneck bandwidth of the link in Mbit/s.
    :param algorithm_options: extra options of the algorithm (``get_algorithm(name, **options)``).
    :param src: the transfer's source (as given to DatasetManifestOperator), optional. With ``dst``
        it selects the tuning library's row for source host -> destination host when no
        ``rtt_ms`` / ``bandwidth_mbit`` are given (docs/profilers.md). Templated.
    :param dst: the transfer's destination, optional (see ``src``). Templated.
    :param src_conn_id: Airflow ssh/sftp connection of the source host. Templated.
    :param dst_conn_id: Airflow ssh/sftp connection of the destination host. Templated.
    :param transfer_key: key of the store record every chunk journals into; default
        ``airflow:<dag_id>/<run_id>/<task_id>``. Templated.

    Returns (XCom) the list of specs; also pushes the key under ``transfer_key`` for
    VerifyTransferOperator (``plan.output["transfer_key"]``) and where the link figures came
    from under ``tuning`` (the summary's ``tuning`` object).
    """

    template_fields: Sequence[str] = (
        "manifest",
        "algorithm",
        "min_chunks",
        "transfer_key",
        "src",
        "dst",
        "src_conn_id",
        "dst_conn_id",
    )

    def __init__(
        self,
        *,
        manifest: Any,
        algorithm: str = "fixed",
        pp: int = 8,
        parallelism: int = 1,
        concurrency: int = 4,
        chunk_bytes: int | None = None,
        min_chunks: int = 1,
        rtt_ms: float | None = None,
        bandwidth_mbit: float | None = None,
        algorithm_options: dict | None = None,
        transfer_key: str | None = None,
        src: str | None = None,
        dst: str | None = None,
        src_conn_id: str | None = None,
        dst_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_params(pp, parallelism, concurrency)
        if isinstance(algorithm, str) and "{{" not in algorithm and algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose one of: {', '.join(ALGORITHMS)}")
        self.manifest, self.algorithm = manifest, algorithm
        self.pp, self.parallelism, self.concurrency = pp, parallelism, concurrency
        self.chunk_bytes, self.min_chunks = chunk_bytes, min_chunks
        self.rtt_ms, self.bandwidth_mbit = rtt_ms, bandwidth_mbit
        self.algorithm_options = algorithm_options
        self.transfer_key = transfer_key
        self.src, self.dst, self.src_conn_id, self.dst_conn_id = src, dst, src_conn_id, dst_conn_id

    def execute(self, context: Any) -> list[dict]:
        # heavy: chunked and job load the engine, pyarrow and NumPy (~0.25 s); DAG files import this module
        from ..chunked import plan_chunks, starting_point
        from ..job import link_from_args

        ti = context["ti"]
        key = self.transfer_key or f"airflow:{ti.dag_id}/{ti.run_id}/{ti.task_id}"
        try:
            src = _endpoint(self.src_conn_id, self.src) if self.src else None
            dst = _endpoint(self.dst_conn_id, self.dst) if self.dst else None
            link, start = starting_point(
                src,
                dst,
                link_from_args(self.rtt_ms, self.bandwidth_mbit, None),
                store_url=airflow_conf.store_url(),
                algorithm=self.algorithm,
            )
            specs = plan_chunks(
                self.manifest,
                algorithm=self.algorithm,
                params=check_params(self.pp, self.parallelism, self.concurrency),
                link=link,
                transfer_key=key,
                min_chunks=int(self.min_chunks),
                chunk_bytes=self.chunk_bytes,
                options=self.algorithm_options,
                start=start,
            )
        except TransferError as exc:
            raise task_error(exc) from exc
        tuning = start.summary()
        self.log.info("link figures: %s", tuning["source"])
        ti.xcom_push(key="tuning", value=tuning)
        lines = [
            f"  {s['id']}: rows [{s['start']}, {s['stop']}), {s['files']} files, {human_bytes(s['bytes'])}, "
            f"pp={s['params']['pp']} p={s['params']['p']} cc={s['params']['cc']}"
            for s in specs
        ]
        self.log.info(
            "%s planned %d chunks (transfer key %s)\n%s",
            self.algorithm,
            len(specs),
            key,
            "\n".join(lines) or "  (empty dataset)",
        )
        ti.xcom_push(key="transfer_key", value=key)
        return specs


class ChunkTransferOperator(_SourceToDestination):
    """Move one chunk of a planned transfer; meant to be mapped over ChunkPlanOperator's output.

    The files are the spec's rows of the staged manifest; they are written under a
    temporary name, verified end to end (``verify``) and renamed. All chunks of a
    run journal into one store transfer (the spec's ``transfer_key``), so an
    Airflow retry of a chunk resumes its partial files and skips finished ones.

    :param chunk: one chunk spec (``.expand(chunk=plan.output)``).
    :param src: the source given to DatasetManifestOperator. Templated.
    :param dst: destination directory root. Templated.
    :param src_conn_id: Airflow ssh/sftp connection of the source host. Templated.
    :param dst_conn_id: Airflow ssh/sftp connection of the destination host. Templated.
    :param max_cc: cap on the chunk's concurrency, e.g. this task's ``pool_slots`` when a pool
        limits a link's connections (docs/operators.md, "Capping a link").
    :param verify: checksum algorithm for end-to-end verification, or None to turn it off.
    :param progress_interval: seconds between progress lines in the task log.
    :param retries_per_file: attempts per file for transient errors.
    :param deadline: seconds after which transient errors are no longer retried.

    Returns (XCom) the chunk's summary (fields: docs/summary.md; one entry in
    ``chunks``) plus ``host`` and ``pid`` of the worker that ran it.
    """

    template_fields: Sequence[str] = ("src", "dst", "src_conn_id", "dst_conn_id")

    def __init__(
        self,
        *,
        chunk: dict,
        max_cc: int | None = None,
        verify: str | None = "sha256",
        progress_interval: float = 5.0,
        retries_per_file: int = 5,
        deadline: float = 3600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if max_cc is not None and (isinstance(max_cc, bool) or not isinstance(max_cc, int) or max_cc < 1):
            raise ValueError(f"max_cc must be a whole number >= 1 (got {max_cc!r})")
        self.chunk = chunk
        self.max_cc, self.verify = max_cc, verify
        self.progress_interval = progress_interval
        self.retries_per_file, self.deadline = retries_per_file, deadline

    def execute(self, context: Any) -> dict:
        self._summary: dict | None = None
        try:
            return self._execute(context)
        except Exception as exc:
            if _last_try(self, context, exc):
                self._end_shared_transfer(exc)
            raise

    def _end_shared_transfer(self, exc: Exception) -> None:
        """This chunk failed for good: end the transfer all chunks share as failed, with the error
        (its verify step will not run to close it). With retries left it stays running."""
        # heavy: chunked and job load the engine, pyarrow and NumPy (~0.3 s); execute imported them already
        from ..chunked import fail_transfer
        from ..job import error_record, files_failed_record

        spec = self.chunk
        try:
            src, dst = self.endpoints()
            if self._summary is not None and self._summary["failed"]:
                error = files_failed_record(self._summary, dst.display)
            else:
                # task_error already worded the core error for Airflow; it is the cause
                core = exc.__cause__ if isinstance(exc.__cause__, TransferError) else exc
                error = error_record(core)
            fail_transfer(airflow_conf.store_url(), spec["transfer_key"], spec["id"], error, src, dst)
        except Exception as store_exc:  # noqa: BLE001 - the task fails with the chunk's error either way
            self.log.warning("could not record transfer %s as failed (%s)", spec.get("transfer_key"), store_exc)

    def _execute(self, context: Any) -> dict:
        # heavy: chunked loads the engine, pyarrow and NumPy (~0.2 s); DAG files import this module
        from ..chunked import run_chunk

        spec = dict(self.chunk)
        if self.max_cc is not None and spec.get("params", {}).get("cc", 1) > self.max_cc:
            self.log.info("cc %d capped to %d (max_cc)", spec["params"]["cc"], self.max_cc)
            spec["params"] = {**spec["params"], "cc": self.max_cc}
        try:
            src, dst = self.endpoints()
            self.transfer_lineage = lineage = Ends.of(src, dst)
            self.log.info(
                "%s: rows [%s, %s) of %s, %s files, %s, pp=%s p=%s cc=%s, %s -> %s",
                spec.get("id"),
                spec.get("start"),
                spec.get("stop"),
                spec.get("manifest"),
                spec.get("files"),
                human_bytes(spec.get("bytes", 0)),
                spec["params"]["pp"],
                spec["params"]["p"],
                spec["params"]["cc"],
                src.display,
                dst.display,
            )
            summary = run_chunk(
                spec,
                src,
                dst,
                store_url=airflow_conf.store_url(),
                progress=lambda s: self.log.info("%s", format_line(s)),
                progress_interval=self.progress_interval,
                verify=self.verify,
                retry=RetryPolicy(max_attempts=self.retries_per_file, deadline_s=self.deadline),
            )
        except TransferError as exc:
            raise task_error(exc) from exc
        self.log.info("chunk summary (host %s, pid %s):\n%s", summary["host"], summary["pid"], summary_table(summary))
        self._summary = summary
        lineage.files, lineage.bytes = summary["files"], summary["bytes"]  # this chunk's share
        fail_on_failed_files(self, context, summary, of=f" of {spec['id']}", again="retry")
        return summary


class VerifyTransferOperator(_SourceToDestination):
    """Verify a destination against the source, file by file, and optionally repair it.

    Digests are computed where the bytes are: on an SFTP host by the stdlib checksum
    helper over SSH exec (then coreutils, then read-back), locally after fsync with
    the page cache dropped; both sides of every file in the manifest are compared.
    Missing or different files are reported and, with ``repair``, sent again (verified
    end to end). With ``transfer_key`` the store record the chunks journalled into is
    closed with the overall summary (succeeded only when verification passed).

    :param src: the source given to DatasetManifestOperator. Templated.
    :param dst: destination directory root. Templated.
    :param manifest: DatasetManifestOperator's output or a manifest URI. Templated.
    :param src_conn_id: Airflow ssh/sftp connection of the source host. Templated.
    :param dst_conn_id: Airflow ssh/sftp connection of the destination host. Templated.
    :param algorithm: checksum algorithm (sha256, md5, blake2b, adler32, crc32c, xxh128, blake3).
    :param repair: re-send files that are missing or differ.
    :param transfer_key: the plan's key (``plan.output["transfer_key"]``) to close the shared
        store record and log the overall summary. Templated.
    :param fail_on_mismatch: fail the task when files are still wrong after any repair.
    :param emit_asset: declare the destination as an outlet and emit its Asset event with
        ``files``, ``bytes``, ``manifest_digest`` and ``verified_ok`` in the extra when the task
        succeeds (docs/lineage.md): the verified destination is the transfer's result, so the
        chunks emit none. A literal ``dst`` without ``dst_conn_id`` is a fixed Asset, otherwise
        an AssetAlias carries it.
    :param asset_alias: name of that AssetAlias; default ``airflow_transfer/<dag_id>/<task_id>``.

    Returns (XCom) ``{"verify": {...}, "summary": {...} | None}``: the verification report
    (counts, where digests were computed, up to 100 problems) and the overall transfer summary.
    """

    template_fields: Sequence[str] = ("src", "dst", "manifest", "src_conn_id", "dst_conn_id", "transfer_key")

    def __init__(
        self,
        *,
        manifest: Any,
        algorithm: str = "sha256",
        repair: bool = False,
        transfer_key: str | None = None,
        fail_on_mismatch: bool = True,
        emit_asset: bool = True,
        asset_alias: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.manifest = manifest
        self.algorithm, self.repair = algorithm, repair
        self.transfer_key, self.fail_on_mismatch = transfer_key, fail_on_mismatch
        declare_destination(self, emit_asset, self.dst, self.dst_conn_id, asset_alias)

    def execute(self, context: Any) -> dict:
        # heavy: chunked loads the engine, pyarrow and NumPy (~0.2 s); DAG files import this module
        from ..chunked import transfer_summary, verify_tree

        try:
            src, dst = self.endpoints()
            self.transfer_lineage = lineage = Ends.of(src, dst)
            report = verify_tree(
                src,
                dst,
                self.manifest,
                algorithm=self.algorithm,
                repair=self.repair,
                progress=lambda line: self.log.info("%s", line),
            )
            summary = (
                transfer_summary(airflow_conf.store_url(), self.transfer_key, verify=report)
                if self.transfer_key
                else None
            )
        except TransferError as exc:
            raise task_error(exc) from exc
        self.log.info("verification of %s against %s:\n%s", dst.display, src.display, verify_table(report))
        for p in report["found"][:20]:
            self.log.warning("%s: %s", p["path"], p["problem"])
        if summary is not None:
            self.log.info("transfer summary (all chunks):\n%s", summary_table({**summary, "files_skipped": 0}))
        result = {"verify": report, "summary": summary}
        lineage.files, lineage.bytes, lineage.digest = report["files"], report["bytes"], report["manifest_digest"]
        if not report["ok"] and self.fail_on_mismatch:
            context["ti"].xcom_push(key="verify", value=report)
            raise RuntimeError(
                f"{report['problems_total']} of {report['files']} files are missing or differ at "
                f"{dst.display}" + ("" if self.repair else "; set repair=True to re-send them")
            )
        extra = asset_extra(lineage, verified_ok=report["ok"], transfer_id=summary["transfer_id"] if summary else None)
        emit_destination_events(self, context, lineage, extra)
        return result
