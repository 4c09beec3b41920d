"""Alternate-protocol fall-back and switch-back (paper 003, Stork).

A FallbackSession has the TransferSession surface (perform, ensure_dirs,
verify_summary, ...) over an ordered list of protocols for the remote end
(preferred first, then alt_protocols). The copy starts on the preferred
protocol; when that pair is one the pipelined engine moves (local <-> SFTP),
the first phase *is* that engine: one TransferSession, made once, with the
copy's pool, warm-up, verification mode and tuning (job.py drives it through
the same executor as a plain copy, Multi-Chunk included), so asking for a
fall-back costs nothing while the preferred protocol is healthy. A
`Controller` (engine/control.py) installed on it counts failures: errors,
refused connections, and copies that reported success but left the wrong
size (that one alone is enough: a protocol that silently loses data is not
trusted with the rest). After `threshold` consecutive failures the engine
takes no new files, and `complete()` (or `perform()` for a fixed setting)
hands what is left to the next protocol: finished files are never sent again
and partial temporary files are continued where the protocol can append.
While on an alternate, a prober connects to each preferred protocol every
`probe_interval` seconds and, once one answers, the current phase stops
taking new files and the transfer switches back. When every protocol has
failed in a row the controller waits (exponential backoff) and starts over,
until the deadline; then the files left fail with a message naming each
protocol tried and its last error. Every switch is recorded (at, from, to,
reason).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa

from ..errors import TransferError, UsageError
from ..manifest import list_local, list_remote
from ..protocols.endpoint import Endpoint
from ..protocols.fallback import DEFAULT_PROBE_INTERVAL, DEFAULT_THRESHOLD, now_iso, probe, protocol_name
from ..protocols.sessions import uses_engine
from .accounting import Stats
from .backend_copy import BackendSession
from .control import NOT_FINISHED, Controller
from .params import TransferParams
from .result import ChunkResult, FileOutcome
from .retry import RetryPolicy, classify
from .session import SessionBase
from .transfer import TransferSession


class _PhaseStats:
    """The copy's Stats as a phase sees them: a file a phase gives up on is not counted as
    failed (another protocol may carry it; the fall-back counts final failures itself), and
    bytes a later protocol sends again (a resumed file's prefix) never push the progress past
    the copy's total."""

    def __init__(self, stats) -> None:
        object.__setattr__(self, "_stats", stats)

    def file_finished(self, ok: bool, skipped: bool = False) -> None:
        if ok:
            self._stats.file_finished(ok, skipped)

    def add_bytes(self, n: int) -> None:
        s = self._stats
        room = s.bytes_total - s.bytes_done
        if n > room:
            n = max(0, room)
        if n:
            s.add_bytes(n)

    def __getattr__(self, name):
        return getattr(self._stats, name)

    def __setattr__(self, name, value):
        setattr(self._stats, name, value)


class FallbackSession(SessionBase):
    def __init__(
        self,
        src: Endpoint,
        dst: Endpoint,
        protocols: list[Endpoint],
        *,
        side: str,
        stats=None,
        skip_existing: bool = True,
        retry: RetryPolicy | None = None,
        verify: str | None = None,
        threshold: int = DEFAULT_THRESHOLD,
        probe_interval: float = DEFAULT_PROBE_INTERVAL,
        log: Callable[[str], None] | None = None,
        engine_options: dict | None = None,
        pool=None,
    ) -> None:
        if threshold < 1:
            raise UsageError(f"switch threshold must be >= 1 (got {threshold})")
        self.src, self.dst = src, dst
        self.protocols = protocols
        self.side = side
        self.stats = stats or Stats()
        self.phase_stats = _PhaseStats(self.stats)
        self.skip_existing = skip_existing
        self.retry = retry or RetryPolicy()
        self.verify = verify
        self.threshold = threshold
        self.probe_interval = probe_interval
        self.log = log or (lambda line: None)
        self.engine_options = engine_options or {}  # verify_mode etc. for the pipelined engine's phases
        self.current = 0
        # SessionBase.__init__ is not called: journal, before_verify and the engine's verification
        # settings are properties passing through to the engine phase.
        self.switches: list[dict] = []
        self.on_switch: Callable[[dict], None] | None = None
        self.on_runner = None
        self.verifier = None
        self._journal = None
        self._before_verify = None
        self.remote = protocols[0] if protocols[0].scheme == "sftp" else None  # the preferred end, for tuning
        self.tried: dict[str, str] = {}
        self.per_protocol: dict[str, dict] = {}
        self._verify_parts: list[tuple[str, dict]] = []
        self.sent_twice: list[str] = []  # files some phase(s) sent whole more than once
        self.direction = "fallback"
        self._empty_dirs: tuple[str, list[str]] | None = None
        self._dirs_pending = False
        # The first phase on the preferred protocol, when the pipelined engine moves that pair: one
        # session for the whole copy (pool, warm-up, verifier), steered by ctl0.
        self.ctl0 = Controller(threshold)
        self.engine: TransferSession | None = None
        self._driven = False  # job drives self.engine through the tuning executor (complete() follows)
        self._engine_open = False  # the engine's first phase has not ended (connections, verifier live)
        self._engine_summary: tuple[dict | None, list[str]] = (None, [])
        s, d = self.pair(0)
        if uses_engine(s, d):
            self.engine = TransferSession(
                s,
                d,
                stats=self.phase_stats,
                skip_existing=skip_existing,
                retry=self.retry,
                verify=verify,
                pool=pool,
                **self.engine_options,
            )
            self.engine.control = self.ctl0
            self._engine_open = True
        elif pool is not None:
            pool.close()
        self.pool = self.engine.pool if self.engine is not None else None

    # -- what job.py sets and reads on a session, passed to the engine ---------------
    @property
    def journal(self):
        return self._journal

    @journal.setter
    def journal(self, value) -> None:
        self._journal = value
        if self.engine is not None:
            self.engine.journal = value

    @property
    def before_verify(self):
        return self._before_verify

    @before_verify.setter
    def before_verify(self, value) -> None:
        self._before_verify = value
        if self.engine is not None:
            self.engine.before_verify = value

    @property
    def verify_mode(self) -> str:
        return self.engine.verify_mode if self.engine is not None else "file"

    @property
    def bandwidth_bps(self):
        return self.engine.bandwidth_bps if self.engine is not None else None

    @bandwidth_bps.setter
    def bandwidth_bps(self, value) -> None:
        if self.engine is not None:
            self.engine.bandwidth_bps = value

    @property
    def resume_blocks(self) -> dict:
        return self.engine.resume_blocks if self.engine is not None else {}

    @resume_blocks.setter
    def resume_blocks(self, value) -> None:
        if self.engine is not None:
            self.engine.resume_blocks = value

    def warm(self, connections: int) -> None:
        if self.engine is not None:
            self.engine.warm(connections)

    def drive_engine(self) -> TransferSession | None:
        """The preferred protocol's engine session, for job.py to run the tuning algorithm on as a
        plain copy would; complete() then carries whatever it left. None: no engine phase."""
        if self.engine is None:
            return None
        self._driven = True
        return self.engine

    def server_summary(self) -> tuple[dict | None, list[str]]:
        return self.engine.server_summary() if self._engine_open else self._engine_summary

    # -- endpoints -----------------------------------------------------------
    def pair(self, index: int) -> tuple[Endpoint, Endpoint]:
        ep = self.protocols[index]
        return (ep, self.dst) if self.side == "src" else (self.src, ep)

    def _session(self, index: int, ctl: Controller, skip: bool):
        s, d = self.pair(index)
        if index == 0 and self._engine_open and ctl is self.ctl0:
            return self.engine
        if uses_engine(s, d):
            sess = TransferSession(
                s,
                d,
                stats=self.phase_stats,
                skip_existing=skip,
                retry=self.retry,
                verify=self.verify,
                **self.engine_options,
            )
            sess.journal, sess.control = self._journal, ctl
        else:
            sess = BackendSession(
                s,
                d,
                stats=self.phase_stats,
                skip_existing=skip,
                retry=self.retry,
                journal=self._journal,
                verify=self.verify,
                control=ctl,
            )
        sess.before_verify = self._before_verify
        return sess

    def _retire_engine(self) -> None:
        """The first engine phase is over: keep its verification counts, close its connections."""
        if not self._engine_open:
            return
        self._engine_open = False
        if self.engine.verify is not None and (self.engine.verifier is not None or self.engine._retired):
            self._verify_parts.append((protocol_name(self.protocols[0]), self.engine.verify_summary()))
        self._engine_summary = self.engine.server_summary()
        self.engine.close()

    # -- the TransferSession surface -----------------------------------------------
    def close(self) -> None:
        if self._engine_open:
            self.engine.close()

    def __enter__(self) -> FallbackSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def list_source(self):
        """List the source; a remote source on the first protocol that can."""
        if self.side == "dst":
            if self.src.scheme == "file":
                if not os.path.exists(self.src.path):
                    raise TransferError("source does not exist", self.src.path, "check the source path")
                return list_local(self.src.path)
            with BackendSession(self.src, Endpoint("file", "/")) as sess:
                return sess.list_source()
        errors = []
        order = [self.current] + [i for i in range(len(self.protocols)) if i != self.current]
        for i in order:
            s, d = self.pair(i)
            try:
                if i == 0 and self._engine_open and self.engine.pool is not None:
                    return list_remote(self.engine.pool, s.path, s.display)
                if uses_engine(s, d):
                    with TransferSession(s, d, retry=self.retry) as sess:
                        return list_remote(sess.pool, s.path, s.display)
                with BackendSession(s, d, retry=self.retry) as sess:
                    return sess.list_source()
            except TransferError as exc:
                if not classify(exc)[0]:
                    raise
                errors.append(f"{protocol_name(s)}: {exc}")
            except (OSError, EOFError) as exc:
                errors.append(f"{protocol_name(s)}: {exc}")
        raise TransferError(
            f"cannot list the source on any protocol ({'; '.join(errors)})",
            self.src.display,
            "check that the host is up",
        )

    def ensure_dirs(self, dst_root: str, rel_dirs: list[str]) -> None:
        """Made now on the engine when it moves the first phase (as a plain copy does); else, or
        when the preferred protocol cannot make them now, by the next phase's own session."""
        self._empty_dirs = (dst_root, list(rel_dirs))
        self._dirs_pending = True
        if not self._engine_open:
            return
        try:
            self.engine.ensure_dirs(dst_root, rel_dirs)
            self._dirs_pending = False
        except Exception as exc:  # noqa: BLE001 - counted; the phases try again
            self.ctl0.absorb(exc)

    def verify_summary(self) -> dict:
        if self.verify is None:
            return {"algorithm": "none", "mode": "none", "where": "none", "verified": 0, "repaired": 0, "mismatched": 0}
        parts = list(self._verify_parts)
        if self._engine_open:
            parts.append((protocol_name(self.protocols[0]), self.engine.verify_summary()))
        if len(parts) == 1 and not self.switches:
            return parts[0][1]  # one phase carried everything: its own account (mode, blocks, ...)
        out = {"algorithm": self.verify, "mode": "file", "verified": 0, "repaired": 0, "mismatched": 0}
        wheres = []
        for name, part in parts:
            for k in ("verified", "repaired", "mismatched"):
                out[k] += part.get(k, 0)
            if not part.get("verified") and not part.get("mismatched"):
                continue  # a phase that verified nothing says nothing about where
            w = f"{name}: {part.get('where', 'none')}"
            if w not in wheres:
                wheres.append(w)
        out["where"] = "; ".join(wheres) or "none"
        return out

    def summary_extra(self) -> dict:
        return {
            "protocols": self.per_protocol,
            "protocol_order": [protocol_name(p) for p in self.protocols],
            "files_sent_twice_in_full": len(self.sent_twice),
        }

    # -- switching ---------------------------------------------------------------
    def _switch(self, to: int, reason: str) -> None:
        frm = protocol_name(self.protocols[self.current])
        rec = {"at": now_iso(), "from": frm, "to": protocol_name(self.protocols[to]), "reason": reason}
        self.switches.append(rec)
        self.log(f"protocol switch: {rec['from']} -> {rec['to']} ({reason})")
        if self.on_switch is not None:
            try:
                self.on_switch(rec)
            except Exception:  # noqa: BLE001 - the record is in the summary either way
                pass
        self.current = to

    def _prober(self, index: int, ctl: Controller, stop: threading.Event) -> threading.Thread:
        def run():
            while not stop.wait(self.probe_interval):
                for j in range(index):
                    if probe(self.protocols[j]) is None:
                        name = protocol_name(self.protocols[j])
                        ctl.request_switch(j, f"preferred protocol {name} answers again")
                        return

        th = threading.Thread(target=run, name="protocol-prober", daemon=True)
        th.start()
        return th

    def _count(self, name: str, outcomes: list[FileOutcome], moved: int) -> None:
        stats = self.per_protocol.setdefault(name, {"files": 0, "bytes_moved": 0, "phases": 0})
        stats["phases"] += 1
        stats["files"] += sum(1 for o in outcomes if o.ok and not o.skipped)
        stats["bytes_moved"] += moved

    # -- after job.py ran the tuning algorithm on the engine ---------------------------
    def complete(
        self,
        chunks: list[ChunkResult],
        files: pa.Table,
        params: TransferParams,
        *,
        src_root: str,
        dst_root: str,
        modes: list[int] | None = None,
        resume: dict[str, list] | None = None,
    ) -> list[ChunkResult]:
        """Carry what the engine's run left: every file it did not finish when the preferred
        protocol was abandoned, else the files it never got to (a connection that failed below
        the threshold). Their outcomes move from the engine's chunks to one more chunk."""
        if not self._driven:
            return chunks
        self._driven = False
        name = protocol_name(self.protocols[0])
        outcomes = [o for c in chunks for o in c.outcomes]
        self._count(name, outcomes, sum(c.bytes_moved for c in chunks))
        ctl = self.ctl0
        aborted = ctl.aborted()
        carry = {o.path for o in outcomes if not o.ok and (aborted or (o.error or "").startswith(NOT_FINISHED))}
        self._retire_engine()
        for o in outcomes:
            if not o.ok and o.path not in carry:
                self.stats.file_finished(False)  # final here: the phase stats did not count it
        if not carry:
            return chunks
        failed_in_row = 0
        if aborted:
            self.tried[name] = ctl.reason
            failed_in_row = 1
            nxt = 1 % len(self.protocols)
            if nxt != 0:
                self._switch(nxt, ctl.reason)
        paths = files["path"].to_pylist()
        idx = [g for g, p in enumerate(paths) if p in carry]
        sub = files.take(pa.array(idx, pa.int64()))
        sub_modes = [modes[g] for g in idx] if modes else None
        used = TransferParams(pp=1, p=1, cc=max([c.params.cc for c in chunks] or [params.cc]))
        res = self._phases(
            sub,
            used,
            src_root=src_root,
            dst_root=dst_root,
            chunk_id="fallback",
            modes=sub_modes,
            resume=resume,
            first_phase=False,
            touched=True,
            failed_in_row=failed_in_row,
            carried=0 if aborted else ctl.consecutive,
        )
        for c in chunks:
            c.outcomes = [o for o in c.outcomes if o.path not in carry]
        return [*chunks, res]

    # -- the primitive ----------------------------------------------------------------
    def perform(
        self,
        files: pa.Table,
        params: TransferParams,
        *,
        src_root: str,
        dst_root: str,
        chunk_id: str = "chunk-0",
        modes: list[int] | None = None,
        resume: dict[str, list] | None = None,
    ) -> ChunkResult:
        return self._phases(
            files,
            params,
            src_root=src_root,
            dst_root=dst_root,
            chunk_id=chunk_id,
            modes=modes,
            resume=resume,
            first_phase=True,
            touched=False,
        )

    def _phases(
        self,
        files: pa.Table,
        params: TransferParams,
        *,
        src_root: str,
        dst_root: str,
        chunk_id: str,
        modes: list[int] | None,
        resume: dict[str, list] | None,
        first_phase: bool,
        touched: bool,
        failed_in_row: int = 0,
        carried: int = 0,
    ) -> ChunkResult:
        t0 = time.monotonic()
        n = files.num_rows
        sizes = files["size"].to_pylist()
        paths = files["path"].to_pylist()
        result = ChunkResult(chunk_id, params, files=n, bytes=sum(sizes), started=t0)
        outcomes: dict[int, FileOutcome] = {}
        moved = [0] * n
        full_sends = [0] * n
        tries = [0] * n  # phases that carried each file
        remaining = list(range(n))
        was_touched: set[int] = set(remaining) if touched else set()
        while remaining:
            if self.retry.time_left() <= 0:
                tried = "; ".join(f"{k}: {v}" for k, v in self.tried.items()) or "nothing could be tried"
                msg = f"no protocol could finish this file before the deadline (tried {tried})"
                for g in remaining:
                    outcomes[g] = FileOutcome(paths[g], sizes[g], moved[g], 0.0, False, msg)
                    if self._journal is not None:
                        self._journal.mark_failed(paths[g], msg)
                    self.stats.file_finished(False)
                break
            index = self.current
            name = protocol_name(self.protocols[index])
            on_engine = index == 0 and self._engine_open
            ctl = self.ctl0 if on_engine else Controller(self.threshold, carried)
            stop = threading.Event()
            if index > 0:
                self._prober(index, ctl, stop)
            phase_resume = {}
            for g in remaining:
                rel = paths[g]
                if (resume is not None and rel in resume) or (g in was_touched and self.verify):
                    phase_resume[rel] = (resume or {}).get(rel) or []
            sess = None
            phase_out: list[FileOutcome] = []
            phase_moved = 0
            done_idx: list[int] = []
            error: BaseException | None = None
            try:
                sess = self._session(index, ctl, skip=self.skip_existing and first_phase)
                if self._dirs_pending and self._empty_dirs:
                    sess.ensure_dirs(*self._empty_dirs)
                    self._dirs_pending = False
                sub = files.take(pa.array(remaining, pa.int64()))
                sub_modes = [modes[g] for g in remaining] if modes else None
                res = sess.perform(
                    sub,
                    params,
                    src_root=src_root,
                    dst_root=dst_root,
                    chunk_id=chunk_id,
                    modes=sub_modes,
                    resume=phase_resume,
                )
                phase_out, done_idx, phase_moved = res.outcomes, list(remaining), res.bytes_moved
            except Exception as exc:  # noqa: BLE001 - the protocol failed as a whole (connect, mkdir, ...)
                error = exc
                retry, _ = classify(exc)
                text = getattr(exc, "message", None) or f"{exc.__class__.__name__}: {exc}"
                if retry:
                    ctl.event(False, "connect", text)
                    if not ctl.aborted():
                        # Below the threshold: same protocol again after a pause.
                        wait = min(self.retry.delay(ctl.consecutive), max(0.0, self.retry.time_left()))
                        time.sleep(wait)
                else:
                    ctl.fail_now(text)
            finally:
                stop.set()
                if sess is not None and sess is not self.engine:
                    try:
                        self._verify_parts.append((name, sess.verify_summary()))
                    except Exception:  # noqa: BLE001
                        pass
                    sess.close()
            first_phase = False
            abandoned = ctl.aborted() or ctl.stopping()
            for g, o in zip(done_idx, phase_out):
                moved[g] += o.bytes_moved
                tries[g] += 1
                if sizes[g] > 0:
                    full_sends[g] += o.bytes_moved // sizes[g]  # this phase sent the whole file that often
                was_touched.add(g)
                unfinished = (o.error or "").startswith(NOT_FINISHED)
                if o.ok or not (abandoned or unfinished):
                    outcomes[g] = replace(o, bytes_moved=moved[g])
                    if not o.ok:
                        self.stats.file_finished(False)
            self._count(name, phase_out, phase_moved)
            if on_engine and (abandoned or error is not None):
                self._retire_engine()
            remaining = [g for g in remaining if g not in outcomes]
            if ctl.successes:
                failed_in_row = 0
            carried = 0 if (ctl.aborted() or ctl.switch_to is not None) else ctl.consecutive
            if ctl.switch_to is not None and remaining:
                self._switch(ctl.switch_to, ctl.reason)
                continue
            if ctl.aborted() and remaining:
                self.tried[name] = ctl.reason
                failed_in_row += 1
                nxt = (index + 1) % len(self.protocols)
                if failed_in_row >= len(self.protocols):
                    # Every protocol failed in a row: wait, then start again from the preferred one.
                    nxt = 0
                    wait = min(self.retry.delay(failed_in_row // len(self.protocols)), max(0.0, self.retry.time_left()))
                    self.log(f"all protocols failed; next try in {wait:.1f}s")
                    time.sleep(wait)
                if nxt != index:
                    self._switch(nxt, ctl.reason)
                continue
            if remaining and (
                error is not None
                or any((o.error or "").startswith(NOT_FINISHED) for g, o in zip(done_idx, phase_out) if g in remaining)
            ):
                continue  # below the threshold: the same protocol again
            break
        for g in range(n):
            if g not in outcomes:
                outcomes[g] = FileOutcome(paths[g], sizes[g], moved[g], 0.0, False, "not transferred")
        self.sent_twice += [paths[g] for g in range(n) if full_sends[g] >= 2]
        result.outcomes = [outcomes[g] for g in range(n)]
        result.bytes_moved = sum(moved)
        result.retried = sum(1 for k in tries if k > 1)
        result.bytes_resent = sum(max(0, moved[g] - sizes[g]) for g in range(n))
        result.seconds = time.monotonic() - t0
        return result
