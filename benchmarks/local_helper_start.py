"""What starting the bundle helper on this host costs: its CPU from start to exit, two ways.

    .venv/bin/python benchmarks/local_helper_start.py [--starts 15]

A copy of small files starts two or three helpers on this host (one per data connection:
landers for downloads, feeders for uploads). Each start here runs the helper, waits for its
hello, closes it and waits for it to exit, alternating between the way the copy starts it
(from its own file, whose bytecode Python loads) and the way a helper without a file of its
own starts (its source sent on its input and compiled, as the server's is). Prints the
children's user + system CPU and the time from start to exit, medians, in milliseconds.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_transfer.engine import bundle_channel


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=15)
    args = ap.parse_args()
    from_file = bundle_channel._local_helper_dir
    ways = {"from its file": from_file, "sent its source": lambda: None}
    runs: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
    try:
        for _ in range(args.starts):
            for way, folder in ways.items():
                bundle_channel._local_helper_dir = folder
                cpu0, t0 = _children_cpu(), time.monotonic()
                helper = bundle_channel.SinkChannel.local()
                helper.close()
                helper.chan.process.proc.wait()
                runs[way].append((_children_cpu() - cpu0, time.monotonic() - t0))
    finally:
        bundle_channel._local_helper_dir = from_file
    for way, rows in runs.items():
        cpu = statistics.median(r[0] for r in rows) * 1000
        wall = statistics.median(r[1] for r in rows) * 1000
        print(f"{way}: {cpu:.1f} ms of CPU, {wall:.1f} ms from start to exit (medians of {len(rows)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
