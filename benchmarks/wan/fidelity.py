"""Prints how faithfully the emulator reproduces each WAN profile (the figures in docs/testbed.md).

    python -m benchmarks.wan.fidelity [--profile wan50 --profile wan100] [--seconds 5]

Runs as root. Takes about 40 s per profile; figures are noisy when other work
shares the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks.wan.link import PROFILES, EmulatedLink
from benchmarks.wan.measure import iperf_mbit, ping_ms

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def measure(profile: str, seconds: int, offload: bool = True) -> dict:
    rtt_ms, rate_mbit = PROFILES[profile]
    with EmulatedLink(rtt_ms=rtt_ms, rate_mbit=rate_mbit, offload=offload) as link:
        lo, med, hi = ping_ms(link, count=20)
        row = {
            "profile": profile,
            "offload": offload,
            "rtt_ms": rtt_ms,
            "rate_mbit": rate_mbit,
            "ping_min_ms": lo,
            "ping_median_ms": med,
            "ping_max_ms": hi,
        }
        for streams in (1, 4, 8):
            row[f"w256k_p{streams}_mbit"] = round(
                iperf_mbit(link, "-w", "256K", "-P", str(streams), seconds=seconds, omit=1), 1
            )
        cpu0 = _cpu_seconds(link._emulator_pid)
        row["big_p1_mbit"] = round(iperf_mbit(link, seconds=seconds, omit=2), 1)
        row["emulator_core_share"] = round((_cpu_seconds(link._emulator_pid) - cpu0) / (seconds + 2), 2)
        fwd = link.stats()["fwd"]
        row["fwd_drops"] = fwd["drop_queue"]
        row["fwd_segments_per_write"] = round(fwd["tx_pkts"] / max(1, fwd["tx_frames"]), 1)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wan.fidelity")
    parser.add_argument("--profile", action="append", choices=sorted(PROFILES))
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--no-offload", action="store_true", help="one packet per read/write (the old path)")
    args = parser.parse_args(argv)
    for profile in args.profile or ["wan50", "wan100"]:
        print(json.dumps(measure(profile, args.seconds, offload=not args.no_offload)))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
