"""`airflow-transfer` as the chaos runner starts it: the real CLI, plus one test hook.

    python -m benchmarks.chaos.driver copy SRC DST ...      # same arguments as airflow-transfer

With AT_CHAOS_FLIP=<destination temporary path> and AT_CHAOS_FLIP_AT=<fraction>,
one byte of that temporary file is inverted the first time the engine is about to
checksum it (the engine's `before_verify` hook, the one tests/test_verify.py uses):
a byte flipped at the destination after write and before verification. A victim
small enough for a bundle (engine/bundle.py) keeps the bundle path (which has no
such moment on this side): its byte is flipped in the bundle as it is sent,
after the source's digest was taken, so the sink's read-back must catch it.
Without those variables this is `airflow-transfer` whose progress snapshots are
also written as `chaos-progress <monotonic time> <bytes done>` lines.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time


def _flipper(victim: str, at: float, limit: int | None):
    done = threading.Event()
    lock = threading.Lock()

    def hook(tmp: str) -> None:
        if tmp != victim:
            return
        with lock:
            if done.is_set():
                return
            done.set()
            size = os.path.getsize(tmp)
            # Block mode calls the hook before the file's first block digests: only the
            # region already written (the first block) is safe to flip.
            span = min(size, limit) if limit else size
            if span <= 0:
                return
            offset = min(span - 1, int(at * span))
            with open(tmp, "r+b") as f:
                f.seek(offset)
                b = f.read(1)
                f.seek(offset)
                f.write(bytes([b[0] ^ 0xFF]))
                f.flush()
                os.fsync(f.fileno())
            sys.stderr.write(f"chaos: flipped the byte at {offset} of {tmp}\n")
            sys.stderr.flush()

    return hook


def _bundle_flipper(victim: str, at: float) -> None:
    """Flip one byte of the victim's data the first time it goes by in a bundle: in the stream
    between the helper that read it (and took its digest) and the sink, where the copy's pump
    moves it. Its header and bytes must come in one piece of that stream (a file of a bundle
    is at most 1 MiB, a piece up to 1 MiB): otherwise the run counts as not injected."""
    from airflow_transfer.engine import bundle_channel

    # The pump splices pipe to pipe where both helpers are processes here (an `ssh` carrier):
    # those bytes never pass through this process, so it copies them instead, as over paramiko.
    bundle_channel._pipes = lambda source, dest: None
    real_forward = bundle_channel.Pump.forward
    done = threading.Event()
    marker = b'{"op":"put"'

    def forward(self, data):
        at_head = data.find(marker) if not done.is_set() else -1
        while at_head >= 0:
            end = data.find(b"\n", at_head)
            if end < 0:
                break
            head = json.loads(data[at_head:end])
            size = head.get("size") or 0
            if head.get("tmp") == victim and size and end + size < len(data):
                done.set()
                offset = min(size - 1, int(at * size))
                k = end + 1 + offset
                data = data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1 :]
                sys.stderr.write(f"chaos: flipped the byte at {offset} of {victim} (in a bundle)\n")
                sys.stderr.flush()
                break
            at_head = data.find(marker, end)
        return real_forward(self, data)

    bundle_channel.Pump.forward = forward


def _stamped(progress):
    """The progress callback, each snapshot also written with the moment it was taken.

    A task log stamps its lines; on a loaded machine the reader of a pipe cannot (lines
    arrive late, in bursts), so the copy stamps them itself: CLOCK_MONOTONIC is one
    clock for every process of the host, whatever its network namespace."""

    def emit(snapshot: dict) -> None:
        sys.stderr.write(f"chaos-progress {time.monotonic():.3f} {snapshot['bytes_done']}\n")
        if progress is not None:
            progress(snapshot)

    return emit


def main(argv: list[str] | None = None) -> int:
    from airflow_transfer import job

    victim = os.environ.get("AT_CHAOS_FLIP")
    hook = None
    if victim and os.environ.get("AT_CHAOS_FLIP_BUNDLE") == "1":
        _bundle_flipper(victim, float(os.environ.get("AT_CHAOS_FLIP_AT", "0.5")))
    elif victim:
        hook = _flipper(
            victim,
            float(os.environ.get("AT_CHAOS_FLIP_AT", "0.5")),
            int(os.environ.get("AT_CHAOS_FLIP_LIMIT", "0")) or None,
        )
    real = job.run_copy

    def run_copy(req):
        req = dataclasses.replace(req, progress=_stamped(req.progress))
        if hook is not None:
            req = dataclasses.replace(req, before_verify=hook)
        return real(req)

    job.run_copy = run_copy
    from airflow_transfer.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
