"""Destination-side digests: the stdlib helper over an exec channel, or coreutils.

docs/integrity.md (after Liu, Jung, Kettimuthu, Sun, Towards Optimizing
Large-Scale Data Transfers with End-to-End Integrity Verification): the destination
digest is computed where the data landed, after it is on disk. First choice
is the long-lived helper (airflow_transfer/remote/checksum_helper.py) started
with python3 over SSH exec; if python3 is missing there, one coreutils
command per file (`sha256sum -- FILE` and friends); only then does the
engine read the file back over SFTP. `choose_remote_method` says which, and
why, so the mode used can be reported instead of silently downgraded.

The transport stays abstract so this module needs neither paramiko nor
Airflow:

* `OpenChannel(command) -> (write, readline[, close])`: run `command` on the
  destination host; `write(bytes)` sends to its stdin, `readline()` returns
  one line of its stdout (bytes or str; empty at end of stream), `close()`
  (optional) closes its stdin. With paramiko:
  `i, o, _ = client.exec_command(cmd); return (lambda b: (i.write(b), i.flush()), o.readline, i.close)`
  Set a timeout on the channel: a read here blocks until the remote answers.
* `RunCommand(command) -> (exit_status, stdout_bytes, stderr_bytes)` for the
  coreutils path, one call per file.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import string
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources

from .algorithms import COREUTILS_COMMANDS, DEFAULT_ALGORITHM, algorithm_info, digest_bytes
from .blocks import FileDigests

HELPER_NAME = "airflow-transfer-checksum"
# Reads the helper's own source from stdin, so requests can follow on the same
# stream and the command line stays one short line every login shell accepts.
BOOTSTRAP = "import sys;exec(sys.stdin.read(int(sys.stdin.readline())))"

Line = bytes | str
OpenChannel = Callable[[str], Sequence[Callable]]
RunCommand = Callable[[str], tuple[int, bytes, bytes]]
PathArg = str | bytes | os.PathLike


# -- errors ----------------------------------------------------------------

_TODO = {
    "ENOENT": "the file is missing at the destination; transfer it again",
    "EACCES": "the SSH user cannot read it; fix its permissions at the destination",
    "EPERM": "the SSH user cannot read it; fix its permissions at the destination",
    "EISDIR": "only regular files can be verified",
    "ENOTREG": "only regular files can be verified",
    "ESHORT": "the destination copy is shorter than expected; transfer it again",
    "ENOALGO": "choose an algorithm the destination supports or install its package there",
    "ENOCMD": "install coreutils there or let the engine read the file back over SFTP",
    "ENOHELPER": "python3 >= 3.8 is needed there for the helper; falling back to coreutils is possible",
    "EPROTO": "the helper's output was not understood; report this as a bug",
    "EBADREQ": "airflow-transfer sent a malformed request; report this as a bug",
    "EINTERNAL": "the destination helper failed; report this as a bug",
}


class RemoteChecksumError(Exception):
    """A destination digest could not be computed. `code` says why (ENOENT, EACCES, ESHORT...)."""

    code: str = "EREMOTE"
    path: str | None = None
    message: str = ""

    def __str__(self) -> str:
        return self.message


class HelperUnavailable(RemoteChecksumError):
    """The helper did not start or stopped answering."""


class RemoteFileNotFoundError(RemoteChecksumError, FileNotFoundError):
    pass


class RemotePermissionError(RemoteChecksumError, PermissionError):
    pass


class RemoteIsADirectoryError(RemoteChecksumError, IsADirectoryError):
    pass


class RemoteOSError(RemoteChecksumError, OSError):
    pass


_OS_CLASSES = {
    "ENOENT": RemoteFileNotFoundError,
    "EACCES": RemotePermissionError,
    "EPERM": RemotePermissionError,
    "EISDIR": RemoteIsADirectoryError,
}


def remote_error(code: str, detail: str, path: str | None, where: str) -> RemoteChecksumError:
    """The exception for an error code; errno codes are also the matching OSError subclass."""
    message = f"destination checksum failed: {detail} (on {where})"
    todo = _TODO.get(code, "check the destination's storage and try again")
    message += f": {todo}"
    number = getattr(errno, code, None) if code.startswith("E") else None
    exc: RemoteChecksumError
    if code == "ENOHELPER":
        exc = HelperUnavailable(message)
    elif isinstance(number, int):
        exc = _OS_CLASSES.get(code, RemoteOSError)(number, detail, path)
    else:
        exc = RemoteChecksumError(message)
    exc.code, exc.path, exc.message = code, path, message
    return exc


# -- results ---------------------------------------------------------------


@dataclass(frozen=True)
class RemoteDigest:
    path: str
    digests: FileDigests
    method: str  # "helper" or "coreutils"
    fsynced: bool | None  # None: could not tell
    cache_dropped: bool | None
    seconds: float = 0.0

    @property
    def digest(self) -> str:
        return self.digests.digest


@dataclass(frozen=True)
class DigestRequest:
    path: PathArg
    algorithm: str = DEFAULT_ALGORITHM
    offset: int = 0
    length: int | None = None
    block_size: int = 0
    fsync: bool = True
    drop_cache: bool = True


def _path_text(path: PathArg) -> str:
    # Names that are not valid UTF-8 travel as surrogate escapes; the helper's
    # os.open turns them back into the same bytes.
    value = os.fspath(path)
    return os.fsdecode(value) if isinstance(value, bytes) else value


# -- the helper ------------------------------------------------------------


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
                _path_text(request.path),
                self.where,
            )
        self._next_id += 1
        return {
            "id": self._next_id,
            "path": _path_text(request.path),
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
        path = _path_text(request.path)
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


def _is_hex(text: object, size: int) -> bool:
    return isinstance(text, str) and len(text) == 2 * size and all(c in string.hexdigits for c in text)


def _helper_digest(reply: dict, request: DigestRequest, path: str, where: str) -> RemoteDigest | RemoteChecksumError:
    name = algorithm_info(request.algorithm).name
    size = algorithm_info(name).digest_size
    blocks = reply.get("blocks") or []
    if not _is_hex(reply.get("digest"), size) or not all(_is_hex(b, size) for b in blocks):
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


# -- coreutils fall-back ---------------------------------------------------

# Runs under `sh` whatever the login shell is; the file name only ever
# appears as "$1", so nothing in it is parsed by any shell. Exit 3 flags a
# non-regular file (a FIFO would otherwise hang the checksum command).
_COREUTILS_SCRIPT = (
    'if [ -e "$1" ] && [ ! -f "$1" ]; then printf "not a regular file: %s\\n" "$1" >&2; exit 3; fi; '
    'if [ "$2" = 1 ] && sync -- "$1" 2>/dev/null; then echo fsync=1; else echo fsync=0; fi; '
    'if [ "$3" = 1 ] && dd if="$1" iflag=nocache count=0 2>/dev/null; then echo drop=1; else echo drop=0; fi; '
    'echo "size=$(wc -c 2>/dev/null < "$1")"; '
    'exec {tool} -- "$1"'
)
_PROBE_SCRIPT = 'command -v "$1" >/dev/null'

_STDERR_CODES = (
    ("No such file or directory", "ENOENT"),
    ("Permission denied", "EACCES"),
    ("Is a directory", "EISDIR"),
    ("Input/output error", "EIO"),
)


def coreutils_command(algorithm: str, path: PathArg, fsync: bool = True, drop_cache: bool = True) -> str:
    """One shell command printing fsync/drop status lines, then `TOOL -- FILE` output.

    GNU `sync FILE` fsyncs one file; `dd iflag=nocache count=0` drops its
    cached pages. Both are best effort and reported, never required.
    """
    name = algorithm_info(algorithm).name
    tool = COREUTILS_COMMANDS.get(name)
    if tool is None:
        raise ValueError(
            f"coreutils has no command for {name!r}: use one of {', '.join(COREUTILS_COMMANDS)} or the python3 helper"
        )
    text = _path_text(path)
    if not text.startswith("/"):
        text = "./" + text  # so "-" or "-x" is a file, never stdin or an option
    script = _COREUTILS_SCRIPT.replace("{tool}", tool)
    return f"env LC_ALL=C sh -c {shlex.quote(script)} sh {shlex.quote(text)} {int(bool(fsync))} {int(bool(drop_cache))}"


@dataclass(frozen=True)
class CoreutilsOutput:
    digest: str
    fsynced: bool
    cache_dropped: bool
    size: int | None  # None when wc could not tell


def parse_coreutils_output(algorithm: str, stdout: bytes) -> CoreutilsOutput:
    """What coreutils_command printed; ValueError when it is not that shape."""
    name = algorithm_info(algorithm).name
    size = algorithm_info(name).digest_size
    lines = stdout.split(b"\n")
    if (
        len(lines) < 4
        or lines[0] not in (b"fsync=0", b"fsync=1")
        or lines[1] not in (b"drop=0", b"drop=1")
        or not lines[2].startswith(b"size=")
    ):
        raise ValueError(f"unexpected coreutils output: {stdout[:120]!r}")
    count = lines[2][5:].strip()
    line = lines[3]
    # GNU tools prefix the line with a backslash when they escaped the name.
    if line.startswith(b"\\"):
        line = line[1:]
    digest = line[: 2 * size].decode("ascii", "replace").lower()
    if not _is_hex(digest, size) or line[2 * size : 2 * size + 1] != b" ":
        raise ValueError(f"no {name} digest in coreutils output: {lines[3][:120]!r}")
    return CoreutilsOutput(
        digest, lines[0] == b"fsync=1", lines[1] == b"drop=1", int(count) if count.isdigit() else None
    )


class CoreutilsChecksummer:
    """Whole-file digests with one coreutils command per file (no ranges, no blocks)."""

    def __init__(self, run: RunCommand, where: str = "destination") -> None:
        self._run = run
        self.where = where

    def probe(self, algorithm: str = DEFAULT_ALGORITHM) -> bool:
        """Whether the destination has the coreutils command for `algorithm`."""
        tool = COREUTILS_COMMANDS.get(algorithm_info(algorithm).name)
        if tool is None:
            return False
        status, _, _ = self._run(f"sh -c {shlex.quote(_PROBE_SCRIPT)} sh {shlex.quote(tool)}")
        return status == 0

    def digest(
        self, path: PathArg, algorithm: str = DEFAULT_ALGORITHM, fsync: bool = True, drop_cache: bool = True
    ) -> RemoteDigest:
        name = algorithm_info(algorithm).name
        text = _path_text(path)
        status, out, err = self._run(coreutils_command(name, text, fsync, drop_cache))
        if status != 0:
            raise remote_error(self._code(status, err), self._detail(err, status), text, self.where)
        try:
            parsed = parse_coreutils_output(name, out)
        except ValueError as exc:
            raise remote_error("EPROTO", str(exc), text, self.where) from None
        if parsed.size is None:
            raise remote_error("EPROTO", "wc did not report the file size", text, self.where)
        digests = FileDigests(name, 0, parsed.size, parsed.digest, 0, ())
        return RemoteDigest(text, digests, "coreutils", parsed.fsynced, parsed.cache_dropped)

    @staticmethod
    def _code(status: int, stderr: bytes) -> str:
        if status == 127:
            return "ENOCMD"
        if status == 3:
            return "ENOTREG"
        text = stderr.decode("utf-8", "replace")
        for needle, code in _STDERR_CODES:
            if needle in text:
                return code
        return "EIO"

    @staticmethod
    def _detail(stderr: bytes, status: int) -> str:
        text = stderr.decode("utf-8", "replace").strip().splitlines()
        return text[-1] if text else f"exit status {status}"


def bare_path(path: str) -> str:
    """`path` with a backslash before every character but [A-Za-z0-9/._-]: how a server that
    runs a checksum command without a shell (rclone's serve sftp) unescapes its argument, and
    still one word to a POSIX shell."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "/._-") else "\\" + c for c in path)


class BareChecksummer:
    """Whole-file digests from a checksum command run without a shell (`md5sum FILE`), as
    servers that emulate a few commands over exec offer (rclone: md5sum, sha1sum). No fsync and
    no cache drop are possible there: the digest is of what the server reads back."""

    def __init__(self, run: RunCommand, where: str = "destination") -> None:
        self._run = run
        self.where = where

    def probe(self, algorithm: str) -> bool:
        """True when `TOOL` with no file prints the digest of empty input (coreutils reads its
        closed stdin; rclone answers the same)."""
        info = algorithm_info(algorithm)
        tool = COREUTILS_COMMANDS.get(info.name)
        if tool is None:
            return False
        status, out, _ = self._run(tool)
        return status == 0 and out.strip().lower().startswith(digest_bytes(info.name, b"").encode())

    def digest(
        self, path: PathArg, algorithm: str = DEFAULT_ALGORITHM, fsync: bool = True, drop_cache: bool = True
    ) -> RemoteDigest:
        name = algorithm_info(algorithm).name
        text = _path_text(path)
        status, out, err = self._run(f"{COREUTILS_COMMANDS[name]} {bare_path(text)}")
        if status != 0:
            detail = err.decode("utf-8", "replace").strip().splitlines()
            code = "ENOENT" if b"does not exist" in err or b"No such file" in err else "EIO"
            raise remote_error(code, detail[-1] if detail else f"exit status {status}", text, self.where)
        size = algorithm_info(name).digest_size
        digest = out[: 2 * size].decode("ascii", "replace").lower()
        if not _is_hex(digest, size):
            raise remote_error("EPROTO", f"no {name} digest in {out[:120]!r}", text, self.where)
        return RemoteDigest(text, FileDigests(name, 0, 0, digest, 0, ()), "command", False, False)


# -- which method ----------------------------------------------------------


def choose_remote_method(
    algorithm: str, helper_algorithms: Collection[str] | None, coreutils_ok: bool
) -> tuple[str, str]:
    """("helper" | "coreutils" | "sftp-readback", reason) for a destination.

    helper_algorithms: what the helper's hello listed, None when it could not
    start. coreutils_ok: the destination has the matching command.
    """
    name = algorithm_info(algorithm).name
    tool = COREUTILS_COMMANDS.get(name)
    if helper_algorithms is not None and name in helper_algorithms:
        return "helper", f"the python3 helper computes {name} at the destination"
    if tool and coreutils_ok:
        why = "the python3 helper is unavailable" if helper_algorithms is None else f"the helper lacks {name}"
        return "coreutils", f"{why}; {tool} computes it at the destination, one command per file"
    if helper_algorithms is None:
        why = "the python3 helper is unavailable"
    else:
        why = f"the helper lacks {name}"
    return "sftp-readback", (
        f"{why} and coreutils has no usable command for {name}; "
        "the file is read back over SFTP and digested locally (a second transfer)"
    )


__all__ = [
    "BOOTSTRAP",
    "BareChecksummer",
    "ChecksumHelperClient",
    "CoreutilsChecksummer",
    "CoreutilsOutput",
    "DigestRequest",
    "HelperUnavailable",
    "OpenChannel",
    "RemoteChecksumError",
    "RemoteDigest",
    "RemoteFileNotFoundError",
    "RemoteIsADirectoryError",
    "RemoteOSError",
    "RemotePermissionError",
    "RunCommand",
    "bare_path",
    "choose_remote_method",
    "coreutils_command",
    "helper_command",
    "helper_preamble",
    "helper_source",
    "parse_coreutils_output",
    "remote_error",
]
