"""Benchmark datasets: generated from a seed into a cache directory, reused while intact.

    python -m benchmarks.datasets tiny small            # generate (or check) and print a summary
    python -m benchmarks.datasets small --files 20      # a 20-file variant for development

The shapes follow the papers' datasets: many small files, a middle ground and
a few large files (Yildirim, Arslan, Kim, Kosar, Application-Level Optimization
of Big Data Transfers Through Pipelining, Parallelism and Concurrency, IEEE TCC
2016, section 5), and a "random" set of sizes drawn uniformly between 1 byte
and a maximum (Kim, Yildirim, Kosar, A Flexible Client for GridFTP-based Data
Scheduling: 1000 files of 1 B - 10 MB, scaled here to 4 MiB so the set fits a
quick run).

Content is incompressible pseudo-random data from numpy's PCG64 stream, seeded
per file from (dataset seed, file index): a file's bytes never depend on any
other file or on how many files the variant has, and PCG64's raw stream is
stable across numpy versions, so a cache regenerated elsewhere is identical.
Each dataset's manifest (relative path, size, xxh3-128 digest) lives next to
the dataset directory, never inside it, so no tool copies it along.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

DEFAULT_CACHE = Path(os.environ.get("AIRFLOW_TRANSFER_BENCH_CACHE", "/var/tmp/airflow-transfer-bench")) / "datasets"
GENERATOR_VERSION = 1  # bump when the byte layout changes: old caches are then regenerated
BLOCK = 4 * 1024 * 1024
KIB, MIB = 1024, 1024 * 1024
FILES_PER_DIR = 100  # many-file sets are spread over subdirectories, as real trees are


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: int
    size: int  # bytes per file; for "uniform" the largest size
    sizes: str = "fixed"  # "fixed" or "uniform" (1 .. size bytes)
    seed: int = 0

    def with_files(self, files: int) -> DatasetSpec:
        return DatasetSpec(f"{self.name}-n{files}", files, self.size, self.sizes, self.seed)

    def scaled(self, factor: float) -> DatasetSpec:
        """The same shape with `factor` x the bytes: fewer files of a many-file set, smaller
        files of a few-file set (so a quick run keeps each dataset's character)."""
        if factor >= 1:
            return self
        if self.files >= FILES_PER_DIR:
            return DatasetSpec(
                f"{self.name}-x{factor:g}", max(1, round(self.files * factor)), self.size, self.sizes, self.seed
            )
        return DatasetSpec(
            f"{self.name}-x{factor:g}",
            self.files,
            max(KIB, round(self.size * factor / KIB) * KIB),
            self.sizes,
            self.seed,
        )


DATASETS: dict[str, DatasetSpec] = {
    "tiny": DatasetSpec("tiny", 2000, 64 * KIB, seed=11),
    "small": DatasetSpec("small", 1000, 1 * MIB, seed=12),
    "mixed": DatasetSpec("mixed", 1000, 4 * MIB, sizes="uniform", seed=13),
    "medium": DatasetSpec("medium", 20, 50 * MIB, seed=14),
    "large": DatasetSpec("large", 2, 512 * MIB, seed=15),
}


@dataclass
class Dataset:
    """A dataset on disk: `path` holds exactly the files of `manifest` (relative path -> (size, digest))."""

    spec: DatasetSpec
    path: Path
    manifest: dict[str, tuple[int, str]]

    @property
    def files(self) -> int:
        return len(self.manifest)

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.manifest.values())

    @property
    def name(self) -> str:
        return self.spec.name


def file_sizes(spec: DatasetSpec) -> np.ndarray:
    if spec.sizes == "fixed":
        return np.full(spec.files, spec.size, dtype=np.int64)
    if spec.sizes == "uniform":
        rng = np.random.Generator(np.random.PCG64([spec.seed, 0xD1CE]))
        return rng.integers(1, spec.size, size=spec.files, endpoint=True, dtype=np.int64)
    raise ValueError(f"dataset {spec.name}: unknown size distribution {spec.sizes!r} (use fixed or uniform)")


def relative_paths(spec: DatasetSpec) -> list[str]:
    width = max(4, len(str(spec.files - 1)))
    if spec.files <= FILES_PER_DIR:
        return [f"f{i:0{width}d}.bin" for i in range(spec.files)]
    dwidth = len(str((spec.files - 1) // FILES_PER_DIR))
    return [f"d{i // FILES_PER_DIR:0{dwidth}d}/f{i:0{width}d}.bin" for i in range(spec.files)]


def write_file(path: Path, size: int, seed: int, index: int) -> str:
    import xxhash

    bits = np.random.PCG64([seed, index])
    digest = xxhash.xxh3_128()
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, BLOCK)
            block = bits.random_raw((n + 7) // 8).tobytes()[:n]
            f.write(block)
            digest.update(block)
            left -= n
    return digest.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """xxh3-128 of a file's bytes (the digest the manifests record)."""
    import xxhash

    digest = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def manifest_path(root: Path, spec: DatasetSpec) -> Path:
    return root / f"{spec.name}.manifest.json"


def load_cached(root: Path, spec: DatasetSpec) -> Dataset | None:
    """The cached dataset when its manifest matches the spec and every file has its recorded size."""
    try:
        doc = json.loads(manifest_path(root, spec).read_text())
    except (OSError, ValueError):
        return None
    if doc.get("spec") != asdict(spec) or doc.get("generator") != GENERATOR_VERSION:
        return None
    manifest = {p: (int(s), d) for p, s, d in doc["files"]}
    path = root / spec.name
    try:
        on_disk = {
            os.path.relpath(os.path.join(d, n), path): os.stat(os.path.join(d, n)).st_size
            for d, _, names in os.walk(path)
            for n in names
        }
    except OSError:
        return None
    if on_disk != {p: s for p, (s, _) in manifest.items()}:
        return None
    # Sizes catch truncation and strays; one digest catches a cache overwritten in place.
    first = next(iter(manifest))
    if file_digest(path / first) != manifest[first][1]:
        return None
    return Dataset(spec, path, manifest)


def ensure(spec: DatasetSpec | str, root: Path = DEFAULT_CACHE, log=None, sizes: list[int] | None = None) -> Dataset:
    """The dataset under `root`, generated (or regenerated) when missing or damaged. `sizes`: the
    files' sizes when they are drawn elsewhere (benchmarks/generalize.py), else the spec's."""
    if isinstance(spec, str):
        if spec not in DATASETS:
            raise ValueError(f"unknown dataset {spec!r}: choose from {', '.join(DATASETS)}")
        spec = DATASETS[spec]
    root = Path(root)
    found = load_cached(root, spec)
    if found is not None:
        return found
    make_traversable(root)
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    sizes_list = list(sizes) if sizes is not None else file_sizes(spec).tolist()
    paths = relative_paths(spec)
    say(f"datasets: generating {spec.name} ({len(sizes_list)} files, {sum(sizes_list) / MIB:.0f} MiB) in {root}")
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=root))
    manifest: dict[str, tuple[int, str]] = {}
    try:
        for index, (rel, size) in enumerate(zip(paths, sizes_list)):
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            manifest[rel] = (size, write_file(target, size, spec.seed, index))
        # Readable by the benchmark's unprivileged sshd user: downloads read the cache directly.
        for d, _, names in os.walk(tmp):
            os.chmod(d, 0o755)
            for n in names:
                os.chmod(os.path.join(d, n), 0o644)
        final = root / spec.name
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    doc = {"spec": asdict(spec), "generator": GENERATOR_VERSION, "files": [[p, s, d] for p, (s, d) in manifest.items()]}
    tmp_manifest = manifest_path(root, spec).with_suffix(".tmp")
    tmp_manifest.write_text(json.dumps(doc))
    os.replace(tmp_manifest, manifest_path(root, spec))
    say(f"datasets: {spec.name} ready in {time.monotonic() - t0:.1f}s")
    return Dataset(spec, final, manifest)


def make_traversable(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for p in [root, *root.parents]:
        if p == Path("/"):
            break
        mode = p.stat().st_mode
        if mode & 0o005 != 0o005:
            os.chmod(p, mode | 0o005)


def resolve(names: list[str], files: int | None = None, scale: float = 1.0) -> list[DatasetSpec]:
    """Dataset names -> specs, optionally cut to `files` files each (for development runs)
    or scaled to `scale` x their bytes (quick runs)."""
    if not 0 < scale <= 1:
        raise ValueError(f"--scale must be in (0, 1], got {scale:g}")
    specs = []
    for name in names:
        if name not in DATASETS:
            raise ValueError(f"unknown dataset {name!r}: choose from {', '.join(DATASETS)}")
        spec = DATASETS[name].scaled(scale)
        specs.append(spec.with_files(files) if files and files < spec.files else spec)
    return specs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.datasets", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(DATASETS), help=f"any of {', '.join(DATASETS)} (default all)")
    ap.add_argument("--files", type=int, help="use only this many files of each dataset (a smaller variant)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args(argv)
    try:
        specs = resolve(args.names, args.files)
    except ValueError as exc:
        print(f"benchmarks.datasets: {exc}", file=sys.stderr)
        return 2
    for spec in specs:
        ds = ensure(spec, args.cache)
        print(json.dumps({"name": ds.name, "path": str(ds.path), "files": ds.files, "bytes": ds.bytes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
