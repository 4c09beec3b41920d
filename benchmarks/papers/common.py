"""What every effect of `make papers` shares: cases, records, the testbeds, one copy.

An effect is a module of this package (`e1_pp_rtt.py` ... `e8_loss.py`) with

    NUMBER: int                 # 1..8, its place in docs/papers.md
    TITLE: str                  # one line
    PAPER: str                  # authors, title, year of the paper it reproduces
    CLAIM: str                  # the paper's claim and the figure/table it is in, in our words
    def cases(quick: bool) -> list[Case]
    def measure(case: Case, ctx: Context) -> dict      # one repetition of one case, JSON-able
    def render(records: list[Record], charts: Path) -> Section

A case is the unit of resumability: the runner measures each (case, repetition)
once per commit and keeps the result in benchmarks/results/papers/records.json,
so a budgeted run continues where the last one stopped. `render` must work on
whatever subset of records exists (a partial run still renders, saying what is
missing) and derives its verdict from the figures, never from a constant.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "papers"
CHARTS = REPO / "docs" / "papers"

REPRODUCED = "reproduced"
IN_PART = "reproduced in part"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURED = "not measured yet"


@dataclass(frozen=True)
class Case:
    """One measurement point of an effect. `profile` is the emulated link it runs on
    ("lan", "wan50", "wan100"; None when the case builds its own setup); `loss` is the
    random loss probability the link carries for it (0 for none)."""

    effect: str
    id: str
    profile: str | None
    params: dict[str, Any] = field(default_factory=dict)
    loss: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.effect}/{self.id}"


@dataclass
class Record:
    """One repetition of one case as measured."""

    effect: str
    case: str
    rep: int
    params: dict[str, Any]
    result: dict[str, Any]
    commit: str
    date: str
    machine: dict[str, Any]

    @staticmethod
    def from_json(d: dict[str, Any]) -> Record:
        return Record(**{k: d[k] for k in ("effect", "case", "rep", "params", "result", "commit", "date", "machine")})


@dataclass
class Section:
    """What an effect contributes to docs/papers.md."""

    table: str  # markdown
    verdict: str  # REPRODUCED / IN_PART / NOT_REPRODUCED / NOT_MEASURED
    why: str  # the measured reason for the verdict, one paragraph
    charts: list[str] = field(default_factory=list)  # file names under docs/papers/
    notes: str = ""  # further markdown (the model beside the measurement, the tuner's choice, ...)


def median(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def by_case(records: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(r.case, []).append(r)
    return out


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 10 else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"
        return str(v)

    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def pyplot():
    """matplotlib with a file backend, imported only when a chart is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class Context:
    """Testbeds kept up across cases (a link costs seconds to build), datasets, one CLI copy."""

    def __init__(self, log: Callable[[str], None] = print) -> None:
        self.log = log
        self._beds: dict[str, Any] = {}
        self._loss: dict[str, float] = {}

    # -- links ----------------------------------------------------------------
    def bed(self, profile: str, loss: float = 0.0, offload: bool = True):
        """The testbed of `profile`, up, its link carrying `loss` random loss per packet.
        offload=False moves one wire packet per emulator step, so a loss hits one packet
        rather than a whole TSO frame: loss-bound TCP is measured that way."""
        from benchmarks.contenders.testbed import Testbed

        name = profile if offload else f"{profile}/no-offload"
        bed = self._beds.get(name)
        if bed is None:
            for other in list(self._beds):  # one emulated link at a time: they share the 2 cores
                self.close(other)
            saved = os.environ.get("AT_LINK_OFFLOAD")
            os.environ["AT_LINK_OFFLOAD"] = "1" if offload else "0"
            try:
                bed = Testbed(profile).up()
            finally:
                if saved is None:
                    os.environ.pop("AT_LINK_OFFLOAD", None)
                else:
                    os.environ["AT_LINK_OFFLOAD"] = saved
            self._beds[name] = bed
            self._loss[name] = 0.0
        if self._loss[name] != loss:
            bed.link.set(loss=loss)
            self._loss[name] = loss
        return bed

    def close(self, profile: str | None = None) -> None:
        for name in [profile] if profile else list(self._beds):
            bed = self._beds.pop(name, None)
            self._loss.pop(name, None)
            if bed is not None:
                bed.down()

    # -- data -----------------------------------------------------------------
    @staticmethod
    def dataset(name: str, files: int, size: int, sizes: str = "fixed", seed: int = 29):
        """A cached dataset of `files` files of `size` bytes (sizes="uniform": 1..size)."""
        from benchmarks import datasets

        spec = datasets.DatasetSpec(name, files, size, sizes, seed)
        return datasets.ensure(spec)

    # -- one copy ---------------------------------------------------------------
    def copy(
        self,
        bed,
        dataset,
        flags: list[str],
        direction: str = "upload",
        timeout: float = 300.0,
        store: str | None = None,
        check: bool = True,
    ) -> dict[str, Any]:
        """Runs `airflow-transfer copy` once in the testbed; returns seconds, Mbit/s of payload,
        client and server CPU, the summary, and whether every byte landed as in the dataset.
        A fresh journal key, --no-skip and --restart: each run is a first attempt."""
        from benchmarks.contenders.airflow_transfer import copy_argv, sftp_url
        from benchmarks.contenders.base import clear, landed_bytes, verify_tree

        remote = bed.fresh_remote_dir(f"papers-{uuid.uuid4().hex[:8]}")
        if direction == "upload":
            src, dst, landing = str(dataset.path), sftp_url(bed, remote), remote
        else:
            landing = bed.fresh_local_dir(f"papers-{uuid.uuid4().hex[:8]}")
            src, dst = sftp_url(bed, dataset.path), str(landing)
        argv = copy_argv(bed, src, dst, [*flags, "--store", store or f"sqlite:///{bed.work}/papers.db"], "papers")
        bed.wait_server_idle()
        server0 = bed.server_cpu()
        done = bed.run(argv, timeout=timeout)
        bed.wait_server_idle()
        summary: dict[str, Any] = {}
        try:
            summary = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
        ok = done.returncode == 0 and not done.timed_out and bool(summary) and not summary.get("failed")
        landed = verify_tree(dataset, landing, content=True) if ok and check else None
        out = {
            "ok": ok and landed is not False,
            "returncode": done.returncode,
            "timed_out": done.timed_out,
            "seconds": round(done.seconds, 3),
            # the dataset over the time taken means something only when all of it arrived
            "mbit": round(dataset.bytes * 8 / done.seconds / 1e6, 2) if ok and done.seconds > 0 else None,
            "landed_bytes": landed_bytes(landing),
            "client_cpu_s": round(done.cpu_s, 2),
            "server_cpu_s": round(bed.server_cpu() - server0, 2),
            "verified_landing": landed,
            "summary": _slim(summary),
            "error": None if ok else done.tail(400),
        }
        clear(landing)
        shutil.rmtree(landing, ignore_errors=True)
        return out


def _slim(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without what a record does not need (file lists)."""
    keep = (
        "files",
        "bytes",
        "seconds",
        "throughput_mbit",
        "algorithm",
        "verify",
        "chunks",
        "tuning",
        "protocol_switches",
    )
    return {k: summary[k] for k in keep if k in summary}


def machine() -> dict[str, Any]:
    """What the runs ran on: CPU model, cores, memory, kernel, and a quick speed reading."""
    import hashlib
    import platform

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = int(
        next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    )
    t0 = time.perf_counter()
    n = 0
    for i in range(2_000_000):
        n += i
    loop_ms = (time.perf_counter() - t0) * 1000
    block = os.urandom(64 << 20)
    t0 = time.perf_counter()
    hashlib.sha256(block).digest()
    sha_ms = (time.perf_counter() - t0) * 1000
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "mem_gib": round(mem_kib / (1 << 20)),
        "kernel": platform.release(),
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "python_loop_ms": round(loop_ms),
        "sha256_64mib_ms": round(sha_ms),
        "python": sys.version.split()[0],
    }
