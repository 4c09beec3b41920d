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
from collections.abc import Callable
from typing import Any, Unpack, cast

import pyarrow as pa

from ..errors import TransferError, UsageError
from ..manifest import list_local, list_remote
from ..protocols.endpoint import Endpoint
from ..protocols.fallback import DEFAULT_PROBE_INTERVAL, DEFAULT_THRESHOLD, protocol_name
from ..protocols.pool import SFTPPool
from ..protocols.sessions import uses_engine
from . import phases
from .accounting import Stats
from .backend_copy import BackendSession
from .choose import session_for
from .control import Controller
from .params import TransferParams
from .phases import PhaseStart, PhaseStats
from .result import ChunkResult
from .retry import classify
from .session import ChunkPlace, Session, SessionOptions
from .transfer import TransferSession


def _passed_to_engine(name: str) -> Any:
    """A setting job.py makes on the session, kept here and passed on to the engine phase."""

    def get(self: FallbackSession) -> Any:
        return self.__dict__.get(f"_{name}")

    def put(self: FallbackSession, value: Any) -> None:
        self.__dict__[f"_{name}"] = value
        if self.engine is not None:
            setattr(self.engine, name, value)

    return property(get, put)


class FallbackSession(Session):
    def __init__(
        self,
        src: Endpoint,
        dst: Endpoint,
        protocols: list[Endpoint],
        *,
        side: str,
        threshold: int = DEFAULT_THRESHOLD,
        probe_interval: float = DEFAULT_PROBE_INTERVAL,
        log: Callable[[str], None] | None = None,
        engine_options: dict | None = None,
        pool: SFTPPool | None = None,
        **opts: Unpack[SessionOptions],
    ) -> None:
        if threshold < 1:
            raise UsageError(f"switch threshold must be >= 1 (got {threshold})")
        self.engine: TransferSession | None = None  # before the pass-through settings below are set
        super().__init__(src, dst, **opts)
        self.protocols = protocols
        self.side = side
        self.phase_stats = PhaseStats(self.stats)
        self.threshold = threshold
        self.probe_interval = probe_interval
        self.log = log or (lambda line: None)
        self.engine_options = engine_options or {}  # verify_mode etc. for the pipelined engine's phases
        self.current = 0
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
        self._driven = False  # job drives self.engine through the tuning executor (complete() follows)
        self._engine_open = False  # the engine's first phase has not ended (connections, verifier live)
        self._engine_summary: tuple[dict | None, list[str]] = (None, [])
        s, d = self.pair(0)
        if uses_engine(s, d):
            self.engine = TransferSession(
                s, d, pool=pool, **self.engine_options, **self._phase_options(self.ctl0, self.skip_existing)
            )
            self._engine_open = True
        elif pool is not None:
            pool.close()
        self.pool = self.engine.pool if self.engine is not None else None
        self.verify_mode = self.engine.verify_mode if self.engine is not None else "file"

    def _phase_options(self, ctl: Controller, skip: bool) -> SessionOptions:
        """A phase's session: the copy's settings, its own controller, the phase-aware stats."""
        return {
            "stats": cast(Stats, self.phase_stats),  # counts like the copy's Stats (engine/phases.py)
            "skip_existing": skip,
            "retry": self.retry,
            "journal": self.journal,
            "verify": self.verify,
            "control": ctl,
        }

    # -- what job.py sets on a session, passed on to the engine phase --------------------
    journal = _passed_to_engine("journal")
    before_verify = _passed_to_engine("before_verify")
    bandwidth_bps = _passed_to_engine("bandwidth_bps")
    resume_blocks = _passed_to_engine("resume_blocks")

    def warm(self, connections: int) -> None:
        if self.engine is not None:
            self._eng().warm(connections)

    def _eng(self) -> TransferSession:
        assert self.engine is not None  # asked only while the engine phase is open
        return self.engine

    def drive_engine(self) -> TransferSession | None:
        """The preferred protocol's engine session, for job.py to run the tuning algorithm on as a
        plain copy would; complete() then carries whatever it left. None: no engine phase."""
        if self.engine is None:
            return None
        self._driven = True
        return self.engine

    def server_summary(self) -> tuple[dict | None, list[str]]:
        return self._eng().server_summary() if self._engine_open else self._engine_summary

    # -- endpoints -----------------------------------------------------------
    def pair(self, index: int) -> tuple[Endpoint, Endpoint]:
        ep = self.protocols[index]
        return (ep, self.dst) if self.side == "src" else (self.src, ep)

    def _session(self, index: int, ctl: Controller, skip: bool) -> Session:
        s, d = self.pair(index)
        if index == 0 and self._engine_open and ctl is self.ctl0:
            return self._eng()
        sess = session_for(s, d, engine_options=self.engine_options, **self._phase_options(ctl, skip))
        sess.before_verify = self.before_verify
        return sess

    def _retire_engine(self) -> None:
        """The first engine phase is over: keep its verification counts, close its connections."""
        if not self._engine_open:
            return
        self._engine_open = False
        if self._eng().verify is not None and (self._eng().verifier is not None or self._eng()._retired):
            self._verify_parts.append((protocol_name(self.protocols[0]), self._eng().verify_summary()))
        self._engine_summary = self._eng().server_summary()
        self._eng().close()

    # -- the TransferSession surface -----------------------------------------------
    def close(self) -> None:
        if self._engine_open:
            self._eng().close()

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
                if i == 0 and self._engine_open and self._eng().pool is not None:
                    return list_remote(self._eng().pool, s.path, s.display)
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
            self._eng().ensure_dirs(dst_root, rel_dirs)
            self._dirs_pending = False
        except Exception as exc:  # noqa: BLE001 - counted; the phases try again
            self.ctl0.absorb(exc)

    def verify_summary(self) -> dict:
        if self.verify is None:
            return {"algorithm": "none", "mode": "none", "where": "none", "verified": 0, "repaired": 0, "mismatched": 0}
        parts = list(self._verify_parts)
        if self._engine_open:
            parts.append((protocol_name(self.protocols[0]), self._eng().verify_summary()))
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

    # -- the phases (engine/phases.py) ----------------------------------------------------
    def perform(self, files: pa.Table, params: TransferParams, **place: Unpack[ChunkPlace]) -> ChunkResult:
        return phases.run_phases(self, files, params, PhaseStart(first_phase=True, touched=False), **place)

    def complete(
        self, chunks: list[ChunkResult], files: pa.Table, params: TransferParams, **place: Unpack[ChunkPlace]
    ) -> list[ChunkResult]:
        """Carry what the engine's run left (job.py ran the tuning algorithm on it first)."""
        return phases.carry_left(self, chunks, files, params, **place)
