"""The bundle helper reading files, alone: CPU per file for a prepared stream of send requests.

    .venv/bin/python benchmarks/reader_cpu.py [--files 20000] [--checkout DIR ...] [--runs 5]

The other half of benchmarks/lander_cpu.py. Writes N files of 1 KiB in directories of 100
under a fresh directory of /var/tmp (once, then read once so that every run finds them in the
page cache), builds in memory the send requests a download's client writes to the server's
helper (listed size, mtime and mode, sha256, where the lander is to put each file, a mac), and
serves them with the helper's own Sink (remote/bundle_sink.py) in this process, its output
(a put header and the bytes per file, the stream the lander reads) going to memory. Prints per
run the process's user + system CPU per file in microseconds, and the medians.
`--checkout` (repeatable) takes the helper from other checkouts of this repository; the runs
then alternate between them, and the last line says whether they wrote the same stream.
No network, no ssh, no lander: what reading and framing cost per file.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.lander_cpu import _load


def _tree(root: Path, files: int) -> list[bytes]:
    """Writes the files; the send requests for them, one line each (as the client formats them)."""
    block = os.urandom(1024)
    lines = []
    for i in range(files):
        folder = root / f"d{i // 100:04d}"
        if i % 100 == 0:
            folder.mkdir()
        path = folder / f"f{i:06d}"
        path.write_bytes(block[i % 7 :] + block[: i % 7])
        st = path.stat()
        lines.append(
            (
                '{"op":"send","id":%d,"path":"%s","size":%d,"mtime":%r,"mode":420,"algo":"sha256",'
                '"tmp":"/l/d%04d/.f%06d.part","dst":"/l/d%04d/f%06d","mac":"%s"}\n'
                % (i + 1, path, st.st_size, st.st_mtime, i // 100, i, i // 100, i, "ab" * 32)
            ).encode("ascii")
        )
    for path in root.rglob("f*"):
        path.read_bytes()
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--checkout", action="append", help="a checkout whose helper reads the files (repeatable)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    helpers = {c: _load(Path(c).resolve()) for c in args.checkout or [str(REPO)]}
    root = Path(tempfile.mkdtemp(prefix="at-reader-", dir="/var/tmp"))
    try:
        stream = b"".join(_tree(root, args.files))
        per_file: dict[str, list[float]] = {c: [] for c in helpers}
        written: dict[str, bytes] = {}
        for run in range(args.runs):
            for checkout, helper in helpers.items():
                out = io.BytesIO()
                t0 = os.times()
                helper.Sink(io.BytesIO(stream), out).serve()
                t1 = os.times()
                us = (t1.user - t0.user + t1.system - t0.system) / args.files * 1e6
                per_file[checkout].append(us)
                written[checkout] = out.getvalue()
                print(f"{checkout} run {run}: {us:.1f} us of CPU per file", flush=True)
        for checkout, runs in per_file.items():
            print(f"{checkout}: median {statistics.median(runs):.2f} us per file over {len(runs)} runs")
        if len(written) > 1:
            print("same stream from every checkout:", len(set(written.values())) == 1)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
