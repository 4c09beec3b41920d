"""The phases of a fall-back copy: each moves the files left on the current protocol.

A phase ends when its files are done, when its controller abandons the
protocol (the next one carries what is left), or when a prober finds a
preferred protocol answering again (the copy switches back). Finished files
are never sent again; a file's bytes and full re-sends add up across phases.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Unpack

import pyarrow as pa

from ..protocols.fallback import now_iso, probe, protocol_name
from .control import NOT_FINISHED, Controller
from .params import TransferParams
from .result import ChunkResult, FileOutcome
from .retry import classify
from .session import ChunkPlace

if TYPE_CHECKING:
    from .fallback import FallbackSession


@dataclass
class PhaseStart:
    """Where the phase loop starts: the copy's first phase (skips files already there), files
    an earlier phase touched (their temporary files may be continued), and the failure counts
    carried over from the engine's phase."""

    first_phase: bool
    touched: bool
    failed_in_row: int = 0
    carried: int = 0


class PhaseStats:
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

    def add_skipped_bytes(self, n: int) -> None:
        s = self._stats
        n = min(n, max(0, s.bytes_total - s.bytes_done))
        if n:
            s.add_skipped_bytes(n)

    def __getattr__(self, name):
        return getattr(self._stats, name)

    def __setattr__(self, name, value):
        setattr(self._stats, name, value)


# -- switching ---------------------------------------------------------------
def switch(fb: FallbackSession, to: int, reason: str) -> None:
    frm = protocol_name(fb.protocols[fb.current])
    rec = {"at": now_iso(), "from": frm, "to": protocol_name(fb.protocols[to]), "reason": reason}
    fb.switches.append(rec)
    fb.log(f"protocol switch: {rec['from']} -> {rec['to']} ({reason})")
    if fb.on_switch is not None:
        try:
            fb.on_switch(rec)
        except Exception:  # noqa: BLE001 - the record is in the summary either way
            pass
    fb.current = to


def start_prober(fb: FallbackSession, index: int, ctl: Controller, stop: threading.Event) -> threading.Thread:
    def run():
        while not stop.wait(fb.probe_interval):
            for j in range(index):
                if probe(fb.protocols[j]) is None:
                    name = protocol_name(fb.protocols[j])
                    ctl.request_switch(j, f"preferred protocol {name} answers again")
                    return

    th = threading.Thread(target=run, name="protocol-prober", daemon=True)
    th.start()
    return th


def count(fb: FallbackSession, name: str, outcomes: list[FileOutcome], moved: int) -> None:
    stats = fb.per_protocol.setdefault(name, {"files": 0, "bytes_moved": 0, "phases": 0})
    stats["phases"] += 1
    stats["files"] += sum(1 for o in outcomes if o.ok and not o.skipped)
    stats["bytes_moved"] += moved


# -- after job.py ran the tuning algorithm on the engine ---------------------------
def carry_left(
    fb: FallbackSession, chunks: list[ChunkResult], files: pa.Table, params: TransferParams, **place: Unpack[ChunkPlace]
) -> list[ChunkResult]:
    """Carry what the engine's run left: every file it did not finish when the preferred
    protocol was abandoned, else the files it never got to (a connection that failed below
    the threshold). Their outcomes move from the engine's chunks to one more chunk."""
    if not fb._driven:
        return chunks
    fb._driven = False
    name = protocol_name(fb.protocols[0])
    outcomes = [o for c in chunks for o in c.outcomes]
    count(fb, name, outcomes, sum(c.bytes_moved for c in chunks))
    ctl = fb.ctl0
    aborted = ctl.aborted()
    carry = {o.path for o in outcomes if not o.ok and (aborted or (o.error or "").startswith(NOT_FINISHED))}
    fb._retire_engine()
    for o in outcomes:
        if not o.ok and o.path not in carry:
            fb.stats.file_finished(False)  # final here: the phase stats did not count it
    if not carry:
        return chunks
    failed_in_row = 0
    if aborted:
        fb.tried[name] = ctl.reason
        failed_in_row = 1
        nxt = 1 % len(fb.protocols)
        if nxt != 0:
            switch(fb, nxt, ctl.reason)
    paths = files["path"].to_pylist()
    idx = [g for g, p in enumerate(paths) if p in carry]
    sub = files.take(pa.array(idx, pa.int64()))
    modes = place.get("modes")
    sub_modes = [modes[g] for g in idx] if modes else None
    used = TransferParams(pp=1, p=1, cc=max([c.params.cc for c in chunks] or [params.cc]))
    start = PhaseStart(
        first_phase=False, touched=True, failed_in_row=failed_in_row, carried=0 if aborted else ctl.consecutive
    )
    sub_place: ChunkPlace = {
        "src_root": place["src_root"],
        "dst_root": place["dst_root"],
        "chunk_id": "fallback",
        "modes": sub_modes,
        "resume": place.get("resume"),
    }
    res = run_phases(fb, sub, used, start, **sub_place)
    for c in chunks:
        c.outcomes = [o for o in c.outcomes if o.path not in carry]
    return [*chunks, res]


def run_phases(
    fb: FallbackSession, files: pa.Table, params: TransferParams, start: PhaseStart, **place: Unpack[ChunkPlace]
) -> ChunkResult:
    """Move `files` phase after phase, each on the current protocol, until every file has an
    outcome or the deadline passed."""
    src_root, dst_root, resume = place["src_root"], place["dst_root"], place.get("resume")
    chunk_id, modes = place.get("chunk_id", "chunk-0"), place.get("modes")
    first_phase, failed_in_row, carried = start.first_phase, start.failed_in_row, start.carried
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
    was_touched: set[int] = set(remaining) if start.touched else set()
    while remaining:
        if fb.retry.time_left() <= 0:
            tried = "; ".join(f"{k}: {v}" for k, v in fb.tried.items()) or "nothing could be tried"
            msg = f"no protocol could finish this file before the deadline (tried {tried})"
            for g in remaining:
                outcomes[g] = FileOutcome(paths[g], sizes[g], moved[g], 0.0, False, msg)
                if fb.journal is not None:
                    fb.journal.mark_failed(paths[g], msg)
                fb.stats.file_finished(False)
            break
        index = fb.current
        name = protocol_name(fb.protocols[index])
        on_engine = index == 0 and fb._engine_open
        ctl = fb.ctl0 if on_engine else Controller(fb.threshold, carried)
        stop = threading.Event()
        if index > 0:
            start_prober(fb, index, ctl, stop)
        phase_resume = {}
        for g in remaining:
            rel = paths[g]
            if (resume is not None and rel in resume) or (g in was_touched and fb.verify):
                phase_resume[rel] = (resume or {}).get(rel) or []
        sess = None
        phase_out: list[FileOutcome] = []
        phase_moved = 0
        done_idx: list[int] = []
        error: BaseException | None = None
        try:
            sess = fb._session(index, ctl, skip=fb.skip_existing and first_phase)
            # A file an earlier phase sent whole whose outcome never came back (the connection
            # fell between a bundle group's commit and its reply) is looked for first: if it is in
            # place, it landed verified and is not sent a second time. Only those files are
            # listed, so a phase on a slow alternate does not list every remaining directory.
            sess.adopt = frozenset(
                paths[g] for g in remaining if fb.skip_existing and not first_phase and full_sends[g] >= 1
            )
            if fb._dirs_pending and fb._empty_dirs:
                sess.ensure_dirs(*fb._empty_dirs)
                fb._dirs_pending = False
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
                    wait = min(fb.retry.delay(ctl.consecutive), max(0.0, fb.retry.time_left()))
                    time.sleep(wait)
            else:
                ctl.fail_now(text)
        finally:
            stop.set()
            if sess is not None and sess is not fb.engine:
                try:
                    fb._verify_parts.append((name, sess.verify_summary()))
                except Exception:  # noqa: BLE001 - a phase's account is a report; closing the session matters more
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
                    fb.stats.file_finished(False)
        count(fb, name, phase_out, phase_moved)
        if on_engine and (abandoned or error is not None):
            fb._retire_engine()
        remaining = [g for g in remaining if g not in outcomes]
        if ctl.successes:
            failed_in_row = 0
        carried = 0 if (ctl.aborted() or ctl.switch_to is not None) else ctl.consecutive
        if ctl.switch_to is not None and remaining:
            switch(fb, ctl.switch_to, ctl.reason)
            continue
        if ctl.aborted() and remaining:
            fb.tried[name] = ctl.reason
            failed_in_row += 1
            nxt = (index + 1) % len(fb.protocols)
            if failed_in_row >= len(fb.protocols):
                # Every protocol failed in a row: wait, then start again from the preferred one.
                nxt = 0
                wait = min(fb.retry.delay(failed_in_row // len(fb.protocols)), max(0.0, fb.retry.time_left()))
                fb.log(f"all protocols failed; next try in {wait:.1f}s")
                time.sleep(wait)
            if nxt != index:
                switch(fb, nxt, ctl.reason)
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
    fb.sent_twice += [paths[g] for g in range(n) if full_sends[g] >= 2]
    result.outcomes = [outcomes[g] for g in range(n)]
    result.bytes_moved = sum(moved)
    result.retried = sum(1 for k in tries if k > 1)
    result.bytes_resent = sum(max(0, moved[g] - sizes[g]) for g in range(n))
    result.seconds = time.monotonic() - t0
    return result
