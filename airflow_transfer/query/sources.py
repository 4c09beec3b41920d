"""Query sources: which files a SRC names, their format, and a ranged-read file for each.

SRC is one file or a directory of files (walked recursively, hidden and
temporary files skipped) on the local disk or an SFTP host, or one file at an
http(s) URL. A directory's files must share one format.
"""

from __future__ import annotations

import os
import posixpath
import stat as _stat
from dataclasses import dataclass

from ..errors import TransferError, UsageError
from ..paths import TEMP_SUFFIX
from ..protocols.pool import Conn, SFTPPool
from .http_rangefile import HTTPRangeFile, safe_url
from .io_errors import os_failure
from .rangefile import LocalRangeFile, RangeFile, ReadStats
from .sftp_rangefile import SFTPRangeFile

EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".parq": "parquet",
    ".arrow": "ipc",
    ".feather": "ipc",
    ".ipc": "ipc",
    ".arrows": "ipc",
    ".csv": "csv",
}
FORMATS = ("parquet", "ipc", "csv")
# Compressed CSV is read through a decompressing stream (pyarrow's codecs).
CSV_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}


def compression_of(name: str) -> str | None:
    return CSV_COMPRESSION.get(posixpath.splitext(name.lower())[1])


@dataclass
class SourceFile:
    path: str  # as the endpoint names it (local path, remote path or URL)
    size: int
    fmt: str | None  # from the extension; None: sniffed when opened


def format_of(name: str) -> str | None:
    base, ext = posixpath.splitext(name.lower())
    if ext in CSV_COMPRESSION:
        return "csv" if base.endswith(".csv") else None
    return EXTENSIONS.get(ext)


def sniff(head: bytes, tail: bytes) -> str:
    """Parquet and Arrow IPC files announce themselves; anything else is read as CSV."""
    if head[:4] == b"PAR1" and tail[-4:] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1":
        return "ipc"
    if head[:4] == b"\xff\xff\xff\xff":
        return "ipc"  # an IPC stream (continuation marker)
    return "csv"


def _visible(name: str) -> bool:
    return not name.startswith(".") and not name.endswith(TEMP_SUFFIX)


class QuerySource:
    """A SRC, resolved: `files` lists what will be read, `open()` gives a RangeFile."""

    display: str

    def __init__(self) -> None:
        self.stats = ReadStats()

    def files(self) -> list[SourceFile]:
        raise NotImplementedError

    def open(self, f: SourceFile) -> RangeFile:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _pick(found: list[SourceFile], where: str) -> list[SourceFile]:
    known = [f for f in found if f.fmt]
    if not known:
        raise UsageError(
            "no Parquet, Arrow IPC or CSV files in the source directory",
            where,
            "name files *.parquet, *.arrow / *.feather or *.csv",
        )
    fmts = sorted({f.fmt for f in known if f.fmt})
    if len(fmts) > 1:
        raise UsageError(
            f"the source directory mixes formats ({', '.join(fmts)})",
            where,
            "query one format at a time (point SRC at one file or a directory of one format)",
        )
    return sorted(known, key=lambda f: f.path)


class LocalSource(QuerySource):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.display = path

    def files(self) -> list[SourceFile]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise os_failure("cannot read the source", exc, self.path, "check the path") from exc
        if not _stat.S_ISDIR(st.st_mode):
            return [SourceFile(self.path, st.st_size, format_of(self.path))]
        found = []
        for root, dirs, names in os.walk(self.path):
            dirs[:] = sorted(d for d in dirs if _visible(d))
            for n in names:
                if _visible(n):
                    p = os.path.join(root, n)
                    found.append(SourceFile(p, os.path.getsize(p), format_of(n)))
        return _pick(found, self.path)

    def open(self, f: SourceFile) -> RangeFile:
        return LocalRangeFile(f.path, self.stats)


class SFTPSource(QuerySource):
    def __init__(self, endpoint) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.display = endpoint.display
        self.pool = SFTPPool(endpoint.target)
        self._conn: Conn | None = None
        self._conn_broken = False
        self._last: SFTPRangeFile | None = None

    def files(self) -> list[SourceFile]:
        conn = self.pool.acquire()
        try:
            wire = conn.wire
            root = self.endpoint.path
            try:
                attrs = wire.stat(root)
            except OSError as exc:
                raise os_failure("cannot read the source", exc, self.display, "check the remote path") from exc
            if not attrs.is_dir:
                return [SourceFile(root, int(attrs.size or 0), format_of(root))]
            found: list[SourceFile] = []
            stack = [root]
            while stack:
                d = stack.pop()
                for name, a in wire.listdir_attrs(d):
                    if not _visible(name):
                        continue
                    p = posixpath.join(d, name)
                    if a.is_dir:
                        stack.append(p)
                    elif a.is_reg:
                        found.append(SourceFile(p, int(a.size or 0), format_of(name)))
            return _pick(found, self.display)
        finally:
            self.pool.release(conn)

    def open(self, f: SourceFile) -> RangeFile:
        # One connection reads every file in turn (a file's CLOSE overlaps the next file's OPEN).
        if self._last is not None and self._last.broken:
            self._conn_broken = True
        if self._conn is not None and self._conn_broken:
            self.pool.release(self._conn, broken=True)
            self._conn, self._conn_broken = None, False
        if self._conn is None:
            self._conn = self.pool.acquire()
        try:
            self._last = SFTPRangeFile(self._conn, f.path, self.stats, size=f.size)
        except TransferError as exc:
            if isinstance(exc.__cause__, ConnectionError):
                self._conn_broken = True
            raise
        return self._last

    def close(self) -> None:
        if self._conn is not None:
            broken = self._conn_broken or (self._last is not None and self._last.broken)
            if not broken:
                try:
                    while self._conn.wire.outstanding:
                        self._conn.wire.pump(block=True)
                except (OSError, EOFError):
                    broken = True
            self.pool.release(self._conn, broken=broken)
            self._conn = None
        self.pool.close()


class HTTPSource(QuerySource):
    def __init__(self, url: str, cafile: str | None = None) -> None:
        super().__init__()
        self.url = url
        self.cafile = cafile
        self.display = safe_url(url)

    def files(self) -> list[SourceFile]:
        return [SourceFile(self.url, -1, format_of(posixpath.basename(self.display)))]

    def open(self, f: SourceFile) -> RangeFile:
        rf = HTTPRangeFile(f.path, self.stats, cafile=self.cafile)
        f.size = rf.size
        return rf


def is_http(url: str) -> bool:
    return url.lower().startswith(("http://", "https://"))


def source_for(location, cafile: str | None = None) -> QuerySource:
    """An http(s) URL string, or an Endpoint (file / sftp) from the shared resolvers."""
    if isinstance(location, str):
        if not is_http(location):
            raise UsageError("expected an http(s) URL or an endpoint", location)
        return HTTPSource(location, cafile)
    if location.scheme == "sftp":
        return SFTPSource(location)
    return LocalSource(location.path)
