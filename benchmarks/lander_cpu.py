"""The bundle helper landing files, alone: CPU and wall time for a prepared stream of puts.

    .venv/bin/python benchmarks/lander_cpu.py [--files 20000] [--checkout DIR ...] [--runs 3]

Builds in memory the stream a download's lander reads (a confine request, then N puts of
1 KiB with their macs, digests and modes, a commit after every 900, as the copy's groups
are), in directories of 100 under a fresh directory of /var/tmp, and serves it with the
helper's own Sink (remote/bundle_sink.py) in this process: the files are created, flushed,
read back from disk, verified and named for real. Prints per run the wall seconds and the
process's user and system CPU seconds, and how many replies refused a file (0 expected).
`--checkout` (repeatable) takes the helper from other checkouts of this repository; the runs
then alternate between them. Landed files go to a trash directory, deleted after the last
run (benchmarks/fs_settle.py: creates right after a mass deletion are slower on this VM).
No network, no ssh, no copying process: what one helper costs per file.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GROUP = 900


def _load(checkout: Path):
    """The helper module of `checkout`, loaded from its file (it is stdlib only and standalone)."""
    path = checkout / "airflow_transfer" / "remote" / "bundle_sink.py"
    spec = importlib.util.spec_from_file_location(f"bundle_sink_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no bundle helper at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mac(helper, key: bytes, request_id: int, tmp: str, path: str) -> str:
    # The checkout's own mac: older helpers checked HMAC-SHA256, newer ones keyed BLAKE2b.
    if hasattr(helper, "_mac"):
        return helper._mac(key, f"{request_id}\0{tmp}\0{path}")
    import hmac

    return hmac.new(key, f"{request_id}\0{tmp}\0{path}".encode(), hashlib.sha256).hexdigest()


def _stream(helper, root: str, files: int, key: bytes) -> bytes:
    blocks = [os.urandom(1024) for _ in range(7)]
    parts = [helper._line({"op": "confine", "id": 0, "root": root, "key": key.hex()})]
    for i in range(files):
        folder = f"{root}/d{i // 100:04d}"
        if i % 100 == 0:
            os.mkdir(folder)
        tmp, path, data = f"{folder}/.f{i:06d}.part", f"{folder}/f{i:06d}", blocks[i % 7]
        head = {"op": "put", "id": i + 1, "mac": _mac(helper, key, i + 1, tmp, path), "tmp": tmp, "path": path}
        head.update(size=len(data), mode=0o644, mtime=1700000000.5, algo="sha256")
        head["digest"] = hashlib.sha256(data).hexdigest()
        parts.append(helper._line(head) + data)
        if (i + 1) % GROUP == 0 or i == files - 1:
            parts.append(helper._line({"op": "commit", "id": -(i + 1), "fsync": True, "drop_cache": True}))
    return b"".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--checkout", action="append", help="a checkout whose helper lands the files (repeatable)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    helpers = {c: _load(Path(c).resolve()) for c in args.checkout or [str(REPO)]}
    trash = Path(tempfile.mkdtemp(prefix="at-lander-trash-", dir="/var/tmp"))
    try:
        for run in range(args.runs):
            for checkout, helper in helpers.items():
                _one(helper, checkout, run, args.files, trash)
    finally:
        shutil.rmtree(trash, ignore_errors=True)
    return 0


def _one(helper, checkout: str, run: int, files: int, trash: Path) -> None:
    root = tempfile.mkdtemp(prefix="at-lander-", dir="/var/tmp")
    stream = io.BytesIO(_stream(helper, root, files, os.urandom(32)))
    out = io.BytesIO()
    os.sync()
    t0, cpu0 = time.monotonic(), os.times()
    helper.Sink(stream, out).serve()
    wall, cpu1 = time.monotonic() - t0, os.times()
    os.rename(root, trash / Path(root).name)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    refused = sum(1 for r in replies if not r.get("ok"))
    refused += sum(1 for r in replies for f in r.get("files") or [] if isinstance(f, dict) and not f.get("ok"))
    print(
        f"{checkout} run {run}: {files} files in {wall:.2f} s, user {cpu1.user - cpu0.user:.2f} s, "
        f"system {cpu1.system - cpu0.system:.2f} s, refused {refused}",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
