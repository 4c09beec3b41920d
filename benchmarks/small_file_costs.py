"""Where one small file's time goes on each end of a bundle, step by step, in microseconds per file.

    .venv/bin/python benchmarks/small_file_costs.py [--files 1024] [--size 1024] [--groups 5] [--dir /tmp]

No network and no SSH: each step of the bundle path is run in-process on this
machine's disk, the way the engine runs it, and timed.

Sending side (the client on an upload): open and read the source file, its
sha256, the put header (JSON). The journal's cost per file is measured by
benchmarks/journal_done.py.

Receiving side (the sink; for downloads the client runs the same code): the
put (create the file: without a name, O_TMPFILE, or under its temporary name,
O_EXCL; write; mode and mtime), the group's flush (one syncfs, or an fsync per
file), the read-back from disk after dropping the pages and its digest, the
naming (a hard link of the unnamed file, or a rename), the directory fsync.

Reports the median over groups of each step's time divided by the group's
files, for syncfs and fsync durability with files made without a name (where
the filesystem allows), and for syncfs with named temporaries. Writes
benchmarks/results/small-file-costs.json. Groups are moved aside, not deleted, and the run starts after a settle: creates measured
right after deletions on an ext4 without a journal are several times slower
(benchmarks/fs_settle.py).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_transfer.remote import bundle_sink as bs
from benchmarks.fs_settle import discard, settle


def _timed(table: dict[str, float], name: str, fn):
    def run(*args, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            table[name] = table.get(name, 0.0) + time.perf_counter() - t0

    return run


CONFIGS = (("syncfs", "syncfs", False), ("fsync", "fsync", False), ("syncfs, named temporaries", "syncfs", True))


def receiving(root: Path, files: int, size: int, groups: int) -> dict[str, dict[str, float]]:
    """Median µs per file of each sink step over `groups` groups of `files` files, per
    configuration (CONFIGS: label, durability, named temporaries). The configurations take
    turns group by group, so that a machine slowing down over the run weighs on each alike."""
    data = os.urandom(size)
    digest = hashlib.sha256(data).hexdigest()
    per_group: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in CONFIGS}
    originals = {
        name: getattr(bs.Sink, name) for name in ("_create", "_write", "_finish", "_flush", "_verify", "_rename")
    }
    syncfs, unnamed = bs.SYNCFS, bs.UNNAMED
    try:
        for g in range(groups):
            for label, sync, named in CONFIGS:
                bs.SYNCFS = syncfs if sync == "syncfs" else None
                bs.UNNAMED = 0 if named else unnamed
                per_group[label].append(_group(root / f"{sync}-{int(named)}-g{g}", files, data, digest, originals))
    finally:
        bs.SYNCFS, bs.UNNAMED = syncfs, unnamed
        for name, fn in originals.items():
            setattr(bs.Sink, name, fn)
    return {
        label: {k: round(statistics.median(g[k] for g in rows), 1) for k in rows[0]}
        for label, rows in per_group.items()
    }


def _group(folder: Path, files: int, data: bytes, digest: str, originals: dict) -> dict[str, float]:
    steps: dict[str, float] = {}
    for name, fn in originals.items():
        setattr(bs.Sink, name, _timed(steps, name, fn))
    folder.mkdir()
    stream = io.BytesIO()
    for i in range(files):
        head = {
            "op": "put",
            "id": i,
            "tmp": f"{folder}/.f{i}.part",
            "path": f"{folder}/f{i}",
            "size": len(data),
            "mode": 0o644,
            "mtime": 1.7e9,
            "algo": "sha256",
            "digest": digest,
        }
        stream.write(json.dumps(head).encode() + b"\n" + data)
    stream.write(b'{"op": "commit", "id": -1}\n')
    stream.seek(0)
    t0 = time.perf_counter()
    bs.Sink(stream, io.BytesIO()).serve()
    whole = time.perf_counter() - t0
    cost = {
        "create": steps["_create"],
        "write": steps["_write"],
        "mode + mtime": steps["_finish"],
        "flush": steps["_flush"],
        "read-back + digest": steps["_verify"],
        "name (link or rename)": steps["_rename"],
    }
    cost["directory fsync, parsing, rest"] = whole - sum(cost.values())
    cost["total"] = whole
    discard(folder, folder.parent / "trash")
    return {k: 1e6 * v / files for k, v in cost.items()}


def sending(root: Path, files: int, size: int, groups: int) -> dict[str, float]:
    """Median µs per file of the sending side's steps."""
    src = root / "src"
    src.mkdir()
    for i in range(files):
        (src / f"f{i}").write_bytes(os.urandom(size))
    per_group = []
    for _ in range(groups):
        t0 = time.perf_counter()
        blobs = []
        for i in range(files):
            with open(src / f"f{i}", "rb") as f:
                blobs.append(f.read())
        t1 = time.perf_counter()
        digests = [hashlib.sha256(b).hexdigest() for b in blobs]
        t2 = time.perf_counter()
        heads = [
            json.dumps(
                {"op": "put", "id": i, "tmp": f"/d/.f{i}", "path": f"/d/f{i}", "size": size, "digest": digests[i]},
                separators=(",", ":"),
            ).encode()
            for i in range(files)
        ]
        t3 = time.perf_counter()
        assert len(heads) == files
        per_group.append({"open + read": t1 - t0, "sha256": t2 - t1, "put header (JSON)": t3 - t2})
    return {k: round(statistics.median(1e6 * g[k] / files for g in per_group), 1) for k in per_group[0]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1024)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="a directory on the disk to measure")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="at-costs-", dir=args.dir))
    settle(root / "trash")
    try:
        out = {
            "files_per_group": args.files,
            "file_bytes": args.size,
            "groups": args.groups,
            "sending_us_per_file": sending(root, args.files, args.size, args.groups),
            # whether files without a name could be made and named on the disk measured
            "unnamed_files": bool(bs.UNNAMED) and bs._can_name_unnamed(str(root)),
            "receiving_us_per_file": receiving(root, args.files, args.size, args.groups),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=1))
    (REPO / "benchmarks" / "results" / "small-file-costs.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
