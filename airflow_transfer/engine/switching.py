"""How often the interpreter hands its lock from one thread to the next while a copy runs.

A copy is many threads that each wake for a short step and sleep again (paramiko's
transports, the pumps, the head start's pairs, the journal writer, the progress line) beside
one that computes for long stretches (the imports at start, a manifest, a digest in Python).
CPython lets a computing thread keep the lock for its switch interval, 5 ms by default, before
a waiting one may take it: a thread woken by a packet waits up to that long for each step.
Half a millisecond, measured on 2,000 x 64 KiB against 5 ms (interleaved runs on one VM, the
command line started by a wrapper that set the interval): wan50 uploads 4.05 s against 4.27
(five runs each), a loopback pull 2.08 s against 2.20 with the same machine CPU (3.48 against
3.49 s), lan uploads 3.37 s against 3.44 and wan50 downloads 4.70 against 4.72 (within
their spread).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

SWITCH_INTERVAL_S = 0.0005


@contextmanager
def quick_switching(interval: float = SWITCH_INTERVAL_S) -> Iterator[None]:
    """Run the block with the interpreter's switch interval at most `interval` seconds, then put
    back what it was (a process that set a shorter one keeps it)."""
    before = sys.getswitchinterval()
    if before <= interval:
        yield
        return
    sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
