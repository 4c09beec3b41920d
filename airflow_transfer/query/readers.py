"""Per-format readers: column names, types, and filtered record batches from one RangeFile.

Parquet: row groups whose statistics cannot match the filter are never read;
of the others only the needed columns' chunks are fetched, a window of row
groups at a time with all their ranges requested at once, so a long link
carries one round trip per window instead of one per column chunk.

Arrow IPC (file format): record batches read one at a time, only the needed
fields. CSV: streamed block by block through the read-ahead window, only the
needed columns converted.

Memory stays bounded by one window / block, whatever the file size.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv

from ..errors import TransferError
from .rangefile import RangeFile
from .sources import compression_of

BATCH_ROWS = 64 * 1024
PREFETCH_BYTES = 16 * 1024 * 1024  # column-chunk bytes requested together (one window)
CSV_BLOCK = 1 << 20


class _Borrowed(io.RawIOBase):
    """A RangeFile handed to pyarrow: pyarrow closes the streams it wraps, the owner closes the file."""

    def __init__(self, rf: RangeFile) -> None:
        super().__init__()
        self._rf = rf
        self.name = rf.name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._rf.seek(offset, whence)

    def tell(self) -> int:
        return self._rf.tell()

    def read(self, n: int = -1) -> bytes:
        return self._rf.read(n)

    def readinto(self, b) -> int:
        return self._rf.readinto(b)


def native(rf: RangeFile) -> pa.NativeFile:
    """A pyarrow NativeFile over `rf` whose closing leaves `rf` open."""
    return pa.PythonFile(_Borrowed(rf), mode="r")


@dataclass
class ScanCounts:
    rows_scanned: int = 0
    row_groups_total: int = 0
    row_groups_read: int = 0


class FormatReader:
    names: list[str]

    def __init__(self, rf: RangeFile, counts: ScanCounts) -> None:
        self.rf = rf
        self.counts = counts

    def schema_for(self, needed: list[str]) -> pa.Schema:
        raise NotImplementedError

    def batches(self, needed: list[str], expr: Any, out: list[str]) -> Iterator[pa.RecordBatch]:
        """Record batches of the `out` columns of the rows `expr` (a pyarrow expression, or None for
        all) selects; `needed` are the columns `expr` and `out` read together."""
        raise NotImplementedError

    def _filter(self, batch: pa.RecordBatch, expr: Any, out: list[str]) -> pa.RecordBatch:
        self.counts.rows_scanned += batch.num_rows
        if expr is not None:
            batch = batch.filter(expr)
        return batch.select(out)


class ParquetReader(FormatReader):
    def __init__(self, rf: RangeFile, counts: ScanCounts) -> None:
        # heavy: pyarrow.dataset costs ~30 ms at import even with pyarrow loaded; only Parquet sources
        # need it (and pyarrow.parquet), CSV and IPC queries never pay for it
        import pyarrow.dataset as ds
        import pyarrow.parquet as pq

        super().__init__(rf, counts)
        try:
            self.fragment = ds.ParquetFileFormat().make_fragment(native(rf))
            self.schema = self.fragment.physical_schema
            self.metadata = self.fragment.metadata
            # Reads are answered from our prefetched ranges: no coalescing of its own (pre_buffer),
            # which could span two of our windows and miss them.
            self.file = pq.ParquetFile(native(rf), metadata=self.metadata, pre_buffer=False)
        except (pa.ArrowInvalid, OSError) as exc:
            raise TransferError(f"not a readable Parquet file: {exc}", rf.name) from exc
        self.names = list(self.schema.names)

    def schema_for(self, needed: list[str]) -> pa.Schema:
        return pa.schema([self.schema.field(n) for n in needed])

    def _ranges(self, rg: int, needed: set[str]) -> list[tuple[int, int]]:
        meta = self.metadata.row_group(rg)
        out = []
        for j in range(meta.num_columns):
            col = meta.column(j)
            if col.path_in_schema.split(".", 1)[0] not in needed:
                continue
            start = col.data_page_offset
            if col.has_dictionary_page and 0 < col.dictionary_page_offset < start:
                start = col.dictionary_page_offset
            out.append((start, col.total_compressed_size))
        return _merge(out)

    def batches(self, needed: list[str], expr: Any, out: list[str]) -> Iterator[pa.RecordBatch]:
        if expr is not None:
            kept = [f.row_groups[0].id for f in self.fragment.split_by_row_group(filter=expr, schema=self.schema)]
        else:
            kept = list(range(self.metadata.num_row_groups))
        self.counts.row_groups_total += self.metadata.num_row_groups
        self.counts.row_groups_read += len(kept)
        want = set(needed)
        windows: list[list[tuple[int, list[tuple[int, int]]]]] = []
        size = PREFETCH_BYTES + 1
        for rg in kept:
            ranges = self._ranges(rg, want)
            n = sum(length for _, length in ranges)
            if size + n > PREFETCH_BYTES:
                windows.append([])
                size = 0
            windows[-1].append((rg, ranges))
            size += n
        if windows:
            self.rf.prefetch([r for _, rs in windows[0] for r in rs])
        for i, window in enumerate(windows):
            if i + 1 < len(windows):
                # The next window's requests travel while this one is decoded.
                self.rf.prefetch([r for _, rs in windows[i + 1] for r in rs])
            for rg, _ in window:
                for batch in self.file.iter_batches(
                    batch_size=BATCH_ROWS, row_groups=[rg], columns=needed, use_threads=False
                ):
                    yield self._filter(batch, expr, out)
            self._forget(window)

    def _forget(self, window: list[tuple[int, list[tuple[int, int]]]]) -> None:
        self.rf.forget([r for _, rs in window for r in rs])


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent column chunks become one range (fewer requests, same bytes)."""
    out: list[list[int]] = []
    for start, length in sorted(ranges):
        if out and start == out[-1][0] + out[-1][1]:
            out[-1][1] += length
        else:
            out.append([start, length])
    return [(s, n) for s, n in out]


class IPCReader(FormatReader):
    def __init__(self, rf: RangeFile, counts: ScanCounts) -> None:
        super().__init__(rf, counts)
        try:
            self.reader = pa.ipc.open_file(native(rf))
            self.stream = False
            self.schema = self.reader.schema
        except pa.ArrowInvalid:
            rf.seek(0)
            rf.sequential = True
            try:
                self.reader = pa.ipc.open_stream(native(rf))
            except (pa.ArrowInvalid, OSError) as exc:
                raise TransferError(f"not a readable Arrow IPC file: {exc}", rf.name) from exc
            self.stream = True
            self.schema = self.reader.schema
        self.names = list(self.schema.names)

    def schema_for(self, needed: list[str]) -> pa.Schema:
        return pa.schema([self.schema.field(n) for n in needed])

    def batches(self, needed: list[str], expr: Any, out: list[str]) -> Iterator[pa.RecordBatch]:
        if self.stream:
            for batch in self.reader:
                yield self._filter(batch.select(needed), expr, out)
            return
        idx = [self.names.index(n) for n in needed]
        reader = pa.ipc.open_file(
            native(self.rf), options=pa.ipc.IpcReadOptions(included_fields=idx, use_threads=False)
        )
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            yield self._filter(batch.select(needed), expr, out)


class CSVReader(FormatReader):
    def __init__(self, rf: RangeFile, counts: ScanCounts) -> None:
        super().__init__(rf, counts)
        self.compression = compression_of(rf.name)
        # Sequential from the start: the first MiB is kept (RangeFile's head cache), so the bytes
        # read for the header are not fetched again when the CSV reader starts at offset 0.
        rf.sequential = True
        stream = self._stream()
        head = b""
        while b"\n" not in head:
            more = stream.read(64 * 1024)
            if not more:
                break
            head += more
            if len(head) > (16 << 20):
                raise TransferError("no line end in the first 16 MiB of the CSV file", rf.name, "is it really CSV?")
        line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")
        if not line:
            raise TransferError("the CSV file is empty (no header line)", rf.name, "give a CSV file with a header")
        self.names = next(csv.reader(io.StringIO(line)))
        self._reader: pcsv.CSVStreamingReader | None = None

    def _stream(self) -> pa.NativeFile:
        self.rf.seek(0)
        raw = native(self.rf)
        if self.compression is None:
            return raw
        try:
            return pa.CompressedInputStream(raw, self.compression)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TransferError(f"cannot read {self.compression}-compressed CSV: {exc}", self.rf.name) from exc

    def _open(self, needed: list[str]) -> pcsv.CSVStreamingReader:
        try:
            return pcsv.open_csv(
                self._stream(),
                read_options=pcsv.ReadOptions(block_size=CSV_BLOCK, use_threads=False),
                convert_options=pcsv.ConvertOptions(include_columns=needed),
            )
        except (pa.ArrowInvalid, OSError) as exc:
            raise TransferError(f"cannot read the CSV file: {exc}", self.rf.name) from exc

    def schema_for(self, needed: list[str]) -> pa.Schema:
        self._reader = self._open(needed)
        return self._reader.schema

    def batches(self, needed: list[str], expr: Any, out: list[str]) -> Iterator[pa.RecordBatch]:
        reader = self._reader or self._open(needed)
        self._reader = None
        schema = reader.schema
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowInvalid, OSError) as exc:
                raise TransferError(
                    f"cannot parse the CSV file: {exc}",
                    self.rf.name,
                    "a column's values changed type part-way through the file?",
                ) from exc
            if batch.schema != schema:
                batch = batch.cast(schema)
            yield self._filter(batch, expr, out)


READERS = {"parquet": ParquetReader, "ipc": IPCReader, "csv": CSVReader}
