"""The one runner: every protocol's files go through here.

A chunk's files are handed to cc worker threads (engine/schedule.py); each
worker holds one connection of its protocol's mover and moves files until
none is left. What differs per protocol (how to connect, move one file,
stat a source) is the mover's: the pipelined SFTP mover
(engine/sftp_mover.py), the local one (engine/local_mover.py) and the
generic backend one (engine/backend_copy.py). What is the same for all is
here and only here: retries and their backoff, giving up at the deadline,
skipping files already there, the journal, the outcome of every file, and
the hand-off to verification (engine/handoff.py).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .control import NOT_FINISHED
from .failures import MAX_REPAIRS, error_text, judge
from .handoff import VerifyHandoff
from .head_start import adopt
from .params import TransferParams
from .result import ChunkResult, FileOutcome
from .retry import classify
from .schedule import Schedule
from .sftp_jobs import FileTask

if TYPE_CHECKING:
    from .session import Session

ABANDON_GRACE = 5.0  # seconds a chunk waits for files in flight once a fall-back abandoned its protocol


class Mover(Protocol):
    """What differs per protocol beneath the runner."""

    where: str  # the remote end, for connection errors

    def connect(self) -> Any: ...

    def release(self, conn: Any, broken: bool) -> None: ...

    def drain(self, conn: Any, gone: list[bool]) -> None:
        """Move files taken from the runner's schedule over `conn` until none is ready."""

    def stat_source(self, task: FileTask) -> tuple[int, float]:
        """The source's size and mtime now (after it changed while it was read)."""

    def describe(self) -> str:
        """How the chunk's files travelled, for its summary; empty for the session's usual way."""


class Runner:
    """One chunk's files, moved by `mover` over cc connections, with retries and resume."""

    def __init__(
        self,
        session: Session,
        tasks: list[FileTask],
        params: TransferParams,
        outcomes: dict[int, FileOutcome],
        todo: list[int],
    ) -> None:
        self.s, self.tasks, self.params, self.outcomes = session, tasks, params, outcomes
        self.policy = session.retry
        self.host = (session.remote or session.dst).host_label  # where errors happened, for messages
        self.alg = session.verify
        self.index = {id(t): i for i, t in enumerate(tasks)}
        self.worker_errors: list[BaseException] = []
        self.max_files_in_flight = 0
        self.schedule = Schedule(todo, params.cc, session.control.stopping, self._transfers_idle)
        self.verify = VerifyHandoff(self)
        self.mover: Mover = session.mover(self)

    # Multi-Chunk resizes a running chunk (engine/chunk_session.py).
    @property
    def wanted(self) -> int:
        return self.schedule.wanted

    @property
    def live(self) -> int:
        return self.schedule.live

    def set_workers(self, n: int) -> None:
        self.schedule.set_workers(n)

    def stop(self) -> None:
        self.schedule.stop()

    def _transfers_idle(self) -> None:
        if self.s.verifier is not None:
            self.s.verifier.gate.set()  # sequential mode: every transfer ended, now the checksums

    # -- outcomes ------------------------------------------------------------
    def journal_range(self, rel: str, off: int, n: int) -> None:
        if self.s.journal is not None:
            self.s.journal.mark_range(rel, off, n)

    def finish(self, i: int, ok: bool, seconds: float, error: str | None, report: bool = False) -> None:
        """File i's outcome. `report`: count a failure with the fall-back controller here (a
        failed attempt already counted itself in `failed`)."""
        if ok and error is None:
            self.finish_ok([i], seconds)  # one way for a verified file, alone or in a group
            return
        t = self.tasks[i]
        # Journal first: once `running` reaches 0 the chunk returns and the caller may close
        # the journal, and a verdict delivered on the verifier thread would then be lost.
        j = self.s.journal
        try:
            if j is not None:
                if ok:
                    j.mark_done(t.rel, t.size, t.mtime, attempts=t.attempts)
                else:
                    j.mark_failed(t.rel, error or "failed", attempts=t.attempts)
        finally:
            self.s.stats.file_finished(ok)

            def record() -> None:
                self.outcomes[i] = FileOutcome(t.rel, t.size, t.moved_total, seconds, ok, error)

            self.schedule.settle(record)
            if ok or report:
                self.s.control.event(ok, "error", error or "")

    def finish_ok(self, indices: list[int], seconds: float) -> None:
        """finish(i, True, seconds, None) for each of `indices` (a bundle group's verified
        files), in the same order of effects, each shared structure locked once for all."""
        if not indices:
            return
        tasks = self.tasks
        j = self.s.journal
        try:
            if j is not None:
                j.mark_done_many([(tasks[i].rel, tasks[i].size, tasks[i].mtime, tasks[i].attempts) for i in indices])
        finally:
            self.s.stats.files_finished(len(indices))
            outcomes = self.outcomes

            def record() -> None:
                for i in indices:
                    t = tasks[i]
                    outcomes[i] = FileOutcome(t.rel, t.size, t.moved_total, seconds, True, None)

            self.schedule.settle(record, len(indices))
            self.s.control.events_ok(len(indices))

    def failed(self, i: int, exc: BaseException, seconds: float, where: str) -> None:
        """Retry file i later if the error allows and time is left, else fail it."""
        t = self.tasks[i]
        t.last_error = error_text(exc, self.host, where)
        kind, retry = judge(exc, t)
        if kind == "source":
            retry = self._relist(t)
        elif kind == "checksum":
            t.last_error = f"{exc} ({self.host}:{t.dst})"
            if not retry:
                t.last_error = f"{t.last_error}; still wrong after {MAX_REPAIRS} re-sends"
        self.s.control.event(False, kind, t.last_error)
        if retry and self.s.control.aborted():
            self.schedule.settle()  # the next protocol carries it: run() says why it stopped here
            return
        if retry and t.attempts < self.policy.max_attempts and self.s.time_left() > 0:
            self.schedule.later(i, self.policy.delay(t.attempts) if kind == "error" else 0.0)
            return
        if retry and self.s.time_left() <= 0:
            t.last_error = f"deadline reached after {t.attempts} attempts; last error: {t.last_error}"
        elif retry:
            t.last_error = f"gave up after {t.attempts} attempts; last error: {t.last_error}"
        self.finish(i, False, seconds, t.last_error)

    def _relist(self, t: FileTask) -> bool:
        """The source changed: take its new size and mtime and send it again from scratch."""
        try:
            size, mtime = self.mover.stat_source(t)
        except Exception:  # noqa: BLE001 - gone or unreadable: report the change as is
            return False
        self.s.stats.add_total(0, size - t.size)
        t.size, t.mtime = size, mtime
        t.todo_ranges, t.resumable, t.repair, t.done = None, False, None, None
        return True

    # -- run -------------------------------------------------------------------
    def run(self) -> None:
        if not self.schedule.start(self._worker):
            return
        self.schedule.join()
        if self.schedule.stopped and self.s.verifier is not None:
            self.s.verifier.gate.set()  # sequential mode: no transfer is left to wait for
        # Files still being verified get their verdict first (the verifier gives up at the
        # deadline too), so every file ends with exactly one outcome. Once the protocol was
        # abandoned and every worker is gone, a file whose connection died under it will not
        # end here: after a grace period the next protocol carries it.
        self.schedule.wait_idle(lambda still: self.s.control.aborted() and still > ABANDON_GRACE)
        self._fail_left()

    def _fail_left(self) -> None:
        """Whatever no worker could take (deadline, fatal connection error) fails with the
        reason; on a stop or a protocol switch it is left not finished (the journal keeps it)."""
        sched = self.schedule
        reason = sched.fatal or (self.worker_errors[-1] if self.worker_errors else RuntimeError("no worker ran"))
        left = sched.take_left()
        extra = [i for i in range(len(self.tasks)) if i not in self.outcomes and i not in left]
        with sched.lock:
            sched.running += len(extra)
        switching = self.s.control.stopping()
        for i in left + extra:
            t = self.tasks[i]
            if sched.stopped or switching:
                why = (
                    "the transfer was stopped" if sched.stopped else f"protocol switch: {t.last_error or 'not started'}"
                )

                def record(i: int = i, t: FileTask = t, why: str = why) -> None:
                    self.outcomes[i] = FileOutcome(t.rel, t.size, t.moved_total, 0.0, False, f"{NOT_FINISHED}: {why}")

                sched.settle(record)
                continue
            if t.last_error and not sched.fatal:
                msg = f"deadline reached after {t.attempts} attempts; last error: {t.last_error}"
            else:
                msg = error_text(reason, self.host, t.dst)
            self.finish(i, False, 0.0, msg, report=True)

    def _worker(self) -> None:
        gone = [False]  # set by retire, which counts this worker out itself
        try:
            self._work(gone)
        finally:
            self.schedule.worker_left(gone)

    def _work(self, gone: list[bool]) -> None:
        attempt = 0
        while self.schedule.wait_for_work() and not self.schedule.retire(gone):
            try:
                conn = self.mover.connect()
            except BaseException as exc:  # noqa: BLE001 - classified below
                self.worker_errors.append(exc)
                retry, _ = classify(exc)
                self.s.control.event(False, "connect", error_text(exc, self.host, self.mover.where))
                if not retry:
                    self.schedule.fail_all(exc)
                    return
                attempt += 1
                wait = min(self.policy.delay(attempt), self.s.time_left())
                if wait <= 0 or self.s.control.stopping():
                    return
                time.sleep(wait)
                continue
            attempt = 0
            broken = False
            try:
                self.mover.drain(conn, gone)
            except BUGS as exc:
                # A fault in our own code fails the same way on every connection: reconnecting
                # would loop until the deadline. The chunk's files fail with it instead.
                self.mover.release(conn, True)
                self.worker_errors.append(exc)
                self.schedule.fail_all(exc)
                return
            except Exception as exc:  # noqa: BLE001 - the connection is dropped; its files were handed back
                broken = True
                self.worker_errors.append(exc)
                self.mover.release(conn, broken)
            else:
                self.mover.release(conn, broken)


# Exceptions that mean a mistake in this program, never the network or the remote side.
BUGS = (TypeError, AttributeError, NameError, AssertionError, NotImplementedError)


def found_in_place(
    session: Session, tasks: list[FileTask], picked: list[int], fresh: set[str] | frozenset[str] = frozenset()
) -> set[int]:
    """Those of `picked` (indices into `tasks`) whose destination has their size and mtime;
    those in `fresh` directories (created for this chunk, see claim_fresh_dirs) are not looked for."""
    if fresh:
        folders: dict[str, bool] = {}  # a file's directory, as its path names it -> fresh; once per directory

        def in_fresh(dst: str) -> bool:
            folder = dst.rpartition("/")[0]
            seen = folders.get(folder)
            if seen is None:
                seen = folders[folder] = posixpath.normpath(posixpath.dirname(dst)) in fresh
            return seen

        picked = [i for i in picked if not in_fresh(tasks[i].dst)]
    if not picked:
        return set()
    return {picked[j] for j in session.already_there([tasks[i] for i in picked])}


def _already_there(session: Session, tasks: list[FileTask], fresh: set[str]) -> set[int]:
    """Files not to move: all found in place where the session skips existing files, else only
    those it adopts (sent whole before, outcome unheard); one listing per directory either way."""
    if session.skip_existing:
        return found_in_place(session, tasks, list(range(len(tasks))), fresh)
    return found_in_place(session, tasks, [i for i, t in enumerate(tasks) if t.rel in session.adopt], fresh)


def run_chunk(
    session: Session,
    tasks: list[FileTask],
    params: TransferParams,
    *,
    chunk_id: str,
    dst_root: str,
    attach: Callable[[Runner], None] = lambda runner: None,
) -> ChunkResult:
    """Move `tasks` with `params` and return the chunk's result: the one way through, whatever
    the protocol. `attach` wires the session's verifier to the chunk's runner."""
    t0 = time.monotonic()
    result = ChunkResult(chunk_id, params, files=len(tasks), bytes=sum(t.size for t in tasks), started=t0)
    session.stats.params = {"pp": params.pp, "p": params.p, "cc": params.cc}
    dirs = sorted({t.rel.rpartition("/")[0] for t in tasks} - {""})  # dirname: names are checked (paths.py)
    why = "protocol switch" if session.control.stopping() else ""
    skip: set[int] = set()
    outcomes: dict[int, FileOutcome] = {}
    ahead: set[int] = set()
    ahead_said = ""
    if not why:
        try:
            ahead, ahead_said = adopt(session, tasks, dst_root, outcomes)  # moved before the copy began
            # Only directories this very call creates count as fresh: one made earlier (a fall-back's
            # earlier phase) may have been filled since by another protocol.
            session.claim_fresh_dirs()
            session.ensure_dirs(dst_root, dirs)
            fresh = session.claim_fresh_dirs()
            if ahead:  # those adopted are not looked for again
                left = [i for i in range(len(tasks)) if i not in ahead]
                skip = {left[j] for j in _already_there(session, [tasks[i] for i in left], fresh)}
            else:
                skip = _already_there(session, tasks, fresh)
        except Exception as exc:
            if not session.control.absorb(exc):  # a fall-back carries these files elsewhere
                raise
            why = error_text(exc, (session.remote or session.dst).host_label, dst_root)
    if why:
        result.outcomes = [
            outcomes.get(i) or FileOutcome(t.rel, t.size, 0, 0.0, False, f"{NOT_FINISHED} ({why})")
            for i, t in enumerate(tasks)
        ]
        result.seconds = time.monotonic() - t0
        return result
    for i in skip:
        t = tasks[i]
        outcomes[i] = FileOutcome(t.rel, t.size, ok=True, skipped=True)
        session.stats.file_finished(True, skipped=True)
        session.stats.add_skipped_bytes(t.size)  # progress, not transfer: the rate leaves it out
        # A crash between a rename and its journal mark leaves a complete file the journal does
        # not call done; the re-run that skips it must say so.
        if session.journal is not None:
            session.journal.mark_done(t.rel, t.size, t.mtime)
    runner = Runner(
        session, tasks, params, outcomes, [i for i in range(len(tasks)) if i not in skip and i not in ahead]
    )
    if session.on_runner is not None:
        session.on_runner(runner)
    if len(skip) + len(ahead) < len(tasks):
        attach(runner)
    runner.run()
    result.transport = "; ".join(x for x in (ahead_said, runner.mover.describe()) if x)
    result.outcomes = [outcomes[i] for i in range(len(tasks))]
    result.bytes_moved = sum(o.bytes_moved for o in result.outcomes)
    result.resumed = sum(1 for t in tasks if t.resumed)
    result.retried = sum(1 for t in tasks if t.attempts > 1)
    result.bytes_resent = sum(max(0, t.moved_total - t.size) for t in tasks)
    result.seconds = time.monotonic() - t0
    return result
