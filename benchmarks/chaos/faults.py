"""The fault kinds, and what counts as each one being *reported*.

A fault is reported when the copy's own output says it happened: the summary
JSON (stdout, `--json`), the error lines (stderr), or the progress lines
(stderr, `--progress-interval`). Per kind:

- sshd_restart: the server is killed (listener and sessions) and restarted.
  Reported: the attempt's summary counts `files_retried` >= 1 or
  `connections_lost` >= 1 (a copy may get over the fault on an idle or a
  verifier's connection without retrying a file), or its error names the
  lost connection. When every file already had its final name once
  the server was down, the copy had no remote step left to lose: the run
  counts as not injected and the fault is drawn again.
- blackhole: every packet dropped both ways for 2-5 s (emulator control).
  TCP hides it, so it is not an error: reported when the progress lines show
  the stall (no byte acknowledged for >= half the outage, within it) and the
  copy still completes.
- sigkill: the copy process is SIGKILLed and re-run with the same transfer key
  (an Airflow retry). Reported: the re-run's summary counts the killed
  attempt's work as `files_skipped` + `files_resumed` >= 1.
- disk_full: the destination is a tmpfs sized below the dataset; it is
  enlarged before the re-run. Reported: the error says "no space left".
- byte_flip: one byte of one destination temporary file inverted after it was
  written, before it is checksummed (engine hook `before_verify`). Reported:
  the summary's `verify.mismatched` >= 1 (the file was then repaired), or the
  file failed with "checksum mismatch".
- permission: a destination subdirectory with files still to come made
  read-only (0555, the login user cannot write), restored before the re-run.
  Injected only if one of its files is still without its final name once the
  directory is read-only (the last ones may be named between the scan and the
  chmod). Reported: the error says "permission denied".
- rate_cut: the link's rate cut to 2-6 % for 3-5 s, then restored. Not an
  error either: reported when the progress lines show the slowdown: during the
  cut, some stretch of >= 1 s in which the copy's acknowledged bytes grew no
  faster than 1.2x the cut rate (before that, data that crossed earlier may
  still be acknowledged), and the copy completes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KINDS = ("sshd_restart", "blackhole", "sigkill", "disk_full", "byte_flip", "permission", "rate_cut")

_PROGRESS = re.compile(r"^chaos-progress (\d+\.\d+) (\d+)$")
_CONNECTION_WORDS = (
    "connection",
    "unreachable",
    "refused",
    "timed out",
    "closed",
    "eof",
    "reset",
    "lost",
    "ssh",
    "socket",
)


@dataclass
class Attempt:
    """One run of the copy command."""

    code: int | None  # exit status; None when it was killed by the runner
    seconds: float
    summary: dict | None
    stderr: str
    progress: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, bytes done)

    @property
    def ok(self) -> bool:
        return self.code == 0

    def errors(self) -> str:
        failed = (self.summary or {}).get("failed") or []
        return (self.stderr + "\n" + "\n".join(f["error"] or "" for f in failed)).lower()

    def to_dict(self) -> dict:
        s = self.summary or {}
        v = s.get("verify") or {}
        return {
            "code": self.code,
            "seconds": round(self.seconds, 2),
            "copy_seconds": s.get("seconds"),
            "failed": len(s.get("failed") or []),
            "files_retried": s.get("files_retried"),
            "files_skipped": s.get("files_skipped"),
            "files_resumed": s.get("files_resumed"),
            "mismatched": v.get("mismatched"),
            "repaired": v.get("repaired"),
            "error_tail": self.stderr.strip().splitlines()[-3:],
        }


def parse_progress(line: str) -> tuple[float, int] | None:
    """(monotonic time, bytes done) from a `chaos-progress` line of driver.py, else None."""
    m = _PROGRESS.match(line.strip())
    return (float(m.group(1)), int(m.group(2))) if m else None


def longest_stall(progress: list[tuple[float, int]], start: float, end: float) -> float:
    """Longest time the bytes-done figure stayed put, among lines inside [start, end]."""
    best, run_start, last = 0.0, None, None
    for t, b in progress:
        if t < start or t > end:
            continue
        if last is not None and b == last[1]:
            run_start = run_start if run_start is not None else last[0]
            best = max(best, t - run_start)
        else:
            run_start = None
        last = (t, b)
    return best


def slowest_rate(progress: list[tuple[float, int]], start: float, end: float, span: float) -> float | None:
    """Lowest bytes/s over any stretch of at least `span` seconds between progress lines in [start, end]."""
    inside = [(t, b) for t, b in progress if start <= t <= end]
    best = None
    for i, (t0, b0) in enumerate(inside):
        j = next((j for j in range(i + 1, len(inside)) if inside[j][0] - t0 >= span), None)
        if j is None:
            break
        rate = (inside[j][1] - b0) / (inside[j][0] - t0)
        best = rate if best is None else min(best, rate)
    return best


def reported(kind: str, attempts: list[Attempt], info: dict) -> tuple[bool, str]:
    """Whether the fault shows in the copy's output, and how (see the module docstring)."""
    first = attempts[0]
    if kind == "sshd_restart":
        retried = (first.summary or {}).get("files_retried") or 0
        if retried:
            return True, f"files_retried={retried}"
        lost = (first.summary or {}).get("connections_lost") or 0
        if lost:
            return True, f"connections_lost={lost}"
        if not first.ok and any(w in first.errors() for w in _CONNECTION_WORDS):
            return True, "error names the lost connection"
        return False, "no retry counted and no connection error"
    if kind == "blackhole":
        stall = longest_stall(first.progress, info["t_fault"] - 0.6, info["t_fault"] + info["seconds"] + 1.0)
        if stall >= 0.5 * info["seconds"]:
            return True, f"progress stalled {stall:.1f}s for a {info['seconds']:.1f}s outage"
        return False, f"progress stalled only {stall:.1f}s for a {info['seconds']:.1f}s outage"
    if kind == "sigkill":
        if len(attempts) < 2:
            return False, "no re-run after the kill"
        s = attempts[1].summary or {}
        n = (s.get("files_skipped") or 0) + (s.get("files_resumed") or 0)
        if n >= 1:
            return True, f"re-run: files_skipped={s.get('files_skipped')} files_resumed={s.get('files_resumed')}"
        return False, "the re-run did not count the killed attempt's files"
    if kind == "disk_full":
        if "no space left" in first.errors():
            return True, "error: no space left"
        return False, "no 'no space left' error"
    if kind == "byte_flip":
        v = (first.summary or {}).get("verify") or {}
        if (v.get("mismatched") or 0) >= 1:
            return True, f"verify.mismatched={v.get('mismatched')} repaired={v.get('repaired')}"
        if "checksum mismatch" in first.errors():
            return True, "error: checksum mismatch"
        return False, "no mismatch counted"
    if kind == "permission":
        if "permission denied" in first.errors():
            return True, "error: permission denied"
        return False, "no 'permission denied' error"
    if kind == "rate_cut":
        # Acknowledged bytes lag the link: data that crossed before the cut (the server's
        # socket buffer and sftp-server's backlog on a loaded host) is still acknowledged
        # during it. Once that drained, the acknowledgements follow the cut link: some
        # second of the cut must show at most 1.2x the cut rate.
        start, end = info["t_fault"] + 0.5, info["t_fault"] + info["seconds"]
        slowest = slowest_rate(first.progress, start, end, span=1.0)
        if slowest is None:
            return False, "too few progress lines during the cut to see it"
        limit = 1.2 * info["cut_mbit"] * 1e6 / 8 + 64 * 1024
        how = (
            f"slowest second of the cut: {slowest * 8 / 1e6:.1f} Mbit/s acknowledged "
            f"(cut to {info['cut_mbit']:.1f} Mbit/s)"
        )
        return slowest <= limit, how
    raise ValueError(f"unknown fault kind {kind!r}")
