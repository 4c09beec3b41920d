"""AttributeQueryTransferOperator: move only the selected columns of the matching records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from ..errors import TransferError
from ..hooks.endpoint import TransferEndpointHook
from ..protocols.naming import url_dataset_name
from ..query.expr import Where
from ..query.sources import is_http
from .arguments import number
from .failures import task_error
from .lineage import Ends, LineageMixin, asset_extra, declare_destination, emit_destination_events


class AttributeQueryTransferOperator(BaseOperator, LineageMixin):
    """Read the columns in ``select`` of the rows matching ``where`` at ``src``; write them to ``dst``.

    :param src: a Parquet, Arrow IPC or CSV file or directory of files: a path, ``file://``,
        ``sftp://host/path`` (or a remote path with ``src_conn_id``), or an ``http(s)://`` URL
        of one file. Templated.
    :param dst: the output file (or an existing directory), same forms as ``src`` except http. Templated.
    :param select: columns to keep, in order (``None``: all). Templated.
    :param where: filter in the query language of docs/query.md, e.g. ``"humidity > 50"``. Templated.
    :param format: ``parquet`` or ``csv`` (default: from ``dst``'s extension, else parquet). Templated.
    :param src_conn_id: Airflow ssh/sftp connection for an SFTP source.
    :param dst_conn_id: Airflow ssh/sftp connection for an SFTP destination.
    :param emit_asset: declare the output file as an outlet and emit its Asset event with
        ``files`` (1), ``bytes`` (written), ``rows`` and ``sha256`` in the extra (docs/lineage.md);
        a templated ``dst`` or one with ``dst_conn_id`` goes through an AssetAlias.
    :param asset_alias: name of that AssetAlias; default ``airflow_transfer/<dag_id>/<task_id>``.

    OpenLineage: the source as input dataset (rows and bytes scanned), the output file as output
    dataset (rows, bytes written, its sha256 as dataset version).

    Returns the query summary as XCom (rows, bytes read at the source, bytes written,
    sha256 of the output, seconds). Bad ``select`` / ``where`` fail the task with the position.
    """

    template_fields: Sequence[str] = ("src", "dst", "select", "where", "format", "src_conn_id", "dst_conn_id")
    ui_color = "#e3f1d4"

    def __init__(
        self,
        *,
        src: str,
        dst: str,
        select: list[str] | str | None = None,
        where: str | None = None,
        format: str | None = None,
        src_conn_id: str | None = None,
        dst_conn_id: str | None = None,
        progress_interval: float = 5.0,
        emit_asset: bool = True,
        asset_alias: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.src, self.dst = src, dst
        self.select, self.where, self.format = select, where, format
        self.src_conn_id, self.dst_conn_id = src_conn_id, dst_conn_id
        self.progress_interval = progress_interval
        if where is not None and not isinstance(where, str):
            raise ValueError(f"where must be a filter expression string (got {where!r})")
        if (
            select is not None
            and not isinstance(select, str)
            and not (isinstance(select, (list, tuple)) and all(isinstance(c, str) for c in select))
        ):
            raise ValueError(f"select must be a list of column names or one comma-separated string (got {select!r})")
        if format is not None and format not in ("parquet", "csv") and "{{" not in str(format):
            raise ValueError(f"format must be parquet or csv (got {format!r})")
        number("progress_interval", progress_interval)
        if where and "{{" not in where:
            Where.parse(where)  # syntax errors at DAG parse time, not at run time
        declare_destination(self, emit_asset, dst, dst_conn_id, asset_alias)

    def _conn_ids(self) -> tuple[str | None, str | None]:
        # A templated conn id left empty renders as "" (or "None"): no connection.
        return tuple(c if c not in ("", "None") else None for c in (self.src_conn_id, self.dst_conn_id))  # type: ignore[return-value]

    def planned_ends(self) -> Ends:
        src_conn, dst_conn = self._conn_ids()
        src = (
            [url_dataset_name(self.src)]
            if is_http(self.src)
            else Ends.of(TransferEndpointHook(src_conn).endpoint(self.src), None).inputs
        )
        return Ends(
            src, Ends.of(None, TransferEndpointHook(dst_conn).endpoint(self.dst)).outputs, inputs_same_version=False
        )

    def execute(self, context: Any) -> dict:
        # heavy: the query engine loads pyarrow and NumPy (~0.1 s); DAG files import this module
        from ..query.run import QueryRequest, run_query

        src_conn, dst_conn = self._conn_ids()
        try:
            src = self.src if is_http(self.src) else TransferEndpointHook(src_conn).endpoint(self.src)
            dst = TransferEndpointHook(dst_conn).endpoint(self.dst)
            self.transfer_lineage = lineage = self.planned_ends()
            self.log.info(
                "query %s -> %s: select %s where %s",
                getattr(src, "display", src),
                dst.display,
                self.select or "*",
                self.where or "(all rows)",
            )
            summary = run_query(
                QueryRequest(
                    src,
                    dst,
                    select=self.select,
                    where=self.where,
                    format=self.format or None,
                    progress=lambda p: self.log.info(
                        "%d rows out, %d bytes read, file %d/%d",
                        p["rows"],
                        p["bytes_read"],
                        p["files_done"] + 1,
                        p["files"],
                    ),
                    progress_interval=self.progress_interval,
                )
            )
        except TransferError as exc:  # a bad where / select: ValueError with a caret (failures.task_error)
            raise task_error(exc) from exc
        self.log.info(
            "query summary: %d of %d rows, read %d of %d source bytes (%.1f %%), wrote %d bytes, sha256 %s, %.2fs",
            summary["rows"],
            summary["rows_scanned"],
            summary["bytes_read"],
            summary["bytes_source"],
            summary["read_fraction"] * 100,
            summary["bytes_written"],
            summary["sha256"],
            summary["seconds"],
        )
        lineage.files, lineage.bytes, lineage.digest = 1, summary["bytes_written"], "sha256:" + summary["sha256"]
        lineage.read = (summary["files"], summary["bytes_read"])
        lineage.rows = (summary["rows_scanned"], summary["rows"])
        extra = asset_extra(lineage, rows=summary["rows"], sha256=summary["sha256"])
        del extra["manifest_digest"]  # one output file: its sha256 says more than a listing would
        emit_destination_events(self, context, lineage, extra)
        return summary
