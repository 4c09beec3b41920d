"""Whole-file destination digests from a checksum command, one command per file.

The fall-backs when the python3 helper cannot run: `CoreutilsChecksummer` runs
`sha256sum -- FILE` and friends under `sh`, after a best-effort fsync and cache
drop; `BareChecksummer` runs `md5sum FILE` with no shell at all, for servers
that only emulate a few commands over exec. Neither digests ranges or blocks.

The transport stays abstract: `RunCommand(command) -> (exit_status, stdout_bytes,
stderr_bytes)`, one call per file.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from .algorithms import COREUTILS_COMMANDS, DEFAULT_ALGORITHM, algorithm_info, digest_bytes
from .blocks import FileDigests
from .remote_errors import RemoteChecksumError, remote_error
from .remote_results import PathArg, RemoteDigest, is_hex, path_text

RunCommand = Callable[[str], tuple[int, bytes, bytes]]

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
    text = path_text(path)
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
    if not is_hex(digest, size) or line[2 * size : 2 * size + 1] != b" ":
        raise ValueError(f"no {name} digest in coreutils output: {lines[3][:120]!r}")
    return CoreutilsOutput(
        digest, lines[0] == b"fsync=1", lines[1] == b"drop=1", int(count) if count.isdigit() else None
    )


class _CommandChecksummer:
    """Runs one command per file at the destination through `run`."""

    def __init__(self, run: RunCommand, where: str = "destination") -> None:
        self._run = run
        self.where = where

    def _failed(self, code: str, status: int, stderr: bytes, path: str) -> RemoteChecksumError:
        """The error of a command that exited with `status`: its last line of stderr says why."""
        lines = stderr.decode("utf-8", "replace").strip().splitlines()
        return remote_error(code, lines[-1] if lines else f"exit status {status}", path, self.where)


class CoreutilsChecksummer(_CommandChecksummer):
    """Whole-file digests with one coreutils command per file (no ranges, no blocks)."""

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
        text = path_text(path)
        status, out, err = self._run(coreutils_command(name, text, fsync, drop_cache))
        if status != 0:
            raise self._failed(self._code(status, err), status, err, text)
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


def bare_path(path: str) -> str:
    """`path` with a backslash before every character but [A-Za-z0-9/._-]: how a server that
    runs a checksum command without a shell (rclone's serve sftp) unescapes its argument, and
    still one word to a POSIX shell."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "/._-") else "\\" + c for c in path)


class BareChecksummer(_CommandChecksummer):
    """Whole-file digests from a checksum command run without a shell (`md5sum FILE`), as
    servers that emulate a few commands over exec offer (rclone: md5sum, sha1sum). No fsync and
    no cache drop are possible there: the digest is of what the server reads back."""

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
        text = path_text(path)
        status, out, err = self._run(f"{COREUTILS_COMMANDS[name]} {bare_path(text)}")
        if status != 0:
            code = "ENOENT" if b"does not exist" in err or b"No such file" in err else "EIO"
            raise self._failed(code, status, err, text)
        size = algorithm_info(name).digest_size
        digest = out[: 2 * size].decode("ascii", "replace").lower()
        if not is_hex(digest, size):
            raise remote_error("EPROTO", f"no {name} digest in {out[:120]!r}", text, self.where)
        return RemoteDigest(text, FileDigests(name, 0, 0, digest, 0, ()), "command", False, False)


__all__ = [
    "BareChecksummer",
    "CoreutilsChecksummer",
    "CoreutilsOutput",
    "RunCommand",
    "bare_path",
    "coreutils_command",
    "parse_coreutils_output",
]
