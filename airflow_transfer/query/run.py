"""One attribute-based transfer: read the selected columns of the matching rows, write them at DST.

    summary = run_query(QueryRequest(src, dst, select=["temperature", "time"], where="humidity > 50"))

`src` is an Endpoint (file / sftp) or an http(s) URL; `dst` an Endpoint
naming the output file (or an existing directory: the output is then named
after the source). Nothing appears under the final name until the whole
result is written; then the summary says what was read and written.
"""

from __future__ import annotations

import os
import posixpath
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from ..errors import TransferError, UsageError
from ..protocols.pool import SFTPPool
from .expr import QueryError, Where, parse_select
from .readers import READERS, ScanCounts
from .sink import LocalSink, SFTPSink, Sink
from .sources import FORMATS, QuerySource, SourceFile, sniff, source_for
from .syntax import known_columns

OUTPUT_FORMATS = ("parquet", "csv")
ROW_GROUP_ROWS = 128 * 1024  # rows buffered before a Parquet row group is written
ROW_GROUP_BYTES = 64 * 1024 * 1024


@dataclass
class QueryRequest:
    src: Any  # Endpoint or an http(s) URL
    dst: Any  # Endpoint
    select: list[str] | str | None = None
    where: str | None = None
    format: str | None = None  # parquet / csv; None: from the destination's extension, else parquet
    cafile: str | None = None  # extra CA bundle for https sources
    progress: Callable[[dict], None] | None = None
    progress_interval: float = 5.0


def output_format(fmt: str | None, dst_path: str) -> str:
    if fmt:
        fmt = fmt.lower()
        if fmt not in OUTPUT_FORMATS:
            raise UsageError(f"unknown output format {fmt!r}", "", f"choose one of: {', '.join(OUTPUT_FORMATS)}")
        return fmt
    return "csv" if dst_path.lower().endswith(".csv") else "parquet"


def _dst_is_dir(dst, pool) -> bool:
    if dst.path.endswith("/"):
        return True
    if dst.scheme == "sftp":
        conn = pool.acquire()
        try:
            try:
                return conn.wire.stat(dst.path).is_dir
            except OSError:
                return False
        finally:
            pool.release(conn)
    return os.path.isdir(dst.path)


def _open_sink(dst, fmt: str, src_name: str, pool) -> Sink:
    path = dst.path
    if _dst_is_dir(dst, pool):
        stem = posixpath.basename(src_name.rstrip("/")) or "query"
        for ext in (
            ".parquet",
            ".pq",
            ".parq",
            ".arrow",
            ".feather",
            ".ipc",
            ".arrows",
            ".csv.gz",
            ".csv.bz2",
            ".csv.zst",
            ".csv",
        ):
            if stem.lower().endswith(ext):
                stem = stem[: -len(ext)]
                break
        path = posixpath.join(path, f"{stem}.query.{fmt}")
    if dst.scheme == "sftp":
        return SFTPSink(pool, path, dst.host_label)
    return LocalSink(path)


class _Writer:
    """Parquet (row groups of ~ROW_GROUP_ROWS) or CSV, streamed into a Sink."""

    def __init__(self, sink: Sink, fmt: str, schema: pa.Schema) -> None:
        self.sink, self.fmt, self.schema = sink, fmt, schema
        self.rows = 0
        self._buf: list[pa.RecordBatch] = []
        self._buf_rows = self._buf_bytes = 0
        if fmt == "parquet":
            self._w = pq.ParquetWriter(sink, schema)
        else:
            self._w = pcsv.CSVWriter(sink, schema)

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        if self.fmt == "csv":
            self._w.write_batch(batch)
            return
        self._buf.append(batch)
        self._buf_rows += batch.num_rows
        self._buf_bytes += batch.nbytes
        if self._buf_rows >= ROW_GROUP_ROWS or self._buf_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self._w.write_table(pa.Table.from_batches(self._buf, schema=self.schema), row_group_size=ROW_GROUP_ROWS)
            self._buf, self._buf_rows, self._buf_bytes = [], 0, 0

    def close(self) -> None:
        self._flush()
        self._w.close()


def _reader_for(source: QuerySource, f: SourceFile, counts: ScanCounts):
    rf = source.open(f)
    try:
        fmt = f.fmt
        if fmt is None:
            head = rf.read_at(0, 8)
            tail = rf.read_at(max(0, rf.size - 4), 4)
            fmt = f.fmt = sniff(head, tail)
        return rf, READERS[fmt](rf, counts)
    except BaseException:
        rf.close()
        raise


def run_query(req: QueryRequest) -> dict:
    t0 = time.monotonic()
    where = Where.parse(req.where) if req.where and req.where.strip() else None
    select = parse_select(req.select)
    dst_fmt = output_format(req.format, req.dst.path)
    source = source_for(req.src, req.cafile)
    counts = ScanCounts()
    dst_pool = warming = None
    if req.dst.scheme == "sftp":
        dst_pool = SFTPPool(req.dst.target)
        # The destination's SSH handshake (several round trips) overlaps the source's.
        warmer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-dst")
        warming = warmer.submit(lambda: dst_pool.release(dst_pool.acquire()))
        warmer.shutdown(wait=False)
    sink: Sink | None = None
    writer: _Writer | None = None
    try:
        files = source.files()
        out_cols: list[str] = []
        expr = None
        needed: list[str] = []
        out_schema: pa.Schema | None = None
        bytes_source = 0
        last_report = time.monotonic()
        for index, f in enumerate(files):
            rf, reader = _reader_for(source, f, counts)
            try:
                bytes_source += rf.size
                if writer is None:  # the first file: it decides the columns, the filter and the output
                    out_cols = select or list(reader.names)
                    _check_select(out_cols, reader.names, source.display)
                    if where is not None:
                        where.check_names(reader.names)
                    needed = list(dict.fromkeys(out_cols + (where.columns if where else [])))
                    schema = reader.schema_for(needed)
                    expr = where.compile(schema) if where is not None else None
                    out_schema = pa.schema([schema.field(n) for n in out_cols])
                    if warming is not None:
                        warming.result()  # its connection error, if any, is the one to report
                    sink = _open_sink(req.dst, dst_fmt, source.display, dst_pool)
                    writer = _Writer(sink, dst_fmt, out_schema)
                else:
                    missing = [n for n in needed if n not in reader.names]
                    if missing:
                        raise TransferError(
                            f"column {missing[0]!r} is missing in {f.path}",
                            source.display,
                            "every file of a directory source needs the queried columns",
                        )
                    reader.schema_for(needed)
                for batch in reader.batches(needed, expr, out_cols):
                    if batch.schema != out_schema:
                        try:
                            batch = batch.cast(out_schema)
                        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                            raise TransferError(
                                f"column types in {f.path} differ from the first file: {exc}", source.display
                            ) from exc
                    writer.write(batch)
                    if req.progress and time.monotonic() - last_report >= req.progress_interval:
                        last_report = time.monotonic()
                        req.progress(
                            {
                                "files_done": index,
                                "files": len(files),
                                "rows": writer.rows,
                                "bytes_read": source.stats.bytes,
                                "seconds": last_report - t0,
                            }
                        )
            finally:
                rf.close()
        if writer is None or sink is None:  # no file, so nothing opened them
            raise TransferError("the source names no file", source.display)
        writer.close()
        sink.commit()
    except BaseException:
        if sink is not None and not sink.committed:
            sink.abort()
        raise
    finally:
        source.close()
        if dst_pool is not None:
            if warming is not None:
                wait([warming])
            dst_pool.close()
    seconds = time.monotonic() - t0
    final = sink.final if req.dst.scheme == "file" else f"sftp://{req.dst.target.display}{sink.final}"
    return {
        "source": source.display,
        "destination": final,
        "input_format": files[0].fmt,
        "format": dst_fmt,
        "files": len(files),
        "columns": out_cols,
        "where": req.where or "",
        "rows": writer.rows,
        "rows_scanned": counts.rows_scanned,
        "row_groups": (
            {"total": counts.row_groups_total, "read": counts.row_groups_read} if files[0].fmt == "parquet" else None
        ),
        "bytes_source": bytes_source,
        "bytes_read": source.stats.bytes,
        "read_requests": source.stats.requests,
        "read_fraction": round(source.stats.bytes / bytes_source, 4) if bytes_source else 0.0,
        "bytes_written": sink.bytes,
        "sha256": sink.sha256,
        "seconds": round(seconds, 4),
    }


def _check_select(cols: list[str], names: list[str], where: str) -> None:
    for c in cols:
        if c not in names:
            raise UsageError(f"--select names unknown column {c!r}", where, known_columns(names))


__all__ = ["QueryRequest", "run_query", "QueryError", "FORMATS", "OUTPUT_FORMATS"]
