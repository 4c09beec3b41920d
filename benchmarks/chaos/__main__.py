"""`make chaos`: python -m benchmarks.chaos [--faults N] [--seed S] [--out DIR]

Runs N transfers over the emulated wan50 link, one fault each (every kind in
turn, seeded random order and moments), checks the invariants, and writes
benchmarks/results/chaos.md and chaos.json. Exit status 0 only with zero
violations and every injected fault reported. Needs root.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.chaos import report
from benchmarks.chaos.faults import KINDS
from benchmarks.chaos.runner import Chaos, ChaosConfig, run_session

RESULTS = Path(__file__).resolve().parents[1] / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=210, help="faults to inject, one per run (default 210: 30 per kind)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock; printed)")
    ap.add_argument("--rate-mbit", type=float, default=100.0, help="emulated link rate (RTT is 50 ms)")
    ap.add_argument(
        "--kinds", default=",".join(KINDS), help=f"fault kinds, comma-separated (default: all: {','.join(KINDS)})"
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="directory for chaos.md / chaos.json")
    args = ap.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        ap.error(f"unknown fault kind(s) {', '.join(unknown) or '(none given)'}: use {', '.join(KINDS)}")
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    print(f"chaos: seed {seed} (re-run with --seed {seed}), {args.faults} faults", file=sys.stderr, flush=True)
    cfg = ChaosConfig(seed=seed, rate_mbit=args.rate_mbit)
    from benchmarks.run import commit, machine

    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.monotonic()
    records: list[dict] = []
    meta = {}
    with Chaos(cfg) as chaos:
        meta = {
            "command": f"make chaos CHAOS_ARGS='--faults {args.faults} --seed {seed}"
            + ("" if kinds == KINDS else f" --kinds {','.join(kinds)}")
            + "'",
            "seed": seed,
            "rtt_ms": cfg.rtt_ms,
            "rate_mbit": cfg.rate_mbit,
            "files": len(chaos.source),
            "bytes": chaos.total,
            "big_mib": cfg.big_mib,
            "p": cfg.p,
            "started": started,
            "commit": commit(),
            "machine": machine(),
        }

        def progress(rec: dict, n: int, of: int) -> None:
            records.append(rec)
            flag = "ok" if not rec["violations"] and rec["reported"] else "VIOLATION"
            print(
                f"chaos: run {n}/{of} {rec['kind']:13s} injected={rec['injected']!s:5s} "
                f"attempts={len(rec['attempts'])} {rec['seconds']:5.1f}s {flag}: {rec['how']}"
                + "".join(f"\n    {v['kind']} {v['path']}: {v['detail']}" for v in rec["violations"][:5]),
                file=sys.stderr,
                flush=True,
            )
            if n % 10 == 0:  # a partial report survives an interrupted session
                meta["duration_s"] = time.monotonic() - t0
                report.write(args.out, meta, records)

        run_session(chaos, args.faults, progress, kinds=kinds)
    meta["duration_s"] = time.monotonic() - t0
    t = report.write(args.out, meta, records)
    print(
        f"chaos: {t['runs']} runs, {t['faults_injected']} faults injected, {t['faults_reported']} reported, "
        f"{t['violations']} violations (lost {t['lost']}, corrupted {t['corrupted']}, leftover {t['leftover']}, "
        f"journal {t['journal']}), seed {seed}, {meta['duration_s'] / 60:.1f} min -> {args.out / 'chaos.md'}",
        file=sys.stderr,
    )
    return 0 if report.passed(t) else 1


if __name__ == "__main__":
    sys.exit(main())
