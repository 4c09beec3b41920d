"""Where query results go: a file written under a temporary name, renamed when complete.

Both sinks hash and count what passes through `write()`, so the summary's
sha256 and byte count describe exactly the file that was committed.
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath

from ..paths import temp_name
from ..protocols import sftp_wire as w
from .io_errors import connection_lost, os_failure

MAX_WRITES_IN_FLIGHT = 32
_CHECK_PATH = "check the destination path and its permissions"


class Sink(io.RawIOBase):
    """A write-only stream; `commit()` makes it visible under its final name, `abort()` removes it."""

    def __init__(self, final: str, where: str) -> None:
        super().__init__()
        self.final = final
        self.where = where
        self.temp = temp_name(final)
        self.bytes = 0
        self._hash = hashlib.sha256()
        self.committed = False
        self.aborted = False

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.bytes

    def write(self, b) -> int:
        view = memoryview(b).cast("B")
        n = len(view)
        if self.aborted:
            return n  # a writer object finalised after a failure: its bytes go nowhere
        if n:
            self._hash.update(view)
            self._write(view)
            self.bytes += n
        return n

    def close(self) -> None:
        # pyarrow closes the stream it was given when its writer closes; keep it usable
        # until commit()/abort() decide what happens to the file.
        pass

    def _write(self, data: memoryview) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError


class LocalSink(Sink):
    def __init__(self, final: str) -> None:
        super().__init__(final, f"localhost:{final}")
        try:
            os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
            self._f = open(self.temp, "wb")
        except OSError as exc:
            raise os_failure("cannot create the output file", exc, self.where, _CHECK_PATH) from exc

    def _write(self, data: memoryview) -> None:
        try:
            self._f.write(data)
        except OSError as exc:
            raise os_failure("cannot write the output file", exc, self.where) from exc

    def commit(self) -> None:
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(self.temp, self.final)
        except OSError as exc:
            raise os_failure("cannot finish the output file", exc, self.where) from exc
        self.committed = True

    def abort(self) -> None:
        self.aborted = True
        if not self._f.closed:
            self._f.close()
        try:
            os.unlink(self.temp)
        except OSError:
            pass


class SFTPSink(Sink):
    """Pipelined SFTP WRITEs into the temporary name, then fsync (when offered), close and rename."""

    def __init__(self, pool, final: str, host: str) -> None:
        super().__init__(final, f"{host}:{final}")
        self._pool = pool
        self._conn = pool.acquire()
        self._wire = self._conn.wire
        self._error: OSError | None = None
        self._broken = False
        self._handle = None
        try:
            _mkdirs(self._wire, posixpath.dirname(final))
            flags = w.FXF_WRITE | w.FXF_CREAT | w.FXF_TRUNC
            t, r = self._wire.call(w.OPEN, self._wire.p_open(self.temp, flags, w.Attrs(mode=0o644)))
            self._handle = self._wire.expect_handle(t, r, self.temp)
        except OSError as exc:
            self._release(isinstance(exc, ConnectionError))
            raise os_failure("cannot create the output file", exc, self.where, _CHECK_PATH) from exc

    def _release(self, broken: bool) -> None:
        if self._conn is not None:
            self._pool.release(self._conn, broken=broken or self._broken)
            self._conn = None

    def _on_reply(self, ptype: int, r) -> None:
        try:
            self._wire.expect_status(ptype, r, self.temp)
        except OSError as exc:
            self._error = self._error or exc

    def _pump(self, block: bool) -> None:
        try:
            self._wire.pump(block=block)
        except (OSError, EOFError) as exc:
            self._broken = True
            raise connection_lost("writing", exc, self.where) from exc
        if self._error is not None:
            raise os_failure(
                "cannot write the output file",
                self._error,
                self.where,
                "check free space and permissions at the destination",
            ) from self._error

    def _write(self, data: memoryview) -> None:
        wire = self._wire
        step = wire.max_write
        for i in range(0, len(data), step):
            piece = data[i : i + step]
            while wire.outstanding >= MAX_WRITES_IN_FLIGHT:
                self._pump(block=True)
            wire.send(
                w.WRITE, wire.p_write_head(self._handle, self.bytes + i, len(piece)), self._on_reply, data=bytes(piece)
            )
        self._pump(block=False)

    def commit(self) -> None:
        wire = self._wire
        try:
            while wire.outstanding:
                self._pump(block=True)
            if "fsync@openssh.com" in wire.extensions:
                t, r = wire.call(w.EXTENDED, w._s(b"fsync@openssh.com") + wire.p_handle(self._handle))
                wire.expect_status(t, r, self.temp)
            t, r = wire.call(w.CLOSE, wire.p_handle(self._handle))
            self._handle = None
            wire.expect_status(t, r, self.temp)
            wire.rename(self.temp, self.final)
        except OSError as exc:
            self._release(isinstance(exc, ConnectionError))
            raise os_failure("cannot finish the output file", exc, self.where) from exc
        self.committed = True
        self._release(False)

    def abort(self) -> None:
        self.aborted = True
        if self._conn is None:
            return
        wire = self._wire
        try:
            while wire.outstanding:
                wire.pump(block=True)
            if self._handle is not None:
                wire.call(w.CLOSE, wire.p_handle(self._handle))
            wire.remove(self.temp)
        except (OSError, EOFError):
            self._broken = True
        self._release(False)


def _mkdirs(wire, path: str) -> None:
    """mkdir -p over SFTP (only a missing directory that cannot be made is an error)."""
    if not path or path in ("/", "."):
        return
    try:
        if wire.stat(path).is_dir:
            return
    except FileNotFoundError:
        pass
    _mkdirs(wire, posixpath.dirname(path))
    try:
        wire.mkdir(path)
    except OSError:
        if not wire.stat(path).is_dir:
            raise
