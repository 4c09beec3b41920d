"""What end-to-end verification costs: none / sequential / file / block, on an emulated link.

    python -m benchmarks.verify_cost                       # the full run (lead, quiet machine)
    python -m benchmarks.verify_cost --quick               # smoke: tiny data, lan, 1 repetition

Datasets, scaled from Liu, Jung, Kettimuthu, Sun, Towards Optimizing Large-Scale
Data Transfers with End-to-End Integrity Verification (section IV) so a
run fits this machine: `20-10G` (20 files of 10 GB) -> 8 x 256 MiB;
`10G-500M` (10 GB and 500 MB files alternating) -> 4 x 256 MiB + 4 x 12 MiB;
and `mixed` from benchmarks/datasets.py (1000 files of 1 B - 4 MiB).
--quick divides file sizes by 32 and takes 20 files of `mixed`.

Every (link, dataset) cell runs each mode --reps times, the modes interleaved
and rotated per repetition so drift on the shared machine spreads over all
of them. Each run is the real CLI uploading into a real sshd behind the
emulated link (benchmarks/contenders/testbed.py), a fresh journal key, and
its landing checked byte for byte against the dataset's manifest.

Model (paper 002 Table I, airflow_transfer/integrity/model.py): t = seconds
to send one verification block, from the median unverified run; c = seconds
to checksum one block at the destination, measured as the helper does it
(fsync, drop the page cache, read back, hash) on the dataset's files. The
report puts the predicted time of each mode next to the measured median,
and (t + c) / max(t, c), the most any overlap can gain over sequential.

Writes benchmarks/results/verify_cost.json and verify_cost.md (--out DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_transfer.integrity.algorithms import DEFAULT_ALGORITHM, digest_file
from airflow_transfer.integrity.model import (
    CostModel,
    block_level_time,
    file_level_time,
    sequential_time,
)
from benchmarks.contenders.airflow_transfer import copy_argv, sftp_url
from benchmarks.contenders.base import ContenderFailed, clear, verify_tree
from benchmarks.datasets import DEFAULT_CACHE, Dataset, DatasetSpec, ensure
from benchmarks.run import commit, machine, say

MIB = 1024 * 1024
MODES = ("none", "sequential", "file", "block")
KNOBS = ["--algorithm", "fixed", "--pp", "8", "-p", "4", "-c", "4"]
DEFAULT_BLOCK = 8 * MIB


# -- datasets ---------------------------------------------------------------------
def _hardlinked(name: str, parts: list[tuple[str, Dataset, list[str]]], root: Path) -> Dataset:
    """A dataset made of files of others, hard-linked (no copy) under `root/name`."""
    path = root / name
    manifest: dict[str, tuple[int, str]] = {}
    for prefix, ds, rels in parts:
        for k, rel in enumerate(rels):
            manifest[f"{prefix}{k}.bin"] = ds.manifest[rel]
    want = {rel: size for rel, (size, _) in manifest.items()}
    have = {n: os.stat(path / n).st_size for n in os.listdir(path)} if path.exists() else {}
    if have != want:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        os.chmod(path, 0o755)
        for prefix, ds, rels in parts:
            for k, rel in enumerate(rels):
                os.link(ds.path / rel, path / f"{prefix}{k}.bin")
    return Dataset(DatasetSpec(name, len(manifest), max(want.values())), path, manifest)


def datasets(names: list[str], quick: bool, cache: Path) -> list[Dataset]:
    scale = 32 if quick else 1
    big = ensure(DatasetSpec(f"p002-big{'-q' if quick else ''}", 8, 256 * MIB // scale, seed=2021), cache, say)
    out = []
    for name in names:
        if name == "20-10G":
            out.append(Dataset(DatasetSpec("20-10G-scaled", 8, big.spec.size), big.path, big.manifest))
        elif name == "10G-500M":
            small = ensure(
                DatasetSpec(f"p002-small{'-q' if quick else ''}", 4, 12 * MIB // scale, seed=2022), cache, say
            )
            rels_big, rels_small = sorted(big.manifest)[:4], sorted(small.manifest)
            out.append(
                _hardlinked(
                    f"p002-10G-500M{'-q' if quick else ''}", [("a", big, rels_big), ("b", small, rels_small)], cache
                )
            )
            out[-1].spec = DatasetSpec("10G-500M-scaled", 8, big.spec.size)
        elif name == "mixed":
            spec = DatasetSpec("mixed", 1000, 4 * MIB, sizes="uniform", seed=13)
            out.append(ensure(spec.with_files(20) if quick else spec, cache, say))
        else:
            raise SystemExit(f"unknown dataset {name!r}: choose from 20-10G, 10G-500M, mixed")
    return out


# -- measuring ------------------------------------------------------------------------
def checksum_seconds_per_byte(ds: Dataset, algorithm: str, limit: int = 512 * MIB) -> tuple[float, float]:
    """(from disk, in memory) seconds per byte to checksum, as the destination's helper does it:
    fsync, drop the page cache, read back and hash; and the hash alone on bytes in memory."""
    disk_s = disk_n = 0
    for rel in sorted(ds.manifest, key=lambda r: -ds.manifest[r][0]):
        path = ds.path / rel
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        t0 = time.perf_counter()
        digest_file(algorithm, path)
        disk_s += time.perf_counter() - t0
        disk_n += ds.manifest[rel][0]
        if disk_n >= limit:
            break
    from airflow_transfer.integrity.algorithms import new_hasher

    data = os.urandom(16 * MIB)
    h = new_hasher(algorithm)
    t0 = time.perf_counter()
    for _ in range(4):
        h.update(data)
    h.hexdigest()
    mem = (time.perf_counter() - t0) / (4 * len(data))
    return disk_s / max(disk_n, 1), mem


def one_run(bed, ds: Dataset, mode: str, algorithm: str, block: int, timeout: float) -> dict:
    remote = bed.fresh_remote_dir("verify-cost")
    os.sync()  # the previous run's dirty pages are not written back during this one
    verify = (
        ["--verify", "none"]
        if mode == "none"
        else ["--verify", algorithm, "--verify-mode", mode, "--verify-block-size", str(block)]
    )
    argv = copy_argv(bed, str(ds.path), sftp_url(bed, remote), [*KNOBS, *verify], "verify-cost")
    rec = {
        "link": bed.profile,
        "dataset": ds.spec.name,
        "mode": mode,
        "ok": False,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    try:
        done = bed.run(argv, timeout)
        rec["seconds"] = round(done.seconds, 3)
        try:
            summary = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ContenderFailed(f"no JSON summary (exit {done.returncode}): {done.tail()}") from None
        if done.returncode != 0 or summary.get("failed"):
            raise ContenderFailed(f"exit {done.returncode}, failed {summary.get('failed', [])[:1]}")
        v = summary["verify"]
        if mode != "none" and (v["mode"] != mode or v["verified"] != ds.files):
            raise ContenderFailed(f"verified {v['verified']} of {ds.files} files in mode {v['mode']}")
        rec.update(verify=v, cpu_s=round(done.cpu_s, 2), identical=verify_tree(ds, remote, content=True), ok=True)
    except ContenderFailed as exc:
        rec["error"] = str(exc)
    finally:
        bed.wait_server_idle()
        clear(remote)
    return rec


# -- the cells --------------------------------------------------------------------------
def summarise(runs: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["link"], r["dataset"], r["mode"]), []).append(r)
    rows = []
    for (link, dataset, mode), rs in groups.items():
        ok = [r["seconds"] for r in rs if r["ok"]]
        if not ok:
            rows.append(
                {
                    "link": link,
                    "dataset": dataset,
                    "mode": mode,
                    "repetitions": 0,
                    "errors": [r.get("error") for r in rs],
                }
            )
            continue
        rows.append(
            {
                "link": link,
                "dataset": dataset,
                "mode": mode,
                "repetitions": len(ok),
                "median_s": round(statistics.median(ok), 3),
                "min_s": min(ok),
                "max_s": max(ok),
                "identical": all(r.get("identical") for r in rs if r["ok"]),
            }
        )
    return rows


def model_rows(
    rows: list[dict], sets: dict[str, Dataset], costs: dict[str, tuple[float, float]], block: int
) -> list[dict]:
    """t and c per block and the predicted time of each mode, next to the measured medians."""
    out = []
    by = {(r["link"], r["dataset"], r["mode"]): r for r in rows if r.get("repetitions")}
    for (link, dataset, mode), r in by.items():
        if mode != "none":
            continue
        ds = sets[dataset]
        sizes = [s for s, _ in ds.manifest.values()]
        total = sum(sizes)
        t = r["median_s"] * block / total  # seconds to send one block, unverified
        c_disk, c_mem = (x * block for x in costs[dataset])
        m = CostModel(t=t, c=c_disk, unit=block)
        predicted = {
            "none": r["median_s"],
            "sequential": sequential_time(sizes, m),
            "file": file_level_time(sizes, m),
            "block": block_level_time(sizes, block, m),
        }
        measured = {k: by[(link, dataset, k)]["median_s"] for k in MODES if (link, dataset, k) in by}
        out.append(
            {
                "link": link,
                "dataset": dataset,
                "block_bytes": block,
                "t_block_s": round(t, 4),
                "c_block_s": round(c_disk, 4),
                "c_block_in_memory_s": round(c_mem, 4),
                "max_overlap_gain": round((t + c_disk) / max(t, c_disk), 3),
                "predicted_s": {k: round(v, 3) for k, v in predicted.items()},
                "measured_s": measured,
            }
        )
    return out


def targets(rows: list[dict]) -> list[dict]:
    """The issue's acceptance lines, per link, from the medians."""
    by = {(r["link"], r["dataset"], r["mode"]): r.get("median_s") for r in rows if r.get("repetitions")}
    out = []
    for link in sorted({r["link"] for r in rows}):
        for dataset in sorted({r["dataset"] for r in rows}):
            get = lambda m: by.get((link, dataset, m))
            if get("block") and get("none"):
                v = get("block") / get("none")
                out.append(
                    {
                        "link": link,
                        "dataset": dataset,
                        "check": "block / unverified <= 1.10",
                        "value": round(v, 3),
                        "holds": v <= 1.10,
                    }
                )
            if dataset.startswith("20-10G") and get("block") and get("sequential"):
                v = get("sequential") / get("block")
                out.append(
                    {
                        "link": link,
                        "dataset": dataset,
                        "check": "sequential / block >= 1.5",
                        "value": round(v, 3),
                        "holds": v >= 1.5,
                    }
                )
            if dataset.startswith("10G-500M") and get("block") and get("file"):
                v = get("file") / get("block")
                out.append(
                    {
                        "link": link,
                        "dataset": dataset,
                        "check": "file / block > 1 (block faster)",
                        "value": round(v, 3),
                        "holds": v > 1.0,
                    }
                )
    return out


def report(doc: dict) -> str:
    lines = [
        "# Cost of end-to-end verification",
        "",
        f"{doc['date']}, {doc['machine']}, commit {doc['commit'][:12]}.",
        "",
        f"Command: `{doc['command']}`",
        "",
        f"Algorithm {doc['algorithm']}, block {doc['block_bytes'] // 1024} KiB, knobs `{' '.join(KNOBS)}`, "
        f"{doc['reps']} repetitions per cell, modes interleaved.",
        "",
        "| link | dataset | mode | runs | median s | min s | max s | x unverified |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = {(r["link"], r["dataset"]): r.get("median_s") for r in doc["cells"] if r["mode"] == "none"}
    for r in doc["cells"]:
        if not r.get("repetitions"):
            lines.append(f"| {r['link']} | {r['dataset']} | {r['mode']} | 0 | failed: {r['errors'][:1]} | | | |")
            continue
        b = base.get((r["link"], r["dataset"]))
        ratio = f"{r['median_s'] / b:.3f}" if b else ""
        lines.append(
            f"| {r['link']} | {r['dataset']} | {r['mode']} | {r['repetitions']} | {r['median_s']:.2f} | "
            f"{r['min_s']:.2f} | {r['max_s']:.2f} | {ratio} |"
        )
    lines += [
        "",
        "## Model (paper 002 Table I) vs measured",
        "",
        "t: seconds to send one block (median unverified run); c: seconds to checksum one block at the "
        "destination (fsync, page cache dropped, read back, hashed); the last column is (t + c) / max(t, c), "
        "the most any overlap can gain over sequential.",
        "",
        "| link | dataset | t s | c s | mode | predicted s | measured s | max gain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in doc["model"]:
        for mode in MODES:
            lines.append(
                f"| {m['link']} | {m['dataset']} | {m['t_block_s']} | {m['c_block_s']} | {mode} | "
                f"{m['predicted_s'].get(mode, '')} | {m['measured_s'].get(mode, '')} | "
                f"{m['max_overlap_gain']} |"
            )
    lines += ["", "## Acceptance targets", "", "| link | dataset | check | value | holds |", "|---|---|---|---|---|"]
    for t in doc["targets"]:
        lines.append(
            f"| {t['link']} | {t['dataset']} | {t['check']} | {t['value']} | {'yes' if t['holds'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.verify_cost", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--profiles",
        default=None,
        help="comma list of benchmarks/wan link profiles (default wan50,lan; lan with --quick)",
    )
    ap.add_argument("--datasets", default="20-10G,10G-500M,mixed")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--algorithm", default=DEFAULT_ALGORITHM)
    ap.add_argument("--block-size", type=int, default=None, help="verification block in bytes (default 8 MiB)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before one run is killed")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: sizes / 32, 20 mixed files, 1 repetition (lan unless --profiles)",
    )
    args = ap.parse_args(argv)
    from benchmarks.contenders.testbed import Testbed
    from benchmarks.wan.link import PROFILES

    profiles = (args.profiles or ("lan" if args.quick else "wan50,lan")).split(",")
    reps = 1 if args.quick else args.reps
    block = args.block_size or (DEFAULT_BLOCK // 32 if args.quick else DEFAULT_BLOCK)
    modes = args.modes.split(",")
    for p in profiles:
        if p not in PROFILES:
            raise SystemExit(f"unknown profile {p!r}: choose from {', '.join(PROFILES)}")
    sets = {ds.spec.name: ds for ds in datasets(args.datasets.split(","), args.quick, args.cache)}
    costs = {name: checksum_seconds_per_byte(ds, args.algorithm) for name, ds in sets.items()}
    runs: list[dict] = []
    for profile in profiles:
        with Testbed(profile) as bed:
            for name, ds in sets.items():
                for rep in range(reps):
                    order = modes[rep % len(modes) :] + modes[: rep % len(modes)]
                    for mode in order:
                        rec = one_run(bed, ds, mode, args.algorithm, block, args.timeout)
                        rec["rep"] = rep + 1
                        runs.append(rec)
                        say(
                            f"{profile} {name} rep {rep + 1}/{reps} {mode}: "
                            + (f"{rec['seconds']:.2f}s" if rec["ok"] else f"FAILED {rec.get('error')}")
                        )
    cells = summarise(runs)
    doc = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "commit": commit(),
        "command": "python -m benchmarks.verify_cost " + " ".join(argv or sys.argv[1:]),
        "algorithm": args.algorithm,
        "block_bytes": block,
        "reps": reps,
        "knobs": KNOBS,
        "quick": args.quick,
        "cells": cells,
        "model": model_rows(cells, sets, costs, block),
        "targets": [],
        "runs": runs,
    }
    doc["targets"] = targets(cells)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "verify_cost"
    (args.out / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(report(doc))
    say(f"wrote {args.out / stem}.json and .md")
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
