"""TunedTransferOperator: one task moves a whole dataset with the shared core."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowTaskTerminated, AirflowTaskTimeout

from .. import airflow_conf
from ..engine.accounting import format_line
from ..engine.params import check_params
from ..engine.retry import RetryPolicy
from ..errors import Interrupted, TransferError
from ..hooks.endpoint import TransferEndpointHook
from ..plugins.links import TransferPageLink
from ..protocols.endpoint import Endpoint
from ..protocols.naming import dataset_names, url_dataset_name
from ..protocols.resolve import resolve_endpoint
from .arguments import choice, names, number, templated, text, whole
from .failures import airflow_words, fail_on_failed_files, failed_files_error, task_error
from .lineage import Ends, LineageMixin, asset_extra, declare_destination, emit_destination_events


def summary_table(summary: dict) -> str:
    """The final summary as a small readable table for the task log."""
    rows = [
        (
            "files",
            f"{summary['files']} ({summary['files_skipped']} already present, "
            f"{summary.get('files_resumed', 0)} resumed, {summary.get('files_retried', 0)} retried, "
            f"{len(summary['failed'])} failed)",
        ),
        ("bytes", f"{summary['bytes']}"),
        ("seconds", f"{summary['seconds']:.2f}"),
        ("throughput", f"{summary['throughput_mbit']:.1f} Mbit/s"),
        ("algorithm", summary["algorithm"]),
    ]
    for c in summary["chunks"]:
        rows.append(
            (c["id"], f"{c['files']} files, pp={c['pp']} p={c['p']} cc={c['cc']}, {c['throughput_mbit']:.1f} Mbit/s")
        )
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


ALGORITHMS = ("fixed", "globus", "pcp", "mc", "adaptive-cc", "auto")
# Airflow stopping the task from outside: the copy is recorded interrupted, not failed.
STOPPED_BY_AIRFLOW: tuple[type[BaseException], ...] = (AirflowTaskTimeout, AirflowTaskTerminated)
# The transfer states the return value and the ``summary`` XCom carry (store/schema.py's).
SUCCEEDED, FAILED = "succeeded", "failed"


def _check_algorithm(name: str) -> None:
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of: {', '.join(ALGORITHMS)}")


class TunedTransferOperator(BaseOperator, LineageMixin):
    """Copy a dataset from `src` to `dst` with pipelining, parallelism and concurrency.

    :param src: source URL or path (``sftp://host/path``, ``file:///path``, a plain path,
        or a remote path when ``src_conn_id`` is given). Templated.
    :param dst: destination directory root, same forms as ``src``. Templated.
    :param pairs: instead of ``src``/``dst``, a request list of ``[src, dst]`` URL pairs across
        many hosts, grouped by host pair and planned group by group (docs/protocols.md). Templated.
    :param src_conn_id: Airflow ssh/sftp connection for the source host.
    :param dst_conn_id: Airflow ssh/sftp connection for the destination host.
    :param pp: file operations kept outstanding per connection (pipelining).
    :param parallelism: connections moving byte ranges of one large file.
    :param concurrency: connections moving different files at the same time.
    :param algorithm: how the knobs are chosen per chunk: ``fixed`` uses pp / parallelism /
        concurrency as given; ``globus``, ``pcp``, ``mc``, ``adaptive-cc`` or ``auto`` tune them
        (docs/tuning.md). Templated.
    :param rtt_ms: round-trip time of the link for the tuning models (with ``bandwidth_mbit``).
    :param bandwidth_mbit: bottleneck bandwidth of the link in Mbit/s.
    :param progress_interval: seconds between progress lines in the task log.
    :param transfer_key: journal key; default ``airflow:<dag>/<task>/<run>/<map index>``, so an
        Airflow retry of the task resumes where the failed try stopped.
    :param retries_per_file: attempts per file for transient errors (timeouts, dropped connections).
    :param deadline: seconds after which transient errors are no longer retried.
    :param verify: checksum algorithm for end-to-end verification (``sha256`` by default), or
        ``None`` / ``"none"`` to turn it off (docs/integrity.md).
    :param verify_mode: ``auto`` (default: ``block`` for uploads, ``file`` otherwise), ``file``,
        ``sequential`` or ``block`` (docs/integrity.md).
    :param alt_protocols: fall-back protocols for the remote end, in order, e.g. ``["ftp"]`` or
        ``["ftp://user@host:2121"]``: after ``switch_after`` consecutive failures (or one copy that
        reported success with the wrong size) the transfer continues on the next one and switches
        back when the preferred protocol answers again (docs/protocols.md).
    :param switch_after: consecutive failures before switching protocol.
    :param probe_interval: seconds between probes of the preferred protocol while on an alternate.
    :param emit_asset: declare the destination as an outlet and, when the copy succeeded, emit its
        Asset event with ``files``, ``bytes`` and ``manifest_digest`` in the extra (docs/lineage.md).
        A literal ``dst`` without ``dst_conn_id`` is a fixed Asset (``file:///path``,
        ``sftp://host:port/path``); otherwise the Asset is attached to an AssetAlias when the task runs.
    :param asset_alias: name of that AssetAlias; default ``airflow_transfer/<dag_id>/<task_id>``.

    OpenLineage (with the OpenLineage provider installed): the source and destination as input
    and output datasets, with their files and bytes and the manifest digest as dataset version.

    Returns the transfer summary (fields: docs/summary.md) plus ``state`` (``succeeded``) as
    XCom: counts and per-chunk figures only, never the file list. Fails if any file failed,
    after pushing the summary (``state`` ``failed``) under the key ``summary``. A copy that an
    error or a kill stopped pushes how the store recorded it under the key ``transfer``:
    ``{"transfer_id", "transfer_key", "state", "error"}`` (docs/operators.md).

    Errors a retry cannot fix (host key, authentication, bad arguments) fail the task without
    retrying it (AirflowFailException); SIGTERM from Airflow (a timeout, the task marked failed)
    stops the copy and records it ``interrupted``.
    """

    template_fields: Sequence[str] = ("src", "dst", "src_conn_id", "dst_conn_id", "transfer_key", "algorithm", "pairs")
    ui_color = "#d9ecff"
    operator_extra_links = (TransferPageLink(),)

    def __init__(
        self,
        *,
        src: str | None = None,
        dst: str | None = None,
        pairs: Sequence[Sequence[str]] | str | None = None,
        src_conn_id: str | None = None,
        dst_conn_id: str | None = None,
        pp: int = 8,
        parallelism: int = 1,
        concurrency: int = 4,
        algorithm: str = "fixed",
        progress_interval: float = 5.0,
        transfer_key: str | None = None,
        retries_per_file: int = 5,
        deadline: float = 3600.0,
        rtt_ms: float | None = None,
        bandwidth_mbit: float | None = None,
        verify: str | None = "sha256",
        verify_mode: str = "auto",
        alt_protocols: Sequence[str] | None = None,
        switch_after: int = 3,
        probe_interval: float = 5.0,
        emit_asset: bool = True,
        asset_alias: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)

        check_params(pp, parallelism, concurrency)  # fail at DAG parse time, not at run time
        if not templated(algorithm):
            _check_algorithm(algorithm)
        for name, value in (("src", src), ("dst", dst)):
            text(name, value)
        if pairs is not None and not isinstance(pairs, (str, list, tuple)):
            raise ValueError(f"pairs must be a list of [src, dst] pairs (got {pairs!r})")
        if bool(pairs) == bool(src and dst) or bool(src) != bool(dst):
            raise ValueError("give src and dst, or pairs=[[src, dst], ...]")
        if link_given := (rtt_ms is not None or bandwidth_mbit is not None):
            number("rtt_ms", rtt_ms)  # both positive and finite, like --rtt-ms / --bandwidth-mbit
            number("bandwidth_mbit", bandwidth_mbit)
        self.src, self.dst, self.pairs = src, dst, pairs
        self.src_conn_id, self.dst_conn_id = src_conn_id, dst_conn_id
        self.pp, self.parallelism, self.concurrency = pp, parallelism, concurrency
        self.algorithm = algorithm
        self.progress_interval = number("progress_interval", progress_interval)
        self.transfer_key = text("transfer_key", transfer_key)
        self.retries_per_file = whole("retries_per_file", retries_per_file)
        self.deadline = number("deadline", deadline)
        self.rtt_ms, self.bandwidth_mbit = (rtt_ms, bandwidth_mbit) if link_given else (None, None)
        if verify not in (None, "none"):
            text("verify", verify)
        self.verify = None if verify in (None, "none") else verify
        self.verify_mode = choice("verify_mode", verify_mode, ("auto", "sequential", "file", "block"))
        self.alt_protocols = names("alt_protocols", alt_protocols)  # fall-back protocols (docs/protocols.md)
        self.switch_after = whole("switch_after", switch_after)
        self.probe_interval = number("probe_interval", probe_interval)
        self._copying = False
        declare_destination(self, emit_asset, dst, dst_conn_id, text("asset_alias", asset_alias))

    def planned_ends(self) -> Ends:
        if self.pairs:
            pairs = json.loads(self.pairs) if isinstance(self.pairs, str) else self.pairs
            return Ends([url_dataset_name(str(a)) for a, _ in pairs], [url_dataset_name(str(b)) for _, b in pairs])
        return Ends.of(
            TransferEndpointHook(self.src_conn_id).endpoint(str(self.src)),
            TransferEndpointHook(self.dst_conn_id).endpoint(str(self.dst)),
        )

    def on_kill(self) -> None:
        """Airflow's SIGTERM (a timeout, the task marked failed or cleared): stop the copy here, in
        the task's main thread, so it records itself interrupted before the process goes."""
        if self._copying:
            raise Interrupted("stopped by SIGTERM: Airflow is stopping the task")

    def execute(self, context: Any) -> dict:
        self._copying = True
        try:
            return self._execute(context)
        except BaseException as exc:
            _push_transfer_end(self, context, exc)
            raise
        finally:
            self._copying = False

    def _execute(self, context: Any) -> dict:
        if self.pairs:
            return _run_pairs(self, self.pairs, context)
        if self.src is None or self.dst is None:  # __init__ takes src and dst, or pairs
            raise ValueError("give src and dst, or pairs=[[src, dst], ...]")
        # heavy: job loads the engine, pyarrow and NumPy (~0.3 s); DAG files import this module
        from ..job import CopyRequest, link_from_args, run_copy

        try:
            params = check_params(self.pp, self.parallelism, self.concurrency)
            _check_algorithm(self.algorithm)
            link = link_from_args(self.rtt_ms, self.bandwidth_mbit, None)
            src = TransferEndpointHook(self.src_conn_id).endpoint(self.src)
            dst = TransferEndpointHook(self.dst_conn_id).endpoint(self.dst)
            self.transfer_lineage = lineage = Ends.of(src, dst)
            if self.algorithm == "fixed":
                self.log.info(
                    "copying %s -> %s with pp=%d p=%d cc=%d", src.display, dst.display, params.pp, params.p, params.cc
                )
            else:
                self.log.info(
                    "copying %s -> %s, pp/p/cc tuned per chunk by %s", src.display, dst.display, self.algorithm
                )
            summary = run_copy(
                CopyRequest(
                    src,
                    dst,
                    params,
                    algorithm=self.algorithm,
                    progress=lambda s: self.log.info("%s", format_line(s)),
                    progress_interval=self.progress_interval,
                    store_url=airflow_conf.store_url(),
                    transfer_key=self.transfer_key or airflow_conf.transfer_key(context),
                    retry=RetryPolicy(max_attempts=self.retries_per_file, deadline_s=self.deadline),
                    link=link,
                    verify=self.verify,
                    verify_mode=self.verify_mode,
                    alt_protocols=self.alt_protocols,
                    switch_after=self.switch_after,
                    probe_interval=self.probe_interval,
                    log=self.log.info,
                    make_endpoint=_alternate_maker(self.dst_conn_id if dst.scheme != "file" else self.src_conn_id),
                    interrupted_by=STOPPED_BY_AIRFLOW,
                    reword=airflow_words,
                )
            )
        except TransferError as exc:
            raise task_error(exc) from exc
        self.log.info("transfer summary:\n%s", summary_table(summary))
        summary = {**summary, "state": FAILED if summary["failed"] else SUCCEEDED}
        lineage.files, lineage.bytes, lineage.digest = summary["files"], summary["bytes"], summary["manifest_digest"]
        fail_on_failed_files(self, context, summary)
        emit_destination_events(self, context, lineage, asset_extra(lineage, transfer_id=summary["transfer_id"]))
        return summary


def _run_pairs(op: TunedTransferOperator, pairs: Sequence[Sequence[str]] | str, context: Any) -> dict:
    """pairs=: one request list, group by group (request_list.run_request_list)."""
    # heavy: job and request_list load the engine, pyarrow and NumPy (~0.3 s); DAG files import this module
    from ..job import CopyRequest, link_from_args
    from ..request_list import run_request_list

    if isinstance(pairs, str):  # rendered from a template
        pairs = json.loads(pairs)
    try:
        base = CopyRequest(
            Endpoint("file", "/"),
            Endpoint("file", "/"),
            check_params(op.pp, op.parallelism, op.concurrency),
            algorithm=op.algorithm,
            store_url=airflow_conf.store_url(),
            retry=RetryPolicy(max_attempts=op.retries_per_file, deadline_s=op.deadline),
            link=link_from_args(op.rtt_ms, op.bandwidth_mbit, None),
            verify=op.verify,
            alt_protocols=op.alt_protocols,
            switch_after=op.switch_after,
            probe_interval=op.probe_interval,
            log=op.log.info,
            interrupted_by=STOPPED_BY_AIRFLOW,
            reword=airflow_words,
        )
        summary = run_request_list(
            base,
            [(str(a), str(b)) for a, b in pairs],
            lambda url: TransferEndpointHook(None).endpoint(url),
            on_group=lambda g: op.log.info(
                "group %s -> %s: %d pairs, %d files, pp=%d p=%d cc=%d (%s)",
                g["src_host"],
                g["dst_host"],
                g["pairs"],
                g["files"],
                g["params"]["pp"],
                g["params"]["p"],
                g["params"]["cc"],
                g["params_source"],
            ),
        )
    except TransferError as exc:
        raise task_error(exc) from exc
    # lineage: every pair's ends; each destination's event carries its own pair's figures
    ends = [
        (TransferEndpointHook(None).endpoint(str(a)), TransferEndpointHook(None).endpoint(str(b))) for a, b in pairs
    ]
    op.transfer_lineage = Ends(
        [n for s, _ in ends for n in dataset_names(s)],
        [n for _, d in ends for n in dataset_names(d)],
        summary["files"],
        summary["bytes"],
    )
    if summary["failed"]:
        raise failed_files_error(summary)
    runs = {(t["src"], t["dst"]): t for g in summary["groups"] for t in g["transfers"]}
    for src, dst in ends:
        run = runs[(src.display, dst.display)]
        pair = Ends.of(src, dst)
        pair.files, pair.bytes, pair.digest = run["files"], run["bytes"], run["manifest_digest"]
        emit_destination_events(op, context, pair, asset_extra(pair, transfer_id=run["transfer_id"]))
    return summary


def _push_transfer_end(op: BaseOperator, context: Any, exc: BaseException) -> None:
    """XCom ``transfer``: how the store recorded the copy that ``exc`` stopped (the task's return
    value is lost when it fails)."""
    # heavy: job loads the engine, pyarrow and NumPy (~0.3 s); execute imported it already
    from ..job import transfer_end

    end = transfer_end(exc)
    if end is None and exc.__cause__ is not None:  # task_error(core error) from core error
        end = transfer_end(exc.__cause__)
    if end is None:
        return
    try:
        context["ti"].xcom_push(key="transfer", value=end)
    except Exception as push_exc:  # noqa: BLE001 - the task fails with the copy's error either way
        op.log.warning("could not push XCom 'transfer' (%s)", push_exc)


def _alternate_maker(conn_id: str | None):
    """URL -> Endpoint for alt_protocols: sftp alternates use the remote end's connection."""

    def make(url: str):
        if url.startswith("sftp://"):
            return TransferEndpointHook(conn_id).endpoint(url)
        return resolve_endpoint(url)

    return make
