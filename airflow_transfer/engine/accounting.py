"""Live totals, rate and ETA for a running transfer (rclone-style accounting).

Workers call `add_bytes` / `file_finished` from many threads; a reporter
thread renders `snapshot()` every few seconds (a log line in Airflow, a bar in
the CLI). Snapshots are plain dicts, JSON-ready.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

# The ETA stays hidden ("--") until this share of the bytes has moved. The engine sends the
# smallest files first: their per-file round trips hold the byte rate far below what the large
# files reach later, so an estimate from the first seconds said minutes for a copy of seconds.
ETA_MIN_SHARE = 0.10
RATE_WINDOW_S = 10.0  # the rate (and the ETA) follow the last seconds, not the average since start


class Stats:
    def __init__(self, files_total: int = 0, bytes_total: int = 0) -> None:
        self._lock = threading.Lock()
        self.files_total = files_total
        self.bytes_total = bytes_total
        self.files_done = 0
        self.files_failed = 0
        self.files_skipped = 0
        self.bytes_done = 0
        # Bytes of files found complete at the destination: progress, but nothing moved them,
        # so they count towards the percentage and not towards the rate.
        self.bytes_skipped = 0
        self.started = time.monotonic()
        # (time, bytes moved, files finished) samples for rates over the last few seconds, so
        # the ETA follows the link as it is now, not the average since start.
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=64)
        self.params: dict = {}

    def add_total(self, files: int, nbytes: int) -> None:
        with self._lock:
            self.files_total += files
            self.bytes_total += nbytes

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_done += n

    def add_skipped_bytes(self, n: int) -> None:
        """Bytes of a file already complete at the destination: progress without transfer."""
        with self._lock:
            self.bytes_done += n
            self.bytes_skipped += n

    def files_finished(self, files: int) -> None:
        """`files` files finished well (file_finished(True) for each, under one lock)."""
        with self._lock:
            self.files_done += files

    def file_finished(self, ok: bool, skipped: bool = False) -> None:
        with self._lock:
            if skipped:
                self.files_skipped += 1
            if ok:
                self.files_done += 1
            else:
                self.files_failed += 1

    def snapshot(self) -> dict:
        now = time.monotonic()
        with self._lock:
            done, total = self.bytes_done, self.bytes_total
            moved = max(done - self.bytes_skipped, 0)
            files = self.files_done + self.files_failed - self.files_skipped
            self._samples.append((now, moved, files))
            elapsed = now - self.started
            old_t, old_b, old_f = self._samples[0]
            for t, b, f in self._samples:
                if now - t <= RATE_WINDOW_S:
                    old_t, old_b, old_f = t, b, f
                    break
            window = now - old_t
            if window > 0.5:
                rate, file_rate = (moved - old_b) / window, (files - old_f) / window
            else:
                rate = moved / elapsed if elapsed > 0 else 0.0
                file_rate = files / elapsed if elapsed > 0 else 0.0
            avg = moved / elapsed if elapsed > 0 else 0.0
            files_left = max(self.files_total - self.files_done - self.files_failed, 0)
            eta = _eta(done, total, rate, files_left, file_rate, self.params)
            return {
                "files_done": self.files_done,
                "files_failed": self.files_failed,
                "files_skipped": self.files_skipped,
                "files_total": self.files_total,
                "bytes_done": done,
                "bytes_total": total,
                "bytes_skipped": self.bytes_skipped,
                "elapsed_s": round(elapsed, 1),
                "rate_mbit": round(rate * 8 / 1e6, 2),
                "avg_mbit": round(avg * 8 / 1e6, 2),
                "eta_s": round(eta, 1) if eta is not None else None,
                "params": dict(self.params),
            }


def _eta(done: int, total: int, rate: float, files_left: int, file_rate: float, params: dict) -> float | None:
    """Seconds left, from the byte rate and the file rate both; None while unknown.

    Each rate alone misjudges what is left when it differs from what has moved: by bytes, small
    files left look quicker than they are (their round trips, not their bytes, take the time;
    Multi-Chunk moves them beside a large file that sets the byte rate); by files, a few large
    files left look slower than they are when they are under way already. So the files estimate
    counts only the files still waiting for a place in the pipelines (pp x cc per running chunk),
    the larger of the two estimates is kept, and none is given before ETA_MIN_SHARE of the
    bytes has moved (module comment)."""
    bytes_left = max(total - done, 0)
    if not bytes_left and not files_left:
        return 0.0
    if total and done < ETA_MIN_SHARE * total:
        return None
    estimates = []
    if bytes_left:
        if rate <= 0:
            return None  # stalled, or nothing measured yet
        estimates.append(bytes_left / rate)
    waiting = max(files_left - _places(params), 0)
    if waiting and file_rate > 0:  # no file finished lately: they are large, the bytes tell
        estimates.append(waiting / file_rate)
    return max(estimates) if estimates else None


def _places(params: dict) -> int:
    """Files that can be under way at once: pp x cc, summed over the running chunks (the progress
    knobs read "8/2" with one value per chunk); 0 when the knobs are not known."""
    try:
        pp = [int(v) for v in str(params.get("pp", "")).split("/")]
        cc = [int(v) for v in str(params.get("cc", "")).split("/")]
    except ValueError:
        return 0
    return sum(a * b for a, b in zip(pp, cc))


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def plural(n: int, word: str) -> str:
    """'1 file', '2 files', '0 files' (English nouns that take an s)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_rate(mbit: float) -> str:
    """A rate in Mbit/s as people read it: one decimal below 100, then whole numbers with
    thousands separators (52,670 Mbit/s), never an exponent; the unit stays Mbit/s so
    lines compare at a glance."""
    if not math.isfinite(mbit):
        return "-- Mbit/s"
    if abs(mbit) < 100:
        return f"{mbit:.1f} Mbit/s"
    return f"{mbit:,.0f} Mbit/s"


def format_line(s: dict) -> str:
    """One progress line: files, bytes, rate, ETA, current knobs. Figures never run past the totals
    (a file re-sent after a failed check counts its bytes once)."""
    eta = "--" if s["eta_s"] is None else _clock(s["eta_s"])
    total = s["bytes_total"]
    done = min(s["bytes_done"], total) if total else s["bytes_done"]
    pct = min(100.0, 100.0 * done / total) if total else 100.0
    files_done = min(s["files_done"], s["files_total"]) if s["files_total"] else s["files_done"]
    p = s.get("params") or {}
    knobs = f" pp={p.get('pp')} p={p.get('p')} cc={p.get('cc')}" if p else ""
    failed = f", {s['files_failed']} failed" if s["files_failed"] else ""
    files = "file" if s["files_total"] == 1 else "files"
    # floor, not round: 99.6 % of the bytes is not "100%" until the last byte is there
    shown = 100 if done >= total else min(int(pct), 99)
    return (
        f"{files_done}/{s['files_total']} {files}{failed}, "
        f"{human_bytes(done)}/{human_bytes(total)} ({shown}%), "
        f"{format_rate(s['rate_mbit'])}, ETA {eta}{knobs}"
    )


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Reporter:
    """Calls `emit(snapshot)` every `interval` seconds until stopped."""

    def __init__(self, stats: Stats, emit: Callable[[dict], None], interval: float = 5.0) -> None:
        self.stats, self.emit, self.interval = stats, emit, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="transfer-progress", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.emit(self.stats.snapshot())

    def __enter__(self) -> Reporter:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.emit(self.stats.snapshot())
