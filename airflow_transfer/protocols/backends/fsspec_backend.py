"""Any fsspec protocol (s3, gcs, memory, ...) behind the same interface.

Object stores have no rename and no partial writes, but an object becomes
visible only when its upload completes, so the generic path writes straight
to the final name (caps.atomic_put) instead of a temporary one.
"""

from __future__ import annotations

import errno
import posixpath
from typing import BinaryIO

import fsspec

from .base import Backend, Capabilities, FileInfo

_OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "abfs", "az", "adl", "oss"}


def _mtime(info: dict) -> float:
    for key in ("mtime", "LastModified", "last_modified", "created", "updated"):
        v = info.get(key)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return float(v.timestamp())
        try:
            return float(v)
        except (TypeError, ValueError):
            continue
    return 0.0


def _map(exc: BaseException, path: str) -> BaseException:
    if isinstance(exc, OSError):
        return exc
    text = str(exc)
    low = text.lower()
    if "nosuchkey" in low or "not found" in low or "nosuchbucket" in low:
        return FileNotFoundError(errno.ENOENT, text, path)
    if "accessdenied" in low or "forbidden" in low:
        return PermissionError(errno.EACCES, text, path)
    return OSError(errno.EIO, text, path)


class FsspecBackend(Backend):
    def __init__(self, protocol: str, storage_options: dict | None = None) -> None:
        self.scheme = protocol
        self.fs = fsspec.filesystem(protocol, skip_instance_cache=True, **(storage_options or {}))
        obj = protocol in _OBJECT_STORES
        self.caps = Capabilities(
            ranged_write=False, append_write=False, rename=not obj, atomic_put=obj, set_mtime=False, parallel=True
        )

    def _info(self, info: dict) -> FileInfo:
        name = info["name"]
        if self.scheme == "memory" and not name.startswith("/"):
            name = "/" + name
        is_dir = info.get("type") == "directory"
        return FileInfo(name, 0 if is_dir else int(info.get("size") or 0), _mtime(info), is_dir)

    def _norm(self, path: str) -> str:
        return path.lstrip("/") if self.scheme in _OBJECT_STORES else path

    def _out(self, path: str) -> str:
        return "/" + path if self.scheme in _OBJECT_STORES and not path.startswith("/") else path

    def stat(self, path: str) -> FileInfo:
        try:
            info = self.fs.info(self._norm(path))
        except Exception as exc:
            raise _map(exc, path) from exc
        out = self._info(info)
        out.path = path
        return out

    def listdir(self, path: str) -> list[FileInfo]:
        try:
            if not self.fs.isdir(self._norm(path)):
                if self.fs.exists(self._norm(path)):
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
                raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
            entries = (
                self.fs.ls(self._norm(path), detail=True, refresh=True)
                if self.scheme in _OBJECT_STORES
                else self.fs.ls(self._norm(path), detail=True)
            )
        except OSError:
            raise
        except Exception as exc:
            raise _map(exc, path) from exc
        out = []
        for e in entries:
            info = self._info(e)
            info.path = posixpath.join(path.rstrip("/") or "/", posixpath.basename(e["name"].rstrip("/")))
            if info.path.rstrip("/") == path.rstrip("/"):
                continue
            out.append(info)
        return sorted(out, key=lambda f: f.path)

    def open_read(self, path: str, offset: int = 0) -> BinaryIO:
        try:
            if not self.fs.exists(self._norm(path)) or self.fs.isdir(self._norm(path)):
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            f = self.fs.open(self._norm(path), "rb")
        except OSError:
            raise
        except Exception as exc:
            raise _map(exc, path) from exc
        if offset:
            f.seek(offset)
        return f

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        try:
            end = None if length is None else offset + length
            return self.fs.cat_file(self._norm(path), start=offset, end=end)
        except Exception as exc:
            raise _map(exc, path) from exc

    def open_write(self, path: str, offset: int = 0) -> BinaryIO:
        if offset:
            raise OSError(errno.ENOTSUP, f"{self.scheme} cannot write at an offset", path)
        parent = posixpath.dirname(self._norm(path))
        if self.scheme not in _OBJECT_STORES and parent and not self.fs.isdir(parent):
            raise FileNotFoundError(errno.ENOENT, "parent directory does not exist", path)
        try:
            return self.fs.open(self._norm(path), "wb")
        except Exception as exc:
            raise _map(exc, path) from exc

    def rename(self, src: str, dst: str) -> None:
        if not self.fs.exists(self._norm(src)):
            raise FileNotFoundError(errno.ENOENT, "no such file", src)
        try:
            self.fs.mv(self._norm(src), self._norm(dst))
        except Exception as exc:
            raise _map(exc, src) from exc

    def delete(self, path: str) -> None:
        if not self.fs.exists(self._norm(path)):
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        try:
            self.fs.rm_file(self._norm(path))
        except Exception as exc:
            raise _map(exc, path) from exc

    def mkdir(self, path: str, parents: bool = True, exist_ok: bool = True) -> None:
        if self.scheme in _OBJECT_STORES:
            bucket = self._norm(path).split("/", 1)[0]
            if bucket and not self.fs.exists(bucket):
                try:
                    self.fs.mkdir(bucket)
                except Exception as exc:
                    raise _map(exc, path) from exc
            return  # prefixes exist as soon as an object does
        if self.fs.exists(path):
            if not exist_ok or not self.fs.isdir(path):
                raise FileExistsError(errno.EEXIST, "exists", path)
            return
        try:
            self.fs.makedirs(path, exist_ok=exist_ok) if parents else self.fs.mkdir(path, create_parents=False)
        except Exception as exc:
            raise _map(exc, path) from exc

    def rmdir(self, path: str) -> None:
        try:
            self.fs.rmdir(self._norm(path))
        except Exception as exc:
            raise _map(exc, path) from exc

    def close(self) -> None:
        pass
