"""Measurements across an emulated link: ping RTT and iperf3 throughput (src -> dst)."""

from __future__ import annotations

import json
import re
import statistics
import subprocess

from benchmarks.wan.link import EmulatedLink

# The endpoints run ahead of ordinary work: on a shared 2-core machine a
# starved iperf3 measures the scheduler, not the link. (The emulator itself
# runs its packet threads SCHED_FIFO.)
ENDPOINT_NICE = ["nice", "-n", "-10"]


def ping_ms(link: EmulatedLink, count: int = 10, interval: float = 0.1) -> tuple[float, float, float]:
    """(min, median, max) RTT in ms of `count` pings from src to dst.

    The median, not ping's average: on 2 shared cores a few late wake-ups of ping
    itself (one reply at 120 ms on a 100 ms link, seen in CI) lift the mean by
    more than the emulator's error, while the median stays the link's RTT."""
    out = link.run("src", ["ping", "-n", "-c", str(count), "-i", str(interval), link.dst_addr]).stdout
    times = sorted(float(t) for t in re.findall(r"time=([\d.]+) ms", out))
    if not times:
        raise RuntimeError(f"no replies in ping output: {out.strip()[-300:]}")
    return times[0], statistics.median(times), times[-1]


def iperf_mbit(link: EmulatedLink, *args: str, seconds: int = 4, omit: int = 1) -> float:
    """Receiver-side Mbit/s of one iperf3 run from src to a one-off server in dst.

    `omit` seconds of slow start are left out of the average.
    """
    received = iperf_json(link, *args, seconds=seconds, omit=omit)["end"]["sum_received"]
    return received["bits_per_second"] / 1e6


def iperf_json(link: EmulatedLink, *args: str, seconds: int = 4, omit: int = 1) -> dict:
    """The client's JSON report of one iperf3 run from src to a one-off server in dst
    (for UDP, `end.sum` has the datagrams sent and lost). A fresh server per run: a
    long-lived one needs a moment after each test and resets the next client's
    control connection if it comes too soon.
    """
    server = link.run_in(
        "dst",
        [*ENDPOINT_NICE, "iperf3", "-s", "-1", "-B", link.dst_addr, "--forceflush"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    try:
        banner = ""
        while "Server listening" not in banner:  # a rule line comes first
            line = server.stdout.readline()
            if not line:
                raise RuntimeError(f"iperf3 server did not start in {link.dst_ns}: {banner.strip()}")
            banner += line
        argv = [*ENDPOINT_NICE, "iperf3", "-c", link.dst_addr, "-J", "-t", str(seconds), "-O", str(omit), *args]
        done = link.run("src", argv, timeout=seconds + omit + 20, check=False)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
    result = json.loads(done.stdout or "{}")
    end = result.get("end", {})
    if done.returncode != 0 or not (end.get("sum_received") or end.get("sum")):
        raise RuntimeError(f"iperf3 {' '.join(args)} failed: {result.get('error') or done.stderr.strip()}")
    return result
