"""Plan a seeded 1,000,000-file manifest with every tuning algorithm; print seconds and peak RSS.

    .venv/bin/python benchmarks/plan_million.py [--files N] [--seed S] [--json]

Target: each plan within 2 s and the whole process within 500 MB peak RSS.
The manifest mixes four log-normal populations (KB-sized files up to GB-sized
ones) on a 100 ms, 1 Gbit/s link, so every planner has work to do: RCD splits
Set 1, MC fills all four classes, PCP has a Set 2. Figures on a shared 2-core
machine are noisy; the budget leaves a wide margin.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_transfer.tuning import ALGORITHMS, LinkInfo, get_algorithm, sort_manifest

TARGET_SECONDS = 2.0
TARGET_RSS_MB = 500.0


def make_manifest(files: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    # (share of files, median bytes, sigma): small, middle, large, huge populations.
    populations = [(0.70, 40e3, 1.0), (0.25, 2e6, 0.6), (0.045, 60e6, 0.5), (0.005, 3e9, 0.4)]
    counts = rng.multinomial(files, [share for share, _, _ in populations])
    sizes = np.concatenate(
        [rng.lognormal(np.log(median), sigma, n) for n, (_, median, sigma) in zip(counts, populations)]
    )
    rng.shuffle(sizes)
    sizes = sizes.astype(np.int64)
    index = pa.array(np.arange(files).astype(np.int64)).cast(pa.string())
    paths = pc.binary_join_element_wise(pa.scalar("data/run"), index, pa.scalar(".dat"), "")
    return pa.table({"path": paths, "size": sizes, "mtime": np.full(files, 1.7e9)})


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=20240501)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = parser.parse_args(argv)

    link = LinkInfo(rtt_s=0.1, bandwidth_bps=1e9, source="cli")
    t0 = time.perf_counter()
    manifest = make_manifest(args.files, args.seed)
    generate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    manifest = sort_manifest(manifest)
    sort_s = time.perf_counter() - t0

    rows = []
    for name in ALGORITHMS:
        algo = get_algorithm(name)
        t0 = time.perf_counter()
        specs = algo.plan(manifest, link)
        seconds = time.perf_counter() - t0
        assert sum(s.files for s in specs) == args.files, name
        rows.append({"algorithm": name, "seconds": round(seconds, 4), "chunks": len(specs)})
    report = {
        "files": args.files,
        "seed": args.seed,
        "bdp_bytes": link.bdp_bytes,
        "generate_s": round(generate_s, 3),
        "sort_s": round(sort_s, 3),
        "plans": rows,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "ok": all(r["seconds"] <= TARGET_SECONDS for r in rows) and peak_rss_mb() <= TARGET_RSS_MB,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(
            f"{args.files} files (seed {args.seed}); generate {generate_s:.2f} s, sort {sort_s:.2f} s", file=sys.stderr
        )
        for r in rows:
            print(f"  {r['algorithm']:<12} {r['seconds']:8.4f} s  {r['chunks']:6d} chunks", file=sys.stderr)
        print(
            f"peak RSS {report['peak_rss_mb']:.1f} MB (targets: <= {TARGET_SECONDS} s per plan, "
            f"<= {TARGET_RSS_MB:.0f} MB) -> {'OK' if report['ok'] else 'OVER BUDGET'}",
            file=sys.stderr,
        )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
