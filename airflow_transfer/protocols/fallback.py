"""Alternate-protocol fall-back and switch-back (paper 003, Stork).

A FallbackSession has the TransferSession surface (perform, ensure_dirs,
verify_summary, ...) over an ordered list of protocols for the remote end
(preferred first, then alt_protocols). perform() moves files on the current
protocol while a Controller counts failures: errors, refused connections, and
copies that reported success but left the wrong size (that one alone is
enough: a protocol that silently loses data is not trusted with the rest).
After `threshold` consecutive failures the phase is abandoned and the next
protocol continues with what is left: finished files are never sent again and
partial temporary files are continued where the protocol can append. While on
an alternate, a prober connects to each preferred protocol every
`probe_interval` seconds and, once one answers, the current phase stops taking
new files and the transfer switches back. When every protocol has failed in a
row the controller waits (exponential backoff) and starts over, until the
deadline; then the files left fail with a message naming each protocol tried
and its last error. Every switch is recorded (at, from, to, reason).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from urllib.parse import urlsplit

import pyarrow as pa

from ..engine.backend_copy import BackendSession, Control
from ..engine.params import TransferParams
from ..engine.result import ChunkResult, FileOutcome
from ..engine.retry import RetryPolicy, classify
from ..errors import TransferError, UsageError
from . import backends
from .endpoint import Endpoint

DEFAULT_THRESHOLD = 3
DEFAULT_PROBE_INTERVAL = 5.0
ENGINE_BATCH = 64  # files per engine call while a switch back may be requested


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Controller(Control):
    """Counts consecutive failures of one phase; aborts it at the threshold; carries switch requests."""

    def __init__(self, threshold: int, carried: int = 0) -> None:
        self.threshold = threshold
        self.lock = threading.Lock()
        self.consecutive = carried  # failures in a row from an earlier phase on the same protocol
        self.successes = 0
        self._abort = False
        self._stop = False
        self.reason = ""
        self.switch_to: int | None = None
        self.last_detail = ""

    def event(self, ok: bool, kind: str = "", detail: str = "") -> None:
        with self.lock:
            if ok:
                self.consecutive = 0
                self.successes += 1
                return
            self.last_detail = detail or kind
            weight = self.threshold if kind == "size" else 1
            self.consecutive += weight
            if self.consecutive >= self.threshold and not self._abort:
                self._abort = True
                if kind == "size":
                    self.reason = f"silent failure: {detail}"
                else:
                    self.reason = f"{self.consecutive} consecutive failures; last: {detail or kind}"

    def fail_now(self, detail: str) -> None:
        with self.lock:
            self._abort = True
            self.reason = self.reason or detail

    def aborted(self) -> bool:
        return self._abort

    def stopping(self) -> bool:
        return self._stop or self._abort

    def request_switch(self, index: int, reason: str) -> None:
        with self.lock:
            if not self._abort and not self._stop:
                self._stop = True
                self.switch_to = index
                self.reason = reason


class _PhaseStats:
    """The copy's Stats as a phase sees them: a file a phase gives up on is not counted as
    failed (another protocol will carry it); the controller counts final failures itself."""

    def __init__(self, stats) -> None:
        self._stats = stats

    def file_finished(self, ok: bool, skipped: bool = False) -> None:
        if ok:
            self._stats.file_finished(ok, skipped)

    def __getattr__(self, name):
        return getattr(self._stats, name)

    def __setattr__(self, name, value):
        if name == "_stats":
            object.__setattr__(self, name, value)
        else:
            setattr(self._stats, name, value)


class _PhasePolicy(RetryPolicy):
    """The copy's retry policy, except that an abandoned phase has no time left."""

    def __init__(self, base: RetryPolicy, ctl: Controller) -> None:
        super().__init__(max_attempts=base.max_attempts, backoff_base=base.backoff_base,
                         backoff_max=base.backoff_max, deadline_s=base.deadline_s, started=base.started)
        self.ctl = ctl

    def time_left(self) -> float:
        return 0.0 if self.ctl.aborted() else super().time_left()


class _JournalTap:
    """The engine's journal calls, also seen by the controller (file done = success)."""

    def __init__(self, journal, ctl: Controller) -> None:
        self.journal, self.ctl = journal, ctl

    def mark_range(self, *a, **kw):
        if self.journal is not None:
            self.journal.mark_range(*a, **kw)

    def mark_restart(self, path):
        if self.journal is not None:
            self.journal.mark_restart(path)

    def mark_done(self, *a, **kw):
        self.ctl.event(True)
        if self.journal is not None:
            self.journal.mark_done(*a, **kw)

    def mark_failed(self, path, error, *a, **kw):
        self.ctl.event(False, "error", error)
        if self.journal is not None:
            self.journal.mark_failed(path, error, *a, **kw)


def protocol_name(ep: Endpoint) -> str:
    return ep.scheme


def alternate_endpoints(remote: Endpoint, specs: list[str], make: Callable[[str], Endpoint]) -> list[Endpoint]:
    """Endpoints for alt_protocols entries: a scheme ("ftp") means the same host, user and path
    on that protocol's default port; a URL ("ftp://user@host:2121") overrides those parts, and
    its path, when it has one, replaces the remote path."""
    out = []
    host = remote.target.host if remote.target else remote.host
    user = remote.target.username if remote.target else remote.user
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        if "://" in spec:
            parts = urlsplit(spec)
            scheme = parts.scheme.lower()
            h = parts.hostname or host
            u = parts.username or user
            port = parts.port
            path = parts.path if parts.path not in ("", "/") else remote.path
        else:
            scheme, h, u, port, path = spec.lower(), host, user, None, remote.path
        if not h:
            raise UsageError(f"alternate protocol {spec!r} needs a host", spec, "give it as scheme://host[:port]")
        netloc = (f"{u}@" if u else "") + h + (f":{port}" if port else "")
        out.append(make(f"{scheme}://{netloc}{path}"))
    return out


def _probe(ep: Endpoint) -> str | None:
    """None when the protocol answers (connect + handshake/login), else why not."""
    try:
        b = backends.connect(ep)
    except Exception as exc:  # noqa: BLE001 - any failure means "not available"
        return f"{exc.__class__.__name__}: {exc}"
    try:
        b.close()
    except Exception:  # noqa: BLE001
        pass
    return None


class FallbackSession:
    def __init__(self, src: Endpoint, dst: Endpoint, protocols: list[Endpoint], *, side: str,
                 stats=None, skip_existing: bool = True, retry: RetryPolicy | None = None,
                 verify: str | None = None, threshold: int = DEFAULT_THRESHOLD,
                 probe_interval: float = DEFAULT_PROBE_INTERVAL,
                 log: Callable[[str], None] | None = None, engine_options: dict | None = None) -> None:
        from ..engine.accounting import Stats

        if threshold < 1:
            raise UsageError(f"switch threshold must be >= 1 (got {threshold})")
        self.src, self.dst = src, dst
        self.protocols = protocols
        self.side = side
        self.stats = stats or Stats()
        self.skip_existing = skip_existing
        self.retry = retry or RetryPolicy()
        self.verify = verify
        self.threshold = threshold
        self.probe_interval = probe_interval
        self.log = log or (lambda line: None)
        self.engine_options = engine_options or {}  # verify_mode etc. for the pipelined engine's phases
        self.current = 0
        self.switches: list[dict] = []
        self.on_switch: Callable[[dict], None] | None = None
        self.journal = None
        self.before_verify = None
        self.pool = None
        self.remote = protocols[0] if protocols[0].scheme == "sftp" else None  # the preferred end, for tuning
        self.tried: dict[str, str] = {}
        self.per_protocol: dict[str, dict] = {}
        self._verify_parts: list[tuple[str, dict]] = []
        self.sent_twice: list[str] = []  # files some phase(s) sent whole more than once
        self.direction = "fallback"

    # -- endpoints -----------------------------------------------------------
    def pair(self, index: int) -> tuple[Endpoint, Endpoint]:
        ep = self.protocols[index]
        return (ep, self.dst) if self.side == "src" else (self.src, ep)

    def _uses_engine(self, index: int) -> bool:
        s, d = self.pair(index)
        schemes = {s.scheme, d.scheme}
        if not schemes <= {"file", "sftp"} or s.scheme == d.scheme == "sftp":
            return False
        return not any(backends.wrapped(x) for x in schemes)

    def _session(self, index: int, ctl: Controller, policy: RetryPolicy, skip: bool):
        s, d = self.pair(index)
        if self._uses_engine(index):
            from ..engine.transfer import TransferSession

            sess = TransferSession(s, d, stats=_PhaseStats(self.stats), skip_existing=skip, retry=policy,
                                   verify=self.verify, **self.engine_options)
            sess.journal = _JournalTap(self.journal, ctl)
            sess.before_verify = self.before_verify
            acquire = sess.pool.acquire

            def counted():
                try:
                    return acquire()
                except BaseException as exc:
                    ctl.event(False, "connect", str(exc))
                    raise

            sess.pool.acquire = counted
            return sess
        sess = BackendSession(s, d, stats=_PhaseStats(self.stats), skip_existing=skip, retry=policy,
                              journal=self.journal, verify=self.verify, control=ctl)
        sess.before_verify = self.before_verify
        return sess

    # -- the TransferSession surface -----------------------------------------------
    def close(self) -> None:
        pass

    def __enter__(self) -> "FallbackSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def list_source(self):
        """List the source; a remote source on the first protocol that can."""
        from ..job import list_source

        if self.side == "dst":
            if self.src.scheme == "file":
                with BackendSession(self.src, Endpoint("file", "/")) as sess:
                    return list_source(sess, self.src)
            with BackendSession(self.src, Endpoint("file", "/")) as sess:
                return sess.list_source()
        errors = []
        order = [self.current] + [i for i in range(len(self.protocols)) if i != self.current]
        for i in order:
            s, d = self.pair(i)
            try:
                if self._uses_engine(i):
                    from ..engine.transfer import TransferSession

                    with TransferSession(s, d, retry=self.retry) as sess:
                        return list_source(sess, s)
                with BackendSession(s, d, retry=self.retry) as sess:
                    return sess.list_source()
            except TransferError as exc:
                if not classify(exc)[0]:
                    raise
                errors.append(f"{protocol_name(s)}: {exc}")
            except (OSError, EOFError) as exc:
                errors.append(f"{protocol_name(s)}: {exc}")
        raise TransferError(f"cannot list the source on any protocol ({'; '.join(errors)})", self.src.display,
                            "check that the host is up")

    def ensure_dirs(self, dst_root: str, rel_dirs: list[str]) -> None:
        """Directories are made by each phase's own session (it knows its protocol)."""
        self._empty_dirs = (dst_root, list(rel_dirs))

    def verify_summary(self) -> dict:
        if self.verify is None:
            return {"algorithm": "none", "mode": "none", "where": "none", "verified": 0, "repaired": 0,
                    "mismatched": 0}
        out = {"algorithm": self.verify, "mode": "file", "verified": 0, "repaired": 0, "mismatched": 0}
        wheres = []
        for name, part in self._verify_parts:
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
        return {"protocols": self.per_protocol, "protocol_order": [protocol_name(p) for p in self.protocols],
                "files_sent_twice_in_full": len(self.sent_twice)}

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
                    if _probe(self.protocols[j]) is None:
                        name = protocol_name(self.protocols[j])
                        ctl.request_switch(j, f"preferred protocol {name} answers again")
                        return

        th = threading.Thread(target=run, name="protocol-prober", daemon=True)
        th.start()
        return th

    # -- the primitive ----------------------------------------------------------------
    def perform(self, files: pa.Table, params: TransferParams, *, src_root: str, dst_root: str,
                chunk_id: str = "chunk-0", modes: list[int] | None = None,
                resume: dict[str, list] | None = None) -> ChunkResult:
        t0 = time.monotonic()
        n = files.num_rows
        sizes = files["size"].to_pylist()
        paths = files["path"].to_pylist()
        result = ChunkResult(chunk_id, params, files=n, bytes=sum(sizes), started=t0)
        outcomes: dict[int, FileOutcome] = {}
        moved = [0] * n
        full_sends = [0] * n
        attempts = [0] * n
        remaining = list(range(n))
        failed_in_row = 0
        touched: set[int] = set()
        first_phase = True
        carried = 0
        while remaining:
            if self.retry.time_left() <= 0:
                tried = "; ".join(f"{k}: {v}" for k, v in self.tried.items()) or "nothing could be tried"
                msg = f"no protocol could finish this file before the deadline (tried {tried})"
                for g in remaining:
                    outcomes[g] = FileOutcome(paths[g], sizes[g], moved[g], 0.0, False, msg)
                    if self.journal is not None:
                        self.journal.mark_failed(paths[g], msg)
                    self.stats.file_finished(False)
                break
            index = self.current
            name = protocol_name(self.protocols[index])
            ctl = Controller(self.threshold, carried)
            policy = _PhasePolicy(self.retry, ctl)
            stop = threading.Event()
            prober = self._prober(index, ctl, stop) if index > 0 else None
            phase_resume = {}
            for g in remaining:
                rel = paths[g]
                if (resume is not None and rel in resume) or (g in touched and self.verify):
                    phase_resume[rel] = (resume or {}).get(rel) or []
            sess = None
            phase_out: list[FileOutcome] = []
            done_idx: list[int] = []
            error: BaseException | None = None
            try:
                sess = self._session(index, ctl, policy, skip=self.skip_existing and first_phase)
                if first_phase and getattr(self, "_empty_dirs", None):
                    sess.ensure_dirs(*self._empty_dirs)
                batch = ENGINE_BATCH if (index > 0 and self._uses_engine(index)) else len(remaining)
                todo = list(remaining)
                while todo and not ctl.stopping():
                    part, todo = todo[:batch], todo[batch:]
                    sub = files.take(pa.array(part, pa.int64()))
                    sub_modes = [modes[g] for g in part] if modes else None
                    res = sess.perform(sub, params, src_root=src_root, dst_root=dst_root,
                                       chunk_id=f"{chunk_id}", modes=sub_modes, resume=phase_resume)
                    phase_out += res.outcomes
                    done_idx += part
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
                if sess is not None:
                    try:
                        self._verify_parts.append((name, sess.verify_summary()))
                    except Exception:  # noqa: BLE001
                        pass
                    sess.close()
            first_phase = False
            stats = self.per_protocol.setdefault(name, {"files": 0, "bytes_moved": 0, "phases": 0})
            stats["phases"] += 1
            abandoned = ctl.aborted() or ctl.stopping()
            for g, o in zip(done_idx, phase_out):
                moved[g] += o.bytes_moved
                if sizes[g] > 0:
                    full_sends[g] += o.bytes_moved // sizes[g]  # this phase sent the whole file that often
                touched.add(g)
                if o.ok:
                    outcomes[g] = replace(o, bytes_moved=moved[g])
                    if not o.skipped:
                        stats["files"] += 1
                elif not abandoned:
                    outcomes[g] = replace(o, bytes_moved=moved[g])
                    self.stats.file_finished(False)
            stats["bytes_moved"] += sum(o.bytes_moved for o in phase_out)
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
                    wait = min(self.retry.delay(failed_in_row // len(self.protocols)),
                               max(0.0, self.retry.time_left()))
                    self.log(f"all protocols failed; next try in {wait:.1f}s")
                    time.sleep(wait)
                if nxt != index:
                    self._switch(nxt, ctl.reason)
                continue
            if error is not None and remaining:
                continue  # below the threshold: the same protocol again
            break
        for g in range(n):
            if g not in outcomes:
                outcomes[g] = FileOutcome(paths[g], sizes[g], moved[g], 0.0, False, "not transferred")
        self.sent_twice += [paths[g] for g in range(n) if full_sends[g] >= 2]
        result.outcomes = [outcomes[g] for g in range(n)]
        result.bytes_moved = sum(moved)
        result.retried = sum(1 for a in attempts if a > 1)
        result.bytes_resent = sum(max(0, moved[g] - sizes[g]) for g in range(n))
        result.seconds = time.monotonic() - t0
        return result
