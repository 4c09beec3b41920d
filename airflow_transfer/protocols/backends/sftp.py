"""sftp:// through paramiko's SFTP client over our verified SSH transport.

The bulk sftp<->file path stays on the pipelined engine (engine/transfer.py);
this backend serves the generic path (sftp with a non-local peer, fall-back
phases with a wrapped backend), listings, probes and the conformance suite.
"""

from __future__ import annotations

import errno
import shlex
import stat as st
from typing import BinaryIO

from ...paths import check_entry_name
from ..paramiko_lib import paramiko
from ..ssh import SSHTarget, open_transport
from .base import Backend, Capabilities, FileInfo

_SUMS = {"sha256": "sha256sum", "md5": "md5sum", "sha1": "sha1sum"}


class SFTPBackend(Backend):
    scheme = "sftp"
    caps = Capabilities(ranged_write=True, append_write=True, set_mtime=True, exec=True, server_checksum=tuple(_SUMS))

    def __init__(self, target: SSHTarget) -> None:
        self.target = target
        self.transport = open_transport(target)
        try:
            self.sftp = paramiko.SFTPClient.from_transport(self.transport)
            # paramiko waits forever by default: a stalled server must fail, and be retried.
            self.sftp.get_channel().settimeout(target.idle_timeout)
        except Exception as exc:
            self.transport.close()
            raise ConnectionError(f"SFTP subsystem refused on {target.display}: {exc}") from exc
        self._exec_ok: bool | None = None

    def _info(self, path: str, a) -> FileInfo:
        is_dir = st.S_ISDIR(a.st_mode or 0)
        return FileInfo(
            path, 0 if is_dir else int(a.st_size or 0), float(a.st_mtime or 0), is_dir, st.S_IMODE(a.st_mode or 0)
        )

    def stat(self, path: str) -> FileInfo:
        return self._info(path, _call(self.sftp.stat, path))

    def listdir(self, path: str) -> list[FileInfo]:
        out = []
        for a in _call(self.sftp.listdir_attr, path):
            if a.filename in (".", ".."):
                continue
            check_entry_name(a.filename, path)
            mode = a.st_mode or 0
            if st.S_ISREG(mode) or st.S_ISDIR(mode):
                out.append(self._info(path.rstrip("/") + "/" + a.filename, a))
        return sorted(out, key=lambda f: f.path)

    def dir_identity(self, path: str) -> str | None:
        try:
            return _call(self.sftp.normalize, path)  # REALPATH: links resolved by the server
        except OSError:
            return None

    def open_read(self, path: str, offset: int = 0) -> BinaryIO:
        f = _call(self.sftp.open, path, "rb")
        f.prefetch() if offset == 0 else None
        if offset:
            f.seek(offset)
        return f

    def open_write(self, path: str, offset: int = 0) -> BinaryIO:
        f = _call(self.sftp.open, path, "wb" if offset == 0 else "r+b")
        f.set_pipelined(True)
        if offset:
            f.seek(offset)
        return f

    def rename(self, src: str, dst: str) -> None:
        _call(self.sftp.posix_rename, src, dst)

    def delete(self, path: str) -> None:
        _call(self.sftp.remove, path)

    def rmdir(self, path: str) -> None:
        _call(self.sftp.rmdir, path)

    def mkdir(self, path: str, parents: bool = True, exist_ok: bool = True) -> None:
        parts = [p for p in path.split("/") if p]
        todo = ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))] if parents else [path]
        if not path.startswith("/"):
            todo = [t.lstrip("/") for t in todo]
        for d in todo:
            try:
                _call(self.sftp.mkdir, d, 0o755)
            except OSError:
                try:
                    info = self.stat(d)
                except FileNotFoundError:
                    raise
                if not info.is_dir or (d == todo[-1] and not exist_ok):
                    raise FileExistsError(errno.EEXIST, "exists", d) from None

    def set_mtime(self, path: str, mtime: float) -> None:
        _call(self.sftp.utime, path, (int(mtime), int(mtime)))

    def checksum(self, path: str, algorithm: str) -> str | None:
        tool = _SUMS.get(algorithm)
        if tool is None or self._exec_ok is False:
            return None
        try:
            chan = self.transport.open_session(timeout=10)
            chan.settimeout(120)
            chan.exec_command(f"{tool} -b -- {shlex.quote(path)}")
            out = b""
            while True:
                data = chan.recv(65536)
                if not data:
                    break
                out += data
            status = chan.recv_exit_status()
            chan.close()
        except Exception:  # noqa: BLE001 - exec refused: read back instead
            self._exec_ok = False
            return None
        word = out.split(b" ", 1)[0].decode("ascii", "replace")
        if status != 0 or len(word) < 32:
            self._exec_ok = False if status == 127 else self._exec_ok
            return None
        self._exec_ok = True
        return word

    def close(self) -> None:
        try:
            self.sftp.close()
        finally:
            self.transport.close()


def _call(fn, *args):
    """paramiko raises IOError(errno, ...) (already FileNotFoundError etc.) for
    SFTP status codes and SSHException/EOFError when the connection dies."""
    try:
        return fn(*args)
    except OSError:
        raise
    except (EOFError, paramiko.SSHException) as exc:
        raise ConnectionError(f"SFTP connection lost: {exc}") from exc
