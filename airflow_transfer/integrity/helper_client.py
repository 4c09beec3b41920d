"""The client of the destination's checksum helper, run with python3 over an exec channel.

The helper (airflow_transfer/remote/checksum_helper.py) is started once per
destination and answers digest requests, pipelined, for as long as the channel
lives: digests are computed where the data landed, after fsync and a cache drop.

The transport stays abstract so this module needs neither paramiko nor Airflow:
`OpenChannel(command) -> (write, readline[, close])` runs `command` on the
destination host; `write(bytes)` sends to its stdin, `readline()` returns one
line of its stdout (bytes or str; empty at end of stream), `close()` (optional)
closes its stdin. With paramiko:
`i, o, _ = client.exec_command(cmd); return (lambda b: (i.write(b), i.flush()), o.readline, i.close)`
Set a timeout on the channel: a read here blocks until the remote answers.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from importlib import resources

from .algorithms import DEFAULT_ALGORITHM, algorithm_info
from .blocks import FileDigests
from .remote_errors import RemoteChecksumError, remote_error
from .remote_results import DigestRequest, PathArg, RemoteDigest, is_hex, path_text

HELPER_NAME = "airflow-transfer-checksum"
# Reads the helper's own source from stdin, so requests can follow on the same
# stream and the command line stays one short line every login shell accepts.
BOOTSTRAP = "import sys;exec(sys.stdin.read(int(sys.stdin.readline())))"

Line = bytes | str
OpenChannel = Callable[[str], Sequence[Callable]]


def helper_source() -> str:
    source = resources.files("airflow_transfer.remote").joinpath("checksum_helper.py").read_text("utf-8")
    if not source.isascii():  # the bootstrap counts characters; ASCII keeps them equal to bytes
        raise RuntimeError("checksum_helper.py must stay ASCII-only")
    return source


def helper_command(python: str = "python3") -> str:
    """The shell command that starts the helper; its source follows on stdin (helper_preamble)."""
    # -I: ignore PYTHON* variables and the user's site directory on the remote.
    return f"{shlex.quote(python)} -I -c {shlex.quote(BOOTSTRAP)}"


def helper_preamble() -> bytes:
    source = helper_source()
    return f"{len(source)}\n{source}".encode("ascii")


class ChecksumHelperClient:
    """Talks to one running helper. Requests are pipelined up to `window` deep.

    One client per channel; calls are serialised by a lock.
    """

    def __init__(
        self,
        open_channel: OpenChannel,
        python: str = "python3",
        where: str = "destination",
        window: int = 16,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 request (got {window})")
        self._open_channel = open_channel
        self.python = python
        self.where = where
        # Small requests, bounded in number: they always fit the pipe/channel
        # buffer, so writing never blocks while the helper waits for us to read.
        self.window = window
        self._write: Callable[[bytes], object] | None = None
        self._readline: Callable[[], Line] | None = None
        self._close: Callable[[], object] | None = None
        self._next_id = 0
        self._lock = threading.Lock()
        self.info: dict = {}

    # lifecycle
    def start(self) -> dict:
        """Start the helper and return its hello (version, python, algorithms)."""
        with self._lock:
            if self._write is not None:
                return self.info
            channel = tuple(self._open_channel(helper_command(self.python)))
            if len(channel) not in (2, 3):
                raise TypeError("open_channel must return (write, readline) or (write, readline, close)")
            self._write, self._readline = channel[0], channel[1]
            self._close = channel[2] if len(channel) == 3 else None
            try:
                self._write(helper_preamble())
                self._send({"op": "hello", "id": "hello"})
            except OSError as exc:
                raise remote_error(
                    "ENOHELPER", f"could not start the checksum helper ({exc})", None, self.where
                ) from exc
            self.info = self._read_hello()
            return self.info

    def close(self) -> None:
        with self._lock:
            if self._close is not None:
                try:
                    self._close()
                except OSError:
                    pass
            self._write = self._readline = self._close = None

    def __enter__(self) -> ChecksumHelperClient:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def algorithms(self) -> frozenset[str]:
        return frozenset(self.info.get("algorithms", ()))

    # requests
    def digest(
        self,
        path: PathArg,
        algorithm: str = DEFAULT_ALGORITHM,
        offset: int = 0,
        length: int | None = None,
        block_size: int = 0,
        fsync: bool = True,
        drop_cache: bool = True,
    ) -> RemoteDigest:
        """Digest of a destination range after fsync + cache drop; raises RemoteChecksumError."""
        request = DigestRequest(path, algorithm, offset, length, block_size, fsync, drop_cache)
        result = self.digest_many([request])[0]
        if isinstance(result, RemoteChecksumError):
            raise result
        return result

    def digest_many(self, requests: Iterable[DigestRequest]) -> list[RemoteDigest | RemoteChecksumError]:
        """One result per request, in order; a failed file is its error, not an exception."""
        self.start()
        items = list(requests)
        results: list[RemoteDigest | RemoteChecksumError | None] = [None] * len(items)
        with self._lock:
            pending: deque[tuple[int, int, DigestRequest]] = deque()
            for index, request in enumerate(items):
                try:
                    wire = self._wire(request)
                except RemoteChecksumError as exc:  # refused before sending: nothing to read back
                    results[index] = exc
                    continue
                if len(pending) >= self.window:
                    done, request_id, sent = pending.popleft()
                    results[done] = self._receive(request_id, sent)
                self._send(wire)
                pending.append((index, wire["id"], request))
            while pending:
                done, request_id, sent = pending.popleft()
                results[done] = self._receive(request_id, sent)
        return results  # type: ignore[return-value]  # every slot is filled above

    # internals
    def _wire(self, request: DigestRequest) -> dict:
        name = algorithm_info(request.algorithm).name
        if name not in self.algorithms:
            raise remote_error(
                "ENOALGO",
                f"algorithm {name!r} is not available to the helper there "
                f"(it has {', '.join(sorted(self.algorithms))})",
                path_text(request.path),
                self.where,
            )
        self._next_id += 1
        return {
            "id": self._next_id,
            "path": path_text(request.path),
            "algo": name,
            "offset": request.offset,
            "length": request.length,
            "block_size": request.block_size or None,
            "fsync": request.fsync,
            "drop_cache": request.drop_cache,
        }

    def _send(self, message: dict) -> None:
        if self._write is None:
            raise remote_error("ENOHELPER", "the checksum helper is not running", None, self.where)
        self._write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")

    def _line(self) -> str:
        if self._readline is None:
            raise remote_error("ENOHELPER", "the checksum helper is not running", None, self.where)
        line = self._readline()
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if not line:
            self._write = self._readline = None
            raise remote_error("ENOHELPER", "the checksum helper stopped (end of its output)", None, self.where)
        return line

    def _read_hello(self) -> dict:
        # Login scripts may print to stdout before python starts: skip such lines.
        for _ in range(200):
            line = self._line()
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if isinstance(reply, dict) and reply.get("helper") == HELPER_NAME and reply.get("id") == "hello":
                return reply
        raise remote_error("ENOHELPER", "no hello from the checksum helper", None, self.where)

    def _receive(self, request_id: int, request: DigestRequest) -> RemoteDigest | RemoteChecksumError:
        path = path_text(request.path)
        line = self._line()
        try:
            reply = json.loads(line)
        except ValueError:
            raise remote_error("EPROTO", f"unreadable reply {line[:80]!r}", path, self.where) from None
        if not isinstance(reply, dict) or reply.get("id") != request_id:
            raise remote_error("EPROTO", f"reply out of order (wanted id {request_id})", path, self.where)
        if not reply.get("ok"):
            return remote_error(str(reply.get("code", "EIO")), str(reply.get("error", "")), path, self.where)
        return _helper_digest(reply, request, path, self.where)


def _helper_digest(reply: dict, request: DigestRequest, path: str, where: str) -> RemoteDigest | RemoteChecksumError:
    name = algorithm_info(request.algorithm).name
    size = algorithm_info(name).digest_size
    blocks = reply.get("blocks") or []
    if not is_hex(reply.get("digest"), size) or not all(is_hex(b, size) for b in blocks):
        return remote_error("EPROTO", f"malformed digest in reply for {name}", path, where)
    digests = FileDigests(
        name, int(reply["offset"]), int(reply["length"]), reply["digest"], request.block_size, tuple(blocks)
    )
    return RemoteDigest(
        path,
        digests,
        "helper",
        bool(reply.get("fsynced")),
        bool(reply.get("cache_dropped")),
        float(reply.get("seconds", 0.0)),
    )


__all__ = [
    "BOOTSTRAP",
    "HELPER_NAME",
    "ChecksumHelperClient",
    "OpenChannel",
    "helper_command",
    "helper_preamble",
    "helper_source",
]
