"""The hand-off between a chunk's transfers and its verifier.

A file whose bytes are all sent waits for its verdict; the verifier calls
back here (on its own thread). A match renames the temporary file into place
(a batch's renames pipelined on one connection) and finishes the file; a
mismatch sends it again, whole in file mode, only its bad blocks in block
mode (Liu, Jung, Kettimuthu, Sun, Towards Optimizing Large-Scale Data
Transfers with End-to-End Integrity Verification: paper 002 in docs/papers.md).
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING, Any

from ..integrity.algorithms import digest_file
from ..protocols.sftp_wire import SFTPProtocolError
from .failures import ChecksumMismatch
from .retry import classify
from .verify import Piece, VerifyItem

if TYPE_CHECKING:
    from .runner import Runner


class VerifyHandoff:
    """One chunk's side of verification."""

    def __init__(self, runner: Runner) -> None:
        self.r = runner
        self.blocks: Any = None  # block_verify.BlockVerifier in --verify-mode block

    def attach_blocks(self, verifier: Any, resume: dict | None, is_big: Any) -> None:
        """Block mode: register every file with the block verifier; a resumed big file sends
        only the blocks with no journaled digest."""
        r = self.r
        self.blocks = verifier
        verifier.on_mismatch = self.on_block_mismatch
        verifier.begin_chunk()
        known = r.s.resume_blocks
        files = [(i, t, known.get(t.rel) if t.resumable else None) for i, t in enumerate(r.tasks)]
        verifier.register_all(files)
        for i, t, journaled in files:
            if is_big(t):  # only blocks with a journaled digest count as already there
                t.todo_ranges = (verifier.missing(i) or []) if journaled else None

    def journal_block(self, rel: str, block: Any) -> None:
        if self.r.s.journal is not None:
            self.r.s.journal.mark_block(rel, block.offset, block.length, f"{self.r.alg}:{block.digest}")

    def submit(self, i: int, pieces: list[Piece]) -> None:
        r = self.r
        t = r.tasks[i]
        src = t.src if r.s.direction != "download" else None
        alg = r.alg
        whole = (lambda: digest_file(alg, src)) if src and alg else None
        r.schedule.verifying(i, True)
        r.s.verifier.submit(VerifyItem(i, t.tmp, pieces, whole_source=whole, source_path=t.src))

    def on_verdicts(self, verdicts: list) -> None:
        """Runs on the verifier thread: a batch's renames go out pipelined, so a batch costs one
        round trip instead of one per file (on a 50 ms link, 300 files renamed one by one spent
        15 s waiting)."""
        r = self.r
        wire = r.s.verifier.dest.wire if r.s.direction == "upload" else None
        renamed: dict[int, BaseException | None] = {}
        if wire is not None:
            try:
                for item, ok, _ in verdicts:
                    if ok:
                        t = r.tasks[item.index]

                        def on_reply(rt: int, reply: Any, i: int = item.index, path: str = t.dst) -> None:
                            try:
                                wire.expect_status(rt, reply, path)
                                renamed[i] = None
                            except (OSError, SFTPProtocolError) as exc:
                                renamed[i] = exc

                        wire.send_rename(t.tmp, t.dst, on_reply)
                while wire.outstanding:
                    wire.pump(block=True)
            except (OSError, SFTPProtocolError, EOFError) as exc:
                for item, ok, _ in verdicts:
                    if ok:
                        renamed.setdefault(item.index, exc)
        for item, ok, error in verdicts:
            self.on_verdict(
                item, ok, error, renamed.get(item.index) if wire is not None else None, done=wire is not None
            )

    def on_verdict(
        self,
        item: VerifyItem,
        ok: bool,
        error: str | None,
        rename_error: BaseException | None = None,
        done: bool = False,
    ) -> None:
        """Rename a verified file (unless `done` says it was renamed already, with
        `rename_error` its outcome), or send a mismatching one again."""
        r = self.r
        i, t = item.index, r.tasks[item.index]
        r.schedule.verifying(i, False)
        if ok:
            try:
                late = rename_error or getattr(item, "rename_error", None)
                if late is not None:
                    raise late
                if done or getattr(item, "renamed", False):
                    pass  # renamed already, pipelined with the rest of its batch
                elif r.s.direction == "upload":
                    r.s.verifier.dest.wire.rename(t.tmp, t.dst)
                else:
                    os.replace(t.tmp, t.dst)
            except (OSError, SFTPProtocolError, EOFError) as exc:
                if classify(exc)[0]:
                    # The reply was lost with the connection: the rename may or may not have
                    # happened. Say so; the next run's size/mtime check settles it.
                    exc = ConnectionError(
                        "connection lost while renaming into place (the file may be "
                        f"complete; the next run checks): {exc}"
                    )
                r.failed(i, exc, 0.0, t.dst)
                return
            if t.mismatches:
                r.s.verifier.stats.repaired += 1
            r.finish(i, True, 0.0, None)
            return
        mismatch = error is not None and error.startswith("checksum mismatch")
        if mismatch:
            t.mismatches += 1
        t.resumable, t.todo_ranges, t.done = False, None, None  # send the whole file again
        r.failed(i, ChecksumMismatch(error) if mismatch else OSError(errno.EIO, error), 0.0, t.dst)

    def on_block_mismatch(self, i: int, bad: list, error: str) -> None:
        """Runs on a block verifier thread: send only the mismatching blocks again."""
        t = self.r.tasks[i]
        t.mismatches += 1
        t.repair = bad
        self.r.failed(i, ChecksumMismatch(error), 0.0, t.dst)
