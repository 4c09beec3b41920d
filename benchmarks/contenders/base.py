"""What every contender is: a name, an availability check, a prepare step, a measured run.

    c = SomeContender(...)
    ok = c.available()            # truthy, or falsy with ok.reason
    c.prepare(testbed)            # once per testbed: config files, keys
    seconds = c.run(local, remote)
    c.usage                       # client CPU seconds and peak RSS of that run

Direction: an upload contender copies `dataset_dir` (local, in `src`) into
`remote_dir` (empty, on the server in `dst`). A download contender copies
`remote_dir` (the dataset, as the server sees it) into `dataset_dir` (empty,
local). `landing()` names the directory the files end up in, which the runner
checks file by file against the dataset's manifest (`verify_tree`) and clears
before the next run.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from benchmarks.contenders.testbed import Measured, Testbed
from benchmarks.datasets import Dataset, file_digest


class ContenderFailed(RuntimeError):
    """A run that did not move the dataset (non-zero exit, time limit, wrong files)."""


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


AVAILABLE = Availability(True)


def missing(reason: str) -> Availability:
    return Availability(False, reason)


@dataclass
class Usage:
    cpu_s: float  # client CPU seconds (the server's are measured by the runner)
    peak_rss_mb: float


class Contender:
    """Base class: subclasses set `name`, `description`, and implement `command()` or `run()`."""

    name: str = ""
    description: str = ""  # one line for the report: what it is and how it is configured
    direction: str = "upload"  # or "download"
    timeout: float = 600.0  # seconds per run; the runner may lower it
    # A row that explains another (a second client, a non-default mode, a different worker count),
    # not one of the tools issue 4 compares: in `all` and the quick run, left out of the `wide` group.
    diagnostic: bool = False

    def __init__(self) -> None:
        self.bed: Testbed | None = None
        self.usage = Usage(0.0, 0.0)
        self.last: Measured | None = None

    def available(self) -> Availability:
        return AVAILABLE

    def prepare(self, bed: Testbed) -> None:
        self.bed = bed

    def landing(self, dataset_dir: Path, remote_dir: Path) -> Path:
        """Where the copied files end up."""
        return remote_dir if self.direction == "upload" else dataset_dir

    def command(self, dataset_dir: Path, remote_dir: Path) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        return None

    def run(self, dataset_dir: Path, remote_dir: Path) -> float:
        """Moves the dataset once; returns wall seconds; raises ContenderFailed."""
        done = self.measure(self.command(dataset_dir, remote_dir))
        return done.seconds

    def measure(self, argv: list[str]) -> Measured:
        """Runs `argv` in src, records usage, raises ContenderFailed unless it exited 0 in time."""
        bed = self._bed()
        done = bed.run(argv, timeout=self.timeout, env=self.env())
        self.last = done
        self.usage = Usage(done.cpu_s, done.peak_rss_mb)
        if done.timed_out:
            raise ContenderFailed(f"did not finish within {self.timeout:.0f} s (killed)")
        if done.returncode != 0:
            raise ContenderFailed(f"exited {done.returncode}: {one_line(done.tail())}")
        return done

    def _bed(self) -> Testbed:
        if self.bed is None:
            raise RuntimeError(f"contender {self.name}: prepare(testbed) was not called")
        return self.bed

    def __repr__(self) -> str:
        return f"<contender {self.name}>"


def one_line(text: str) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())[-400:]


def verify_tree(dataset: Dataset, landing: Path, content: bool = True) -> bool:
    """Checks that `landing` holds exactly the dataset's files, each with its size (and digest).

    Returns True when byte content was compared (xxh3-128 against the
    manifest), False when only names and sizes were. Raises ContenderFailed
    naming the first differences.
    """
    found: dict[str, int] = {}
    for d, _, names in os.walk(landing):
        for n in names:
            p = os.path.join(d, n)
            found[os.path.relpath(p, landing)] = os.lstat(p).st_size
    want = {p: s for p, (s, _) in dataset.manifest.items()}
    if found != want:
        absent = sorted(want.keys() - found.keys())
        extra = sorted(found.keys() - want.keys())
        wrong = sorted(p for p in want.keys() & found.keys() if want[p] != found[p])
        parts = []
        if absent:
            parts.append(f"{len(absent)} missing (e.g. {absent[0]})")
        if extra:
            parts.append(f"{len(extra)} unexpected (e.g. {extra[0]})")
        if wrong:
            parts.append(f"{len(wrong)} with the wrong size (e.g. {wrong[0]}: {found[wrong[0]]} != {want[wrong[0]]})")
        raise ContenderFailed(f"destination {landing} differs from {dataset.name}: {'; '.join(parts)}")
    if not content:
        return False
    bad = [p for p, (_, digest) in dataset.manifest.items() if file_digest(landing / p) != digest]
    if bad:
        raise ContenderFailed(f"destination {landing}: {len(bad)} files differ in content (e.g. {bad[0]})")
    return True


def landed_bytes(landing: Path) -> int:
    """Bytes present under `landing` (for a run killed at its time limit)."""
    total = 0
    for d, _, names in os.walk(landing):
        for n in names:
            try:
                total += os.lstat(os.path.join(d, n)).st_size
            except OSError:
                pass
    return total


def clear(path: Path) -> None:
    """Empties a destination directory, keeping the directory itself (and its owner)."""
    if not path.exists():
        return
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
