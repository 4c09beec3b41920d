"""Local to local copies beneath the runner, and the local finishing steps every mover shares."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .sftp_jobs import FileTask, SourceChanged, mtime_changed
from .verify import SourceHasher

if TYPE_CHECKING:
    from .runner import Runner

BLOCK = 1 << 20


class LocalMover:
    """Both ends on this machine: no connection, one file at a time per worker."""

    where = "localhost"

    def __init__(self, runner: Runner) -> None:
        self.r = runner

    def connect(self) -> Any:
        return None

    def release(self, conn: Any, broken: bool) -> None:
        pass

    def describe(self) -> str:
        return ""

    def stat_source(self, task: FileTask) -> tuple[int, float]:
        st = os.stat(task.src)
        return st.st_size, st.st_mtime

    def drain(self, conn: Any, gone: list[bool]) -> None:
        r = self.r
        for i in r.schedule.each():
            t = r.tasks[i]
            t.attempts += 1
            t0 = time.monotonic()
            try:
                hasher = self._copy(t)
                finalize_local(t, rename=not r.alg)
                t.moved_total += t.size
                r.s.stats.add_bytes(t.size)
            except OSError as exc:
                unlink_quiet(t.tmp)
                r.failed(i, exc, time.monotonic() - t0, t.dst)
                continue
            if hasher is not None:
                r.verify.submit(i, [hasher.piece()])
            else:
                r.finish(i, True, time.monotonic() - t0, None)

    def _copy(self, t: FileTask) -> SourceHasher | None:
        with open(t.src, "rb") as fin:
            st = os.fstat(fin.fileno())
            if st.st_size != t.size or mtime_changed(st.st_mtime, t.mtime):
                raise SourceChanged(f"source changed since it was listed: {t.src}")
            hasher = SourceHasher(self.r.alg, 0) if self.r.alg else None
            with open(t.tmp, "wb") as fout:
                while data := fin.read(BLOCK):
                    if hasher is not None:
                        hasher.update(hasher.next, data)
                    fout.write(data)
        return hasher


def finalize_local(t: FileTask, rename: bool = True) -> None:
    """Mode and mtime on a local temporary file, then (unless verification does it) its rename."""
    os.chmod(t.tmp, t.mode & 0o7777)
    os.utime(t.tmp, (t.mtime, t.mtime))
    if rename:
        os.replace(t.tmp, t.dst)


def unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
