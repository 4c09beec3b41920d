"""file:// — the local filesystem."""

from __future__ import annotations

import os
import stat as st
from typing import BinaryIO

from .base import Backend, Capabilities, FileInfo


class LocalBackend(Backend):
    scheme = "file"
    caps = Capabilities(ranged_write=True, append_write=True, set_mtime=True, exec=True, server_checksum=())

    def stat(self, path: str) -> FileInfo:
        s = os.stat(path)
        return FileInfo(
            path,
            s.st_size if not st.S_ISDIR(s.st_mode) else 0,
            s.st_mtime,
            st.S_ISDIR(s.st_mode),
            st.S_IMODE(s.st_mode),
        )

    def listdir(self, path: str) -> list[FileInfo]:
        out = []
        with os.scandir(path) as it:
            for e in it:
                if e.is_symlink():
                    continue  # never followed (the manifest lister skips them too)
                s = e.stat(follow_symlinks=False)
                if not (st.S_ISREG(s.st_mode) or st.S_ISDIR(s.st_mode)):
                    continue
                is_dir = st.S_ISDIR(s.st_mode)
                out.append(FileInfo(e.path, 0 if is_dir else s.st_size, s.st_mtime, is_dir, st.S_IMODE(s.st_mode)))
        return sorted(out, key=lambda f: f.path)

    def open_read(self, path: str, offset: int = 0) -> BinaryIO:
        f = open(path, "rb")
        if offset:
            f.seek(offset)
        return f

    def open_write(self, path: str, offset: int = 0) -> BinaryIO:
        if offset == 0:
            return open(path, "wb")
        fd = os.open(path, os.O_WRONLY)
        f = os.fdopen(fd, "wb")
        f.seek(offset)
        return f

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def delete(self, path: str) -> None:
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def mkdir(self, path: str, parents: bool = True, exist_ok: bool = True) -> None:
        if parents:
            os.makedirs(path, exist_ok=exist_ok)
        else:
            try:
                os.mkdir(path)
            except FileExistsError:
                if not exist_ok:
                    raise

    def set_mtime(self, path: str, mtime: float) -> None:
        os.utime(path, (mtime, mtime))
