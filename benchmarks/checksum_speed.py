"""Single-thread checksum speed per algorithm and block size, in MiB/s.

    .venv/bin/python benchmarks/checksum_speed.py [--mib 64] [--repeat 3]
        [--sizes 4K,64K,255K,1M,16M] [--algorithms md5,sha256,...] [--coreutils]
        [--pipeline] [--json]

Two figures per cell, best of --repeat runs over --mib MiB held in memory
(no disk, so this is the CPU cost only):
  stream  one hasher fed block-sized update() calls (a whole-file digest);
  blocks  a fresh hasher and a hexdigest per block (per-block digests, the
          block-level pipeline's cost; small blocks pay the per-hasher setup).
--coreutils also times md5sum/sha1sum/sha256sum/b2sum on a page-cached temp
file of --mib MiB (what the coreutils fall-back costs at a destination).
--pipeline times the engine's source side of --verify-mode block
(engine/block_source.py `BlockSource`: 1 MiB pieces as the job reads them,
4 MiB checksum blocks, hashed on the sending thread) with 1 and 2 such threads
hashing separate streams at once, as cc connections do: how far paper 002's
multi-threaded checksum (section III.B) gets on this machine. (It used to time
the in-process `BlockPipeline`, removed so that block verification has one
implementation, the engine's.)

The machine is shared (2 cores): figures are noisy, compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_transfer.engine.block_verify import BlockSource, block_spans
from airflow_transfer.integrity.algorithms import (
    ALGORITHMS,
    COREUTILS_COMMANDS,
    available,
    new_hasher,
)

MIB = 1024 * 1024


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1024, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def label(size: int) -> str:
    if size % MIB == 0:
        return f"{size // MIB}M"
    if size % 1024 == 0:
        return f"{size // 1024}K"
    return str(size)


def time_stream(name: str, view: memoryview, block: int) -> float:
    start = time.perf_counter()
    hasher = new_hasher(name)
    for pos in range(0, len(view), block):
        hasher.update(view[pos : pos + block])
    hasher.hexdigest()
    return time.perf_counter() - start


def time_blocks(name: str, view: memoryview, block: int) -> float:
    start = time.perf_counter()
    for pos in range(0, len(view), block):
        hasher = new_hasher(name)
        hasher.update(view[pos : pos + block])
        hasher.hexdigest()
    return time.perf_counter() - start


def best_rate(fn, name: str, view: memoryview, block: int, repeat: int) -> float:
    seconds = min(fn(name, view, block) for _ in range(repeat))
    return len(view) / MIB / seconds


def hash_stream(name: str, pieces: list[bytes]) -> None:
    """One stream through BlockSource, every byte acknowledged as it goes (blocks are emitted)."""
    total = sum(len(p) for p in pieces)
    src = BlockSource(name, block_spans(0, total, 4 * MIB), lambda block: None, 0)
    off = 0
    for piece in pieces:
        src.update(off, piece)
        src.acked(off, len(piece))
        off += len(piece)


def pipeline_rates(names: list[str], view: memoryview, repeat: int) -> dict[str, dict[str, float]]:
    pieces = [bytes(view[pos : pos + MIB]) for pos in range(0, len(view), MIB)]
    rates: dict[str, dict[str, float]] = {}
    for name in names:
        row = {}
        for threads in (1, 2):
            best = float("inf")
            for _ in range(repeat):
                workers = [threading.Thread(target=hash_stream, args=(name, pieces)) for _ in range(threads)]
                start = time.perf_counter()
                for th in workers:
                    th.start()
                for th in workers:
                    th.join()
                best = min(best, time.perf_counter() - start)
            # MiB hashed per second over all threads together.
            row[f"{threads} thread{'s' if threads > 1 else ''}"] = threads * len(view) / MIB / best
        rates[name] = row
    return rates


def coreutils_rates(total: int, repeat: int) -> dict[str, float]:
    rates: dict[str, float] = {}
    with tempfile.NamedTemporaryFile(prefix="cksum-bench-") as tmp:
        tmp.write(os.urandom(total))
        tmp.flush()
        subprocess.run(["cat", tmp.name], stdout=subprocess.DEVNULL, check=True)  # warm the cache
        for name, command in COREUTILS_COMMANDS.items():
            if shutil.which(command) is None:
                continue
            best = float("inf")
            for _ in range(repeat):
                start = time.perf_counter()
                subprocess.run([command, "--", tmp.name], stdout=subprocess.DEVNULL, check=True)
                best = min(best, time.perf_counter() - start)
            rates[f"{name} ({command})"] = total / MIB / best
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="MiB hashed per measurement")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="4K,64K,255K,1M,16M")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--coreutils", action="store_true")
    parser.add_argument("--pipeline", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    names = [n for n in args.algorithms.split(",") if available(n)]
    data = memoryview(os.urandom(args.mib * MIB))
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in names:
        results[name] = {
            mode: {label(b): round(best_rate(fn, name, data, b, args.repeat), 1) for b in sizes}
            for mode, fn in (("stream", time_stream), ("blocks", time_blocks))
        }
        print(f"measured {name}", file=sys.stderr)
    tools = coreutils_rates(args.mib * MIB, args.repeat) if args.coreutils else {}
    piped = pipeline_rates(names, data, args.repeat) if args.pipeline else {}

    if args.json:
        print(
            json.dumps(
                {
                    "machine": platform.processor() or platform.machine(),
                    "python": platform.python_version(),
                    "mib": args.mib,
                    "python_rates": results,
                    "coreutils_rates": tools,
                    "pipeline_rates": piped,
                }
            )
        )
        return 0
    heads = [label(b) for b in sizes]
    print(f"MiB/s, single thread, {args.mib} MiB in memory, best of {args.repeat}, Python {platform.python_version()}")
    print()
    print("| algorithm | mode | " + " | ".join(heads) + " |")
    print("|---|---|" + "---:|" * len(heads))
    for name, modes in results.items():
        for mode, row in modes.items():
            print(f"| {name} | {mode} | " + " | ".join(f"{row[h]:.0f}" for h in heads) + " |")
    if tools:
        print()
        print("| coreutils command (page-cached file) | MiB/s |")
        print("|---|---:|")
        for name, rate in tools.items():
            print(f"| {name} | {rate:.0f} |")
    if piped:
        cols = list(next(iter(piped.values())))
        print()
        print("| BlockSource MiB/s | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * len(cols))
        for name, row in piped.items():
            print(f"| {name} | " + " | ".join(f"{row[c]:.0f}" for c in cols) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
