"""ftp:// with the standard library's ftplib (passive mode, binary).

One control connection per backend; every read or write opens a data
connection (that is FTP). Resume uses REST before STOR (append at an offset)
and RETR; renames are RNFR/RNTO; modification times are set with MFMT where
the server has it. Passwords come from a netrc file (NETRC or ~/.netrc),
never from URLs.
"""

from __future__ import annotations

import errno
import ftplib
import io
import netrc
import os
import socket
import time
from datetime import UTC, datetime
from typing import BinaryIO

from ...paths import check_entry_name
from .base import Backend, Capabilities, FileInfo, not_found

DEFAULT_PORT = 21
TIMEOUT = 20.0


def netrc_login(host: str, user: str | None) -> tuple[str, str]:
    """(user, password) for host from netrc; anonymous when it has no entry."""
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    if os.path.exists(path):
        try:
            entry = netrc.netrc(path).authenticators(host)
        except (netrc.NetrcParseError, OSError):
            entry = None
        if entry and (user is None or entry[0] == user):
            return entry[0], entry[2] or ""
    return user or "anonymous", "anonymous@" if not user else ""


def _map(exc: BaseException, path: str = "") -> BaseException:
    if isinstance(exc, ftplib.error_perm):
        text = str(exc)
        code = text[:3]
        low = text.lower()
        if "permission" in low or "denied" in low or "privilege" in low or code in ("530", "532"):
            return PermissionError(errno.EACCES, text, path)
        if "exist" in low and "not" not in low:
            return FileExistsError(errno.EEXIST, text, path)
        if code in ("550", "553", "450"):
            if "directory" in low and "not a" in low:
                return NotADirectoryError(errno.ENOTDIR, text, path)
            return FileNotFoundError(errno.ENOENT, text, path)
        return OSError(errno.EIO, text, path)
    if isinstance(exc, ftplib.error_temp):
        return ConnectionError(f"FTP server busy or closing: {exc}")
    if isinstance(exc, (EOFError, ftplib.error_reply, ftplib.error_proto)):
        return ConnectionError(f"FTP connection lost: {exc}")
    if isinstance(exc, OSError):
        return exc
    return OSError(errno.EIO, str(exc), path)


class _DataConnection(io.RawIOBase):
    """One transfer's data connection. Closing it (once) closes the socket and then reads the
    server's reply to the transfer on the control connection (finish())."""

    def __init__(self, ftp: ftplib.FTP, sock: socket.socket) -> None:
        self.ftp, self.sock = ftp, sock

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self.finish()

    def finish(self) -> None:
        raise NotImplementedError


class _DataReader(_DataConnection):
    eof = False  # the server closed the data connection: the whole file arrived

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            n = self.sock.recv_into(b)
        except OSError as exc:
            raise ConnectionError(f"FTP data connection lost: {exc}") from exc
        if n == 0:
            self.eof = True
        return n

    def finish(self) -> None:
        try:
            self.sock.close()
        finally:
            try:
                # 226 after the whole file; 426/451 when we stopped early: both are fine here.
                self.ftp.voidresp()
            except (ftplib.error_temp, ftplib.error_perm):
                if self.eof:
                    raise
            except (EOFError, OSError) as exc:
                raise ConnectionError(f"FTP connection lost: {exc}") from exc


class _DataWriter(_DataConnection):
    def __init__(self, ftp: ftplib.FTP, sock: socket.socket, path: str) -> None:
        super().__init__(ftp, sock)
        self.path = path

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        try:
            self.sock.sendall(b)
        except OSError as exc:
            raise ConnectionError(f"FTP data connection lost: {exc}") from exc
        return len(b)

    def finish(self) -> None:
        try:
            self.sock.close()
            self.ftp.voidresp()  # the server confirms the whole upload was stored
        except Exception as exc:
            raise _map(exc, self.path) from exc


class FTPBackend(Backend):
    scheme = "ftp"
    caps = Capabilities(ranged_write=False, append_write=True, set_mtime=True, parallel=True)

    def __init__(
        self,
        host: str,
        port: int | None = None,
        user: str | None = None,
        password: str | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        self.host, self.port = host, port or DEFAULT_PORT
        if password is None:
            user, password = netrc_login(host, user)
        self.user = user or "anonymous"
        self.ftp = ftplib.FTP(timeout=timeout)
        try:
            self.ftp.connect(host, self.port)
            self.ftp.login(self.user, password or "")
            self.ftp.voidcmd("TYPE I")
            self.ftp.set_pasv(True)
        except ftplib.error_perm as exc:
            self.ftp.close()
            raise PermissionError(errno.EACCES, f"FTP login as {self.user!r} refused: {exc}", host) from exc
        except Exception as exc:
            self.ftp.close()
            if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
                raise ConnectionError(f"cannot connect to FTP {host}:{self.port}: {exc.strerror or exc}") from exc
            raise _map(exc, host) from exc
        self._mfmt = True

    def _cmd(self, fn, *args, path: str = ""):
        try:
            return fn(*args)
        except Exception as exc:
            raise _map(exc, path) from exc

    @staticmethod
    def _facts_info(path: str, facts: dict) -> FileInfo:
        kind = facts.get("type", "file").lower()
        is_dir = kind in ("dir", "cdir", "pdir")
        mtime = 0.0
        if "modify" in facts:
            m = facts["modify"]
            dt = datetime.strptime(m[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
            mtime = dt.timestamp() + (float("0" + m[14:]) if len(m) > 14 and m[14] == "." else 0.0)
        mode = int(facts["unix.mode"], 8) if "unix.mode" in facts else None
        return FileInfo(path, 0 if is_dir else int(facts.get("size", 0)), mtime, is_dir, mode)

    def stat(self, path: str) -> FileInfo:
        try:
            resp = self.ftp.sendcmd(f"MLST {path}")
        except ftplib.error_perm as exc:
            raise _map(exc, path) from exc
        except Exception as exc:
            raise _map(exc, path) from exc
        # "250-Listing path\n type=file;size=3;modify=...; /path\n250 End"
        for line in resp.splitlines()[1:]:
            line = line.strip()
            if "=" in line and ";" in line:
                facts_text = line.split(" ", 1)[0]
                facts = dict(f.split("=", 1) for f in facts_text.split(";") if "=" in f)
                facts = {k.lower(): v for k, v in facts.items()}
                return self._facts_info(path, facts)
        raise not_found(path)

    def listdir(self, path: str) -> list[FileInfo]:
        try:
            try:
                entries = list(self.ftp.mlsd(path, facts=["type", "size", "modify", "unix.mode"]))
            finally:
                # ftplib lists in ASCII mode (TYPE A) and leaves it so: data must go binary again,
                # or line endings in files are silently rewritten.
                self.ftp.voidcmd("TYPE I")
        except Exception as exc:
            raise _map(exc, path) from exc
        out = []
        for name, facts in entries:
            if name in (".", "..") or facts.get("type") in ("cdir", "pdir"):
                continue
            check_entry_name(name, path)
            info = self._facts_info(path.rstrip("/") + "/" + name, {k.lower(): v for k, v in facts.items()})
            if facts.get("type", "file") in ("file", "dir"):
                out.append(info)
        if not out:
            # MLSD of a file or a missing path may "succeed" empty: tell them apart.
            if not self.stat(path).is_dir:
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
        return sorted(out, key=lambda f: f.path)

    def open_read(self, path: str, offset: int = 0) -> BinaryIO:
        try:
            sock = self.ftp.transfercmd(f"RETR {path}", rest=offset or None)
        except Exception as exc:
            raise _map(exc, path) from exc
        return io.BufferedReader(_DataReader(self.ftp, sock), 1 << 20)

    def open_write(self, path: str, offset: int = 0) -> BinaryIO:
        if offset:
            size = self.stat(path).size
            if size != offset:
                raise OSError(errno.EINVAL, f"FTP can only continue a file at its end ({size}), not at {offset}", path)
            cmd = f"APPE {path}"
        else:
            cmd = f"STOR {path}"
        try:
            sock = self.ftp.transfercmd(cmd)
        except Exception as exc:
            raise _map(exc, path) from exc
        return io.BufferedWriter(_DataWriter(self.ftp, sock, path), 1 << 20)

    def rename(self, src: str, dst: str) -> None:
        self._cmd(self.ftp.rename, src, dst, path=src)

    def delete(self, path: str) -> None:
        self._cmd(self.ftp.delete, path, path=path)

    def rmdir(self, path: str) -> None:
        self._cmd(self.ftp.rmd, path, path=path)

    def mkdir(self, path: str, parents: bool = True, exist_ok: bool = True) -> None:
        parts = [p for p in path.split("/") if p]
        todo = ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))] if parents else [path]
        for d in todo:
            try:
                self.ftp.mkd(d)
            except ftplib.error_perm as exc:
                try:
                    info = self.stat(d)
                except FileNotFoundError:
                    raise _map(exc, d) from exc
                if not info.is_dir or (d == todo[-1] and not exist_ok):
                    raise FileExistsError(errno.EEXIST, "exists", d) from None
            except Exception as exc:
                raise _map(exc, d) from exc

    def set_mtime(self, path: str, mtime: float) -> None:
        if not self._mfmt:
            return
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(int(mtime)))
        try:
            self.ftp.sendcmd(f"MFMT {stamp} {path}")
        except ftplib.error_perm as exc:
            if str(exc).startswith(("500", "502", "504")):
                self._mfmt = False
                return
            raise _map(exc, path) from exc
        except Exception as exc:
            raise _map(exc, path) from exc

    def close(self) -> None:
        try:
            self.ftp.quit()
        except Exception:  # noqa: BLE001 - already gone
            self.ftp.close()
