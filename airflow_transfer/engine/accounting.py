"""Live totals, rate and ETA for a running transfer (rclone-style accounting).

Workers call `add_bytes` / `file_finished` from many threads; a reporter
thread renders `snapshot()` every few seconds (a log line in Airflow, a bar in
the CLI). Snapshots are plain dicts, JSON-ready.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class Stats:
    def __init__(self, files_total: int = 0, bytes_total: int = 0) -> None:
        self._lock = threading.Lock()
        self.files_total = files_total
        self.bytes_total = bytes_total
        self.files_done = 0
        self.files_failed = 0
        self.files_skipped = 0
        self.bytes_done = 0
        self.started = time.monotonic()
        # (time, bytes) samples for a rate over the last few seconds, so the
        # ETA follows the link as it is now, not the average since start.
        self._samples: deque[tuple[float, int]] = deque(maxlen=64)
        self.params: dict = {}

    def add_total(self, files: int, nbytes: int) -> None:
        with self._lock:
            self.files_total += files
            self.bytes_total += nbytes

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_done += n

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
            self._samples.append((now, done))
            elapsed = now - self.started
            old_t, old_b = self._samples[0]
            for t, b in self._samples:
                if now - t <= 10.0:
                    old_t, old_b = t, b
                    break
            window = now - old_t
            rate = (done - old_b) / window if window > 0.5 else (done / elapsed if elapsed > 0 else 0.0)
            avg = done / elapsed if elapsed > 0 else 0.0
            remaining = max(total - done, 0)
            eta = remaining / rate if rate > 0 else None
            return {
                "files_done": self.files_done,
                "files_failed": self.files_failed,
                "files_skipped": self.files_skipped,
                "files_total": self.files_total,
                "bytes_done": done,
                "bytes_total": total,
                "elapsed_s": round(elapsed, 1),
                "rate_mbit": round(rate * 8 / 1e6, 2),
                "avg_mbit": round(avg * 8 / 1e6, 2),
                "eta_s": round(eta, 1) if eta is not None else None,
                "params": dict(self.params),
            }


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def format_line(s: dict) -> str:
    """One progress line: files, bytes, rate, ETA, current knobs."""
    eta = "--" if s["eta_s"] is None else _clock(s["eta_s"])
    pct = 100.0 * s["bytes_done"] / s["bytes_total"] if s["bytes_total"] else 100.0
    p = s.get("params") or {}
    knobs = f" pp={p.get('pp')} p={p.get('p')} cc={p.get('cc')}" if p else ""
    failed = f", {s['files_failed']} failed" if s["files_failed"] else ""
    return (
        f"{s['files_done']}/{s['files_total']} files{failed}, "
        f"{human_bytes(s['bytes_done'])}/{human_bytes(s['bytes_total'])} ({pct:.0f}%), "
        f"{s['rate_mbit']:.1f} Mbit/s, ETA {eta}{knobs}"
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
