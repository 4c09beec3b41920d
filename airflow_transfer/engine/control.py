"""How a run is watched and steered from outside: the hooks both runners call.

The one runner (engine/runner.py), whatever the protocol beneath it,
reports every finished file, every failed attempt and every failed
connection attempt to their session's `control`, and ask it before taking the
next file. The default `Control` does nothing, so a plain copy is unaffected.
The fall-back (engine/fallback.py) installs a `Controller`: it counts
consecutive failures, abandons the protocol at a threshold (one wrong-size
copy is enough) and carries switch-back requests; the runners then take no new
files and leave the ones not finished without an outcome of their own, for the
next protocol to carry.
"""

from __future__ import annotations

import threading

from .retry import classify

# The error of a file a run left for another protocol (or another run) to carry: never attempted
# to the end here, never journaled as failed.
NOT_FINISHED = "not finished"


class Control:
    """Hooks a fall-back controller uses to watch and steer a run. The default does nothing."""

    def stopping(self) -> bool:
        """True: take no new files (switch back to a preferred protocol, or give up on this one)."""
        return False

    def aborted(self) -> bool:
        """True: this protocol is being abandoned; in-flight failures are not retried here."""
        return False

    def event(self, ok: bool, kind: str = "", detail: str = "") -> None:
        """A file finished (ok) or an operation failed (kind: error, connect, size, checksum)."""

    def events_ok(self, files: int) -> None:
        """`files` files finished, as many event(True) calls would say."""
        for _ in range(files):
            self.event(True)

    def absorb(self, exc: BaseException) -> bool:
        """A run could not even start (connect, mkdir): True when the caller should leave its
        files not finished instead of raising, because another protocol may carry them."""
        return False


class Controller(Control):
    """Counts consecutive failures of one phase; aborts it at the threshold; carries switch requests."""

    def __init__(self, threshold: int, carried: int = 0) -> None:
        self.threshold = threshold
        self.lock = threading.Lock()
        self.consecutive = carried  # failures in a row from an earlier phase on the same protocol
        self.successes = 0
        self.failures = 0
        self._abort = False
        self._stop = False
        self.reason = ""
        self.switch_to: int | None = None
        self.last_detail = ""

    def events_ok(self, files: int) -> None:
        with self.lock:
            self.consecutive = 0
            self.successes += files

    def event(self, ok: bool, kind: str = "", detail: str = "") -> None:
        with self.lock:
            if ok:
                self.consecutive = 0
                self.successes += 1
                return
            self.failures += 1
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

    def absorb(self, exc: BaseException) -> bool:
        retry, _ = classify(exc)
        text = getattr(exc, "message", None) or f"{exc.__class__.__name__}: {exc}"
        if retry:
            self.event(False, "connect", text)
        else:
            self.fail_now(text)
        return True

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
