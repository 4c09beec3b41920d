"""Generalisation: `--algorithm auto` on drawn links and datasets nobody tuned on.

    python -m benchmarks.generalize                          # 6 pairs, full grid, ~12 s of data each
    python -m benchmarks.generalize --dry-run                # the draw and the plan; moves nothing
    python -m benchmarks.generalize --pairs 1 --only 0 --grid quick --seconds 2 --out /tmp/gen-smoke

Every other benchmark runs on the three fixed link profiles (wan50, wan100,
lan) and the five fixed datasets, the very conditions `auto` was developed
against. This one draws link/dataset pairs from a seeded random generator:

- RTT log-uniform in 5-200 ms, rate log-uniform in 100-1000 Mbit/s, the
  router's drop-tail queue uniform in 0.5-2 bandwidth-delay products;
- a file-size distribution, the four taken in turn (in an order the seed
  shuffles), so four or more pairs see every one: `uniform-small` (16-256 KiB
  uniform), `lognormal` (median 256 KiB, sigma 2, clipped to 1 KiB-256 MiB),
  `bimodal` (80 % of files 32-128 KiB, 20 % 32-128 MiB), `few-large` (4-8
  files drawn from 64-256 MiB, then scaled together to the target total);
- files are drawn until the set holds about rate x `--seconds` / 8 bytes (the
  last file cut to fit), at most 20,000 files.

Per pair one emulated link (benchmarks/wan) and sshd come up, and each run
uploads the pair's dataset into a fresh, empty directory:

- a grid of `--algorithm fixed` settings (the best is the pair's *oracle*);
- `--algorithm auto` against a new, empty SQLite tuning store (*auto cold*),
  then the same command on that store again (*auto second*): what the first
  run recorded is there for the second to read;
- `rsync -a -e ssh`, the tool users reach for first.

Verification stays at the CLI's default; every destination is then checked
file by file against the dataset's manifest. Writes generalize.json (every
run) and generalize.md (the ratios) into `--out`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.contenders.airflow_transfer import AirflowTransfer
from benchmarks.contenders.base import Contender, ContenderFailed, clear, landed_bytes, one_line, verify_tree
from benchmarks.contenders.openssh import Rsync
from benchmarks.contenders.testbed import WORK_ROOT, Testbed
from benchmarks.datasets import (
    DEFAULT_CACHE,
    KIB,
    MIB,
    Dataset,
    DatasetSpec,
    ensure,
)
from benchmarks.wan.link import MIN_QUEUE_BYTES, EmulatedLink, bdp_bytes

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
CACHE = DEFAULT_CACHE / "generalize"

DEFAULT_SEED = 20261125
DEFAULT_PAIRS = 6
DEFAULT_SECONDS = 12.0
MAX_FILES = 20_000
RTT_MS = (5.0, 200.0)
RATE_MBIT = (100.0, 1000.0)
QUEUE_BDP = (0.5, 2.0)
SSH_WINDOW = 2 * MIB  # OpenSSH's channel window: one connection moves at most this per round trip
DISTRIBUTIONS = ("uniform-small", "lognormal", "bimodal", "few-large")

AUTO_COLD, AUTO_SECOND, RSYNC, GRID = "auto-cold", "auto-second", "rsync", "grid"
RATIOS = (
    ("auto_cold/oracle", AUTO_COLD, "oracle"),
    ("auto_second/oracle", AUTO_SECOND, "oracle"),
    ("auto_cold/rsync", AUTO_COLD, RSYNC),
    ("auto_second/rsync", AUTO_SECOND, RSYNC),
)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- the draw ---------------------------------------------------------------------
@dataclass(frozen=True)
class Pair:
    """One drawn link and dataset shape."""

    index: int
    rtt_ms: float
    rate_mbit: float
    queue_bdp: float  # the router queue in bandwidth-delay products
    distribution: str
    data_seed: int  # file sizes and file content

    @property
    def bdp_bytes(self) -> int:
        return bdp_bytes(self.rtt_ms, self.rate_mbit)

    @property
    def queue_bytes(self) -> int:
        """The emulator's queue: `queue_bdp` BDPs, but never under the four TSO frames it needs (docs/testbed.md)."""
        return max(MIN_QUEUE_BYTES, round(self.queue_bdp * self.bdp_bytes))

    @property
    def over_ssh_window(self) -> bool:
        """More than one SSH channel window in flight per round trip: rate x RTT / 8 > 2 MiB."""
        return self.bdp_bytes > SSH_WINDOW

    def link(self) -> str:
        return f"{self.rtt_ms:g} ms, {self.rate_mbit:g} Mbit/s, queue {self.queue_bdp:g} BDP"


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def draw(n: int, seed: int = DEFAULT_SEED) -> list[Pair]:
    """`n` pairs from `seed`; the distributions taken in turn, in an order the seed shuffles."""
    rng = random.Random(seed)
    order = list(DISTRIBUTIONS)
    rng.shuffle(order)
    pairs = []
    for i in range(n):
        rtt = round(_log_uniform(rng, *RTT_MS), 1)
        rate = float(round(_log_uniform(rng, *RATE_MBIT)))
        queue = round(rng.uniform(*QUEUE_BDP), 2)
        pairs.append(Pair(i, rtt, rate, queue, order[i % len(order)], rng.getrandbits(32)))
    return pairs


def target_bytes(rate_mbit: float, seconds: float) -> int:
    """What the link carries in `seconds` at its rate."""
    return int(rate_mbit * 1e6 / 8 * seconds)


def _uniform_small(rng: random.Random) -> int:
    return rng.randint(16 * KIB, 256 * KIB)


def _lognormal(rng: random.Random) -> int:
    return int(min(256 * MIB, max(KIB, rng.lognormvariate(math.log(256 * KIB), 2.0))))


def _bimodal(rng: random.Random) -> int:
    return rng.randint(32 * MIB, 128 * MIB) if rng.random() < 0.2 else rng.randint(32 * KIB, 128 * KIB)


_DRAW_ONE = {
    "uniform-small": (_uniform_small, 16 * KIB),
    "lognormal": (_lognormal, KIB),
    "bimodal": (_bimodal, 32 * KIB),
}


def file_sizes(distribution: str, target: int, seed: int, max_files: int = MAX_FILES) -> tuple[list[int], bool]:
    """Sizes of a dataset of about `target` bytes drawn from `distribution`, and whether
    `max_files` stopped the draw short of the target."""
    rng = random.Random(seed)
    if distribution == "few-large":
        raw = [rng.uniform(64 * MIB, 256 * MIB) for _ in range(rng.randint(4, 8))]
        scale = target / sum(raw)  # the count and the 1:4 spread kept, the total fitted
        return [max(KIB, round(s * scale)) for s in raw], False
    if distribution not in _DRAW_ONE:
        raise ValueError(f"unknown size distribution {distribution!r}: choose from {', '.join(DISTRIBUTIONS)}")
    one, floor = _DRAW_ONE[distribution]
    sizes: list[int] = []
    total = 0
    while total < target and len(sizes) < max_files:
        size = max(floor, min(one(rng), target - total))  # the last file cut to fit
        sizes.append(size)
        total += size
    return sizes, total < target


def dataset_spec(pair: Pair, sizes: list[int]) -> DatasetSpec:
    """A name that changes whenever the sizes do, so a cached set is reused only for the same draw."""
    digest = hashlib.sha256(json.dumps(sizes).encode()).hexdigest()[:10]
    return DatasetSpec(
        f"gen-{pair.distribution}-{pair.data_seed:08x}-{digest}", len(sizes), max(sizes), "drawn", pair.data_seed
    )


def describe_sizes(sizes: list[int], capped: bool) -> dict[str, Any]:
    return {
        "files": len(sizes),
        "bytes": sum(sizes),
        "min_file": min(sizes),
        "median_file": int(statistics.median(sizes)),
        "max_file": max(sizes),
        "capped_at_max_files": capped,
    }


def ensure_dataset(pair: Pair, sizes: list[int], root: Path = CACHE) -> Dataset:
    """The pair's files under `root`, generated unless an intact copy is there (benchmarks/datasets.py's
    generator and cache check, with the sizes this draw gave)."""
    return ensure(dataset_spec(pair, sizes), root, log=say, sizes=sizes)


# -- the grid -----------------------------------------------------------------------
# pp in {1, 8, 32} x cc in {1, 4, 8, 16, 32} x p in {1, 4} is 30 settings; pruned to 20:
# - p=1: every pp x cc except pp=1 cc=1 (one file operation at a time on one connection:
#   minutes per thousand files at these RTTs, never anyone's best) -> 14;
# - p=4 (4 connections per file of 8 MiB or more): pp 8 and 32 with cc 1, 4, 8, so at most
#   32 connections, as many as the widest p=1 setting -> 6.
FULL_GRID: tuple[tuple[int, int, int], ...] = (
    *((pp, 1, cc) for pp in (1, 8, 32) for cc in (1, 4, 8, 16, 32) if (pp, cc) != (1, 1)),
    *((pp, 4, cc) for pp in (8, 32) for cc in (1, 4, 8)),
)
QUICK_GRID: tuple[tuple[int, int, int], ...] = ((1, 1, 4), (8, 1, 8), (32, 1, 16), (8, 4, 4))
GRIDS = {"full": FULL_GRID, "quick": QUICK_GRID}


def grid(name: str) -> list[tuple[int, int, int]]:
    """The (pp, p, cc) settings of grid `name`."""
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}: choose from {', '.join(GRIDS)}")
    return list(GRIDS[name])


def setting_name(pp: int, p: int, cc: int) -> str:
    return f"fixed pp={pp} p={p} cc={cc}"


# -- contenders ----------------------------------------------------------------------
class StoreCLI(AirflowTransfer):
    """`airflow-transfer copy` against a tuning store of our choosing, with no profiling first:
    the cold `auto` run must meet a link its store knows nothing about."""

    def __init__(self, name: str, kind: str, flags: list[str], store: Path) -> None:
        super().__init__(name, f"`airflow-transfer copy {' '.join(flags)}`", flags)
        self.kind = kind
        self.store = store

    def prepare(self, bed: Testbed) -> None:
        Contender.prepare(self, bed)

    def _flags(self) -> list[str]:
        return [*self.flags, "--store", f"sqlite:///{self.store}"]


class DrawnTestbed(Testbed):
    """The benchmark test bed on a drawn link instead of a named profile: same sshd, same
    measured runs, the emulator's queue set to the pair's figure."""

    def __init__(self, pair: Pair, work_root: Path = WORK_ROOT) -> None:
        self.profile = f"pair{pair.index}"
        self.rtt_ms, self.rate_mbit = pair.rtt_ms, pair.rate_mbit
        work_root.mkdir(parents=True, exist_ok=True)
        for p in (work_root, work_root.parent):
            os.chmod(p, 0o755)
        self.work = Path(tempfile.mkdtemp(prefix=f"gen-{self.profile}-", dir=work_root))
        os.chmod(self.work, 0o755)
        self.home = self.work / "home"
        self.home.mkdir()
        self.link = EmulatedLink(
            pair.rtt_ms, pair.rate_mbit, queue_bytes=pair.queue_bytes, name=f"gen-{os.getpid()}-{pair.index}"
        )
        self.sshd = None


def plan_runs(
    settings: list[tuple[int, int, int]], reps: int, skip_grid: bool = False
) -> list[tuple[int, str, str, dict[str, int] | None]]:
    """(rep, kind, name, setting) in run order: per repetition auto cold, auto second (on the
    store the cold run just filled), rsync, then the grid (or the settings re-measured for the
    oracle), so drift spreads over all of them."""
    out: list[tuple[int, str, str, dict[str, int] | None]] = []
    for rep in range(1, reps + 1):
        out += [
            (rep, AUTO_COLD, "auto cold", None),
            (rep, AUTO_SECOND, "auto second", None),
            (rep, RSYNC, "rsync", None),
        ]
        if not skip_grid:
            out += [(rep, GRID, setting_name(*s), {"pp": s[0], "p": s[1], "cc": s[2]}) for s in settings]
    return out


def oracle_candidates(grid_runs: list[dict[str, Any]], top: int) -> list[tuple[int, int, int]]:
    """The `top` settings of an earlier grid by their rate there: the ones worth measuring again
    with as many repetitions as auto. The best of 20 single runs is biased upwards by each run's
    noise (on one pair the same setting measured 475 and 366 Mbit/s); the candidates' medians
    are not."""
    by_setting: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for r in grid_runs:
        st = r.get("setting") or {}
        by_setting.setdefault((st["pp"], st["p"], st["cc"]), []).append(r)
    valued = [(v["mbit"], k) for k, rs in by_setting.items() if (v := contender_value(rs)) and not v["stopped"]]
    return [k for _, k in sorted(valued, reverse=True)[:top]]


def _summary_of(stdout: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return doc if isinstance(doc, dict) else None


def tuning_fields(summary: dict[str, Any] | None) -> dict[str, Any]:
    """What a run's JSON summary says about its tuning and the knobs its chunks ran with."""
    if not summary:
        return {}
    tuning = summary.get("tuning") or {}
    chunks = summary.get("chunks") or []
    chosen: list[str] = []
    for c in chunks:
        knobs = f"pp={c.get('pp')} p={c.get('p')} cc={c.get('cc')}"
        if not chosen or chosen[-1] != knobs:
            chosen.append(knobs)
    keep = ("rtt_ms", "bandwidth_mbit", "bdp_bytes", "streams", "p", "cc", "pp_level", "library_id", "link")
    return {
        "job_seconds": summary.get("seconds"),
        "throughput_mbit": summary.get("throughput_mbit"),
        "tuning_source": tuning.get("source"),
        "tuning_notes": tuning.get("notes", []),
        "tuning": {k: tuning[k] for k in keep if k in tuning},
        "chosen": " -> ".join(chosen),
        "chunks": [
            {k: c.get(k) for k in ("id", "files", "bytes", "pp", "p", "cc", "seconds", "throughput_mbit")}
            for c in chunks
        ],
        "verify_mode": (summary.get("verify") or {}).get("mode"),
        "store": summary.get("store"),
    }


def one_run(bed: Testbed, contender: Contender, dataset: Dataset, content_check: bool) -> dict[str, Any]:
    """Uploads `dataset` once into a fresh directory; the record of it, ok or not."""
    remote = bed.fresh_remote_dir("upload")
    os.sync()  # the last run's dirty pages are not written back during this one
    record: dict[str, Any] = {"ok": False, "load_avg_1m": round(os.getloadavg()[0], 2)}
    server0 = bed.server_cpu()
    contender.last = None
    try:
        seconds = contender.run(dataset.path, remote)
        record.update(seconds=round(seconds, 3), mbit=round(dataset.bytes * 8 / seconds / 1e6, 2))
        bed.wait_server_idle()
        record.update(verified=verify_tree(dataset, remote, content=content_check), ok=True)
    except ContenderFailed as exc:
        record["error"] = str(exc)
        last = contender.last
        if last is not None and last.timed_out:
            record.update(timed_out=True, seconds=round(last.seconds, 3))
            record["partial_mbit"] = round(landed_bytes(remote) * 8 / last.seconds / 1e6, 2) if last.seconds else 0.0
    except Exception as exc:  # noqa: BLE001 - any error of one run is that run's result, the rest still run
        record["error"] = f"{type(exc).__name__}: {one_line(str(exc))}"
    finally:
        bed.wait_server_idle()
        last = contender.last
        record["exit_status"] = last.returncode if last is not None else None
        record["client_cpu_s"] = round(contender.usage.cpu_s, 2)
        record["server_cpu_s"] = round(bed.server_cpu() - server0, 2)
        if last is not None and isinstance(contender, AirflowTransfer):
            record.update(tuning_fields(_summary_of(last.stdout)))
        clear(remote)
    return record


# -- aggregation -----------------------------------------------------------------------
def contender_value(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One figure for a contender's runs: the median over finished runs; when none finished but
    some were stopped at the time limit, the median rate they had reached (`stopped`)."""
    ok = [r["mbit"] for r in runs if r.get("ok")]
    if ok:
        return {"mbit": round(statistics.median(ok), 2), "stopped": False, "runs": len(ok)}
    partial = [r.get("partial_mbit", 0.0) for r in runs if r.get("timed_out")]
    if partial:
        return {"mbit": round(statistics.median(partial), 2), "stopped": True, "runs": len(partial)}
    return None


def pair_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Oracle, auto cold/second and rsync of one pair's runs, and the four ratios."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_name.setdefault(r["contender"], []).append(r)
    values: dict[str, dict[str, Any] | None] = {}
    grid_values = []
    # Where settings were measured again (--oracle-top), only those runs value the grid: the
    # earlier single runs found the candidates, the repetitions measure them.
    rechecked = any(r.get("recheck") for r in runs)
    for name, rs in by_name.items():
        if rechecked and rs[0]["kind"] == GRID:
            rs = [r for r in rs if r.get("recheck")]
            if not rs:
                continue
        value = contender_value(rs)
        if rs[0]["kind"] == GRID:
            if value is not None:
                grid_values.append({**value, "setting": name, **(rs[0].get("setting") or {})})
        else:
            values[rs[0]["kind"]] = value
    oracle = None
    if grid_values:  # finished runs beat stopped ones whatever their partial rate
        oracle = max(grid_values, key=lambda v: (not v["stopped"], v["mbit"]))
    values["oracle"] = oracle
    ratios: dict[str, dict[str, Any] | None] = {}
    for key, num, den in RATIOS:
        a, b = values.get(num), values.get(den)
        if a is None or b is None or not b["mbit"]:
            ratios[key] = None
        else:
            ratios[key] = {"ratio": round(a["mbit"] / b["mbit"], 3), "stopped": a["stopped"] or b["stopped"]}
    return {
        "oracle": oracle,
        "auto_cold": values.get(AUTO_COLD),
        "auto_second": values.get(AUTO_SECOND),
        "rsync": values.get(RSYNC),
        "ratios": ratios,
        "grid_finished": sum(1 for v in grid_values if not v["stopped"]),
        "grid_settings": len({r["contender"] for r in runs if r["kind"] == GRID}),
    }


def overall(summaries: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per ratio: the median over the pairs that have it, and the worst pair (the lowest)."""
    out: dict[str, Any] = {}
    for key, _, _ in RATIOS:
        have = [(i, s["ratios"][key]["ratio"]) for i, s in summaries.items() if s["ratios"].get(key)]
        if not have:
            out[key] = {"pairs": 0, "median": None, "worst": None}
            continue
        worst = min(have, key=lambda t: t[1])
        out[key] = {
            "pairs": len(have),
            "median": round(statistics.median(r for _, r in have), 3),
            "worst": {"pair": worst[0], "ratio": worst[1]},
            "below_1": sum(1 for _, r in have if r < 1),
        }
    return out


def is_failure(record: dict[str, Any]) -> bool:
    """A run that went wrong (an error, wrong files); one stopped at the time limit is a result."""
    return not record.get("ok") and not record.get("timed_out")


# -- output ------------------------------------------------------------------------------
def human(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", MIB), ("KiB", KIB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def fmt_value(v: dict[str, Any] | None) -> str:
    if v is None:
        return "failed"
    return f"{v['mbit']:.1f}" + (" (stopped)" if v["stopped"] else "")


def fmt_ratio(r: dict[str, Any] | None) -> str:
    """`0.84 (below)`, `1.12 (above)`, `1.00 (par)`: a loss is written out as plainly as a win."""
    if r is None:
        return "n/a"
    ratio = r["ratio"]
    word = "par" if round(ratio, 2) == 1.0 else "below" if ratio < 1 else "above"
    return f"{ratio:.2f} ({word}{', stopped run' if r['stopped'] else ''})"


def fmt_dataset(d: dict[str, Any]) -> str:
    cap = ", capped at 20,000 files" if d.get("capped_at_max_files") else ""
    return f"{d['distribution']}: {d['files']:,} files, {human(d['bytes'])}{cap}"


def pair_doc(pair: Pair, sizes: list[int], capped: bool) -> dict[str, Any]:
    return {
        "index": pair.index,
        "link": {
            "rtt_ms": pair.rtt_ms,
            "rate_mbit": pair.rate_mbit,
            "queue_bdp": pair.queue_bdp,
            "queue_bytes": pair.queue_bytes,
            "bdp_bytes": pair.bdp_bytes,
            "over_one_ssh_window_per_rtt": pair.over_ssh_window,
        },
        "dataset": {"distribution": pair.distribution, "seed": pair.data_seed, **describe_sizes(sizes, capped)},
        "runs": [],
    }


def pair_table(doc: dict[str, Any]) -> str:
    """The console table of one pair: every run, its rate and what the tuning said."""
    link, ds = doc["link"], doc["dataset"]
    lines = [
        f"pair {doc['index']}: {link['rtt_ms']:g} ms, {link['rate_mbit']:g} Mbit/s, queue {link['queue_bdp']:g} BDP "
        f"({human(link['queue_bytes'])}); over one SSH window per RTT: {'yes' if link['over_one_ssh_window_per_rtt'] else 'no'}; "
        f"{fmt_dataset(ds)}",
        "  %-26s %4s %9s %8s  %-8s %-40s %s" % ("run", "rep", "Mbit/s", "s", "status", "tuning.source", "chosen"),
    ]
    for r in doc["runs"]:
        status = "ok" if r.get("ok") else "stopped" if r.get("timed_out") else "FAILED"
        mbit = r.get("mbit", r.get("partial_mbit"))
        lines.append(
            "  %-26s %4d %9s %8s  %-8s %-40s %s"
            % (
                r["contender"],
                r["rep"],
                f"{mbit:.1f}" if mbit is not None else "-",
                f"{r['seconds']:.1f}" if r.get("seconds") is not None else "-",
                status,
                (r.get("tuning_source") or "-")[:40],
                r.get("chosen") or ("" if r.get("ok") else one_line(r.get("error", ""))[:80]),
            )
        )
    s = doc.get("summary")
    if s:
        oracle = s["oracle"]
        lines.append(
            f"  oracle {oracle['setting'] + ' ' + fmt_value(oracle) if oracle else 'n/a'}; "
            + "; ".join(f"{k} {fmt_ratio(s['ratios'][k])}" for k, _, _ in RATIOS)
        )
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    pairs = [p for p in result["pairs"] if p.get("summary")]
    lines = [
        "# Generalisation: `auto` on links and datasets nobody tuned on",
        "",
        f"- command: `python -m benchmarks.generalize {' '.join(result['argv'])}`",
        f"- date {result['date']}, commit `{result['commit'][:12]}`, {result['machine']}",
        f"- seed {result['seed']}, {result['pairs_drawn']} pair(s) drawn"
        + (f", only pair {result['only']} run" if result["only"] is not None else "")
        + f"; about {result['seconds']:g} s of data per pair at its link rate; {result['reps']} repetition(s)"
        + (" (medians)" if result["reps"] > 1 else ""),
        f"- grid `{result['grid']['name']}` ({len(result['grid']['settings'])} fixed settings)"
        + (" not run (`--skip-grid`): no oracle" if result["skip_grid"] else "")
        + (
            f" taken from an earlier run of the same draw (commit `{result['grid_from']['commit'][:12]}`, "
            f"{result['grid_from']['date']}): "
            + (
                f"auto, rsync and its {result['oracle_top']} best settings ran again, and the oracle is the best "
                "median of those"
                if result.get("oracle_top")
                else "only auto and rsync ran again"
            )
            if result.get("grid_from")
            else ""
        )
        + f"; runs stopped after {result['timeout_s']:g} s",
        "- ratios are Mbit/s over Mbit/s (payload bytes x 8 / wall time of the command); below 1 means auto was slower",
        "",
        "| pair | link | over 1 SSH window/RTT | dataset | oracle (fixed) | oracle Mbit/s | auto cold / oracle "
        "| auto second / oracle | rsync Mbit/s | auto cold / rsync | auto second / rsync |",
        "|---|---|---|---|---|---:|---|---|---:|---|---|",
    ]
    for p in pairs:
        s, link = p["summary"], p["link"]
        oracle = s["oracle"]
        lines.append(
            f"| {p['index']} | {link['rtt_ms']:g} ms, {link['rate_mbit']:g} Mbit/s, queue {link['queue_bdp']:g} BDP "
            f"| {'yes' if link['over_one_ssh_window_per_rtt'] else 'no'} | {fmt_dataset(p['dataset'])} "
            f"| {oracle['setting'].removeprefix('fixed ') if oracle else 'n/a'} | {fmt_value(oracle) if oracle else 'n/a'} "
            f"| {fmt_ratio(s['ratios']['auto_cold/oracle'])} | {fmt_ratio(s['ratios']['auto_second/oracle'])} "
            f"| {fmt_value(s['rsync'])} | {fmt_ratio(s['ratios']['auto_cold/rsync'])} "
            f"| {fmt_ratio(s['ratios']['auto_second/rsync'])} |"
        )
    lines += ["", "| ratio | pairs | median over pairs | worst pair | pairs below 1 |", "|---|---:|---:|---|---:|"]
    for key, _, _ in RATIOS:
        o = result["summary"].get(key) or {"pairs": 0}
        if not o["pairs"]:
            lines.append(f"| {key} | 0 | n/a | n/a | |")
            continue
        lines.append(
            f"| {key} | {o['pairs']} | {o['median']:.2f} | pair {o['worst']['pair']}: {o['worst']['ratio']:.2f} "
            f"| {o['below_1']} |"
        )
    lines += ["", "## Runs", ""]
    for p in result["pairs"]:
        lines += [f"**Pair {p['index']}** ({fmt_dataset(p['dataset'])})", ""]
        if p.get("error"):
            lines += [f"Test bed failed: {p['error']}", ""]
        lines += [
            "| run | rep | Mbit/s | seconds | exit | status | tuning.source | chosen pp/p/cc | tuning.notes |",
            "|---|---:|---:|---:|---:|---|---|---|---|",
        ]
        for r in p["runs"]:
            status = (
                "ok"
                if r.get("ok")
                else "stopped at the time limit"
                if r.get("timed_out")
                else "FAILED: " + one_line(r.get("error", ""))[:200]
            )
            mbit = r.get("mbit", r.get("partial_mbit"))
            secs = r.get("seconds")
            notes = "; ".join(r.get("tuning_notes") or [])
            exit_status = r.get("exit_status")
            lines.append(
                f"| {r['contender']} | {r['rep']} | {'-' if mbit is None else format(mbit, '.1f')} "
                f"| {'-' if secs is None else format(secs, '.1f')} "
                f"| {'-' if exit_status is None else exit_status} | {status.replace('|', '/')} "
                f"| {r.get('tuning_source') or '-'} | {r.get('chosen') or '-'} | {notes.replace('|', '/') or '-'} |"
            )
        lines.append("")
    return "\n".join(lines)


def write_results(out: Path, result: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("generalize.json", json.dumps(result, indent=1) + "\n"), ("generalize.md", markdown(result))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)


# -- main ----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.generalize", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pairs", type=int, default=DEFAULT_PAIRS, help=f"link/dataset pairs to draw (default {DEFAULT_PAIRS})"
    )
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"seed of the draw (default {DEFAULT_SEED})")
    ap.add_argument("--only", type=int, metavar="K", help="run only pair K (0-based) of the draw")
    ap.add_argument(
        "--seconds",
        type=float,
        default=DEFAULT_SECONDS,
        help=f"size each dataset to take about this long at its link rate (default {DEFAULT_SECONDS:g})",
    )
    ap.add_argument("--grid", choices=list(GRIDS), default="full", help="fixed settings to try: full (20) or quick (4)")
    ap.add_argument("--skip-grid", action="store_true", help="no fixed grid, so no oracle (development)")
    ap.add_argument(
        "--grid-from",
        type=Path,
        metavar="JSON",
        help="take the fixed grid's runs from an earlier generalize.json of the same draw instead of running "
        "them again (the file's commit and date are recorded; for re-measuring auto after a change to auto only)",
    )
    ap.add_argument(
        "--oracle-top",
        type=int,
        metavar="K",
        help="with --grid-from: measure the K best settings of that grid again in every repetition, "
        "interleaved with auto and rsync, and take the oracle from their medians",
    )
    ap.add_argument("--reps", type=int, default=1, help="repetitions (default 1; medians when more, interleaved)")
    ap.add_argument(
        "--timeout", type=float, help="stop a run after this many seconds (default: 10 x --seconds, at least 60)"
    )
    ap.add_argument(
        "--verify",
        choices=["hash", "size"],
        default="hash",
        help="check each destination by content digest (default) or by names and sizes only",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="results directory (default benchmarks/results)")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"dataset cache directory (default {CACHE})")
    ap.add_argument("--dry-run", action="store_true", help="print the draw and the plan, move nothing")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    if args.only is not None and not 0 <= args.only < args.pairs:
        ap.error(f"--only must be a pair index from 0 to {args.pairs - 1}")
    if args.seconds <= 0:
        ap.error("--seconds must be positive")
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if args.oracle_top is not None and (args.oracle_top < 1 or args.grid_from is None):
        ap.error("--oracle-top needs --grid-from and must be at least 1")
    if args.timeout is None:
        args.timeout = max(60.0, 10 * args.seconds)
    return args


def load_grid(path: Path, seed: int, seconds: float) -> dict[str, Any]:
    """The fixed-grid runs of an earlier results file of the same draw, by pair index."""
    try:
        prev = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"generalize: cannot read --grid-from {path}: {exc}") from exc
    if prev.get("seed") != seed or prev.get("seconds") != seconds:
        raise SystemExit(
            f"generalize: --grid-from {path} is a different draw (seed {prev.get('seed')}, "
            f"{prev.get('seconds')} s) from this one (seed {seed}, {seconds:g} s)"
        )
    runs = {p["index"]: [r for r in p.get("runs", []) if r.get("kind") == GRID] for p in prev.get("pairs", [])}
    source = {"file": str(path), "commit": prev.get("commit", ""), "date": prev.get("date", "")}
    return {"source": source, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pairs = draw(args.pairs, args.seed)
    chosen = [p for p in pairs if args.only is None or p.index == args.only]
    settings = grid(args.grid)
    reused = load_grid(args.grid_from, args.seed, args.seconds) if args.grid_from else None
    plan = plan_runs(settings, args.reps, args.skip_grid or reused is not None)
    drawn = {p.index: file_sizes(p.distribution, target_bytes(p.rate_mbit, args.seconds), p.data_seed) for p in pairs}

    print(f"generalize: seed {args.seed}, {args.pairs} pair(s), about {args.seconds:g} s of data per pair")
    for p in pairs:
        sizes, capped = drawn[p.index]
        d = describe_sizes(sizes, capped)
        mark = "" if p in chosen else "  (not run: --only)"
        print(
            f"  pair {p.index}: {p.link()} ({human(p.queue_bytes)}), BDP {human(p.bdp_bytes)}, over one SSH window "
            f"per RTT: {'yes' if p.over_ssh_window else 'no'}; {p.distribution}: {d['files']:,} files, "
            f"{human(d['bytes'])} (file {human(d['min_file'])} - {human(d['max_file'])}, median "
            f"{human(d['median_file'])}){', capped' if capped else ''}{mark}"
        )
    print(
        f"generalize: grid {args.grid!r}"
        + (
            " skipped"
            if args.skip_grid
            else f": {', '.join(setting_name(*s).removeprefix('fixed ') for s in settings)}"
        )
    )
    per_pair = len(plan) + (args.reps * args.oracle_top if args.oracle_top else 0)
    print(
        f"generalize: per pair {per_pair} runs ({args.reps} x: auto cold, auto second, rsync"
        + ("" if args.skip_grid or reused is not None else f", {len(settings)} fixed")
        + (f", the {args.oracle_top} best settings of the reused grid" if args.oracle_top else "")
        + f"), {per_pair * len(chosen)} in all; each stopped after {args.timeout:g} s"
    )
    if args.dry_run:
        return 0

    if os.geteuid() != 0:
        say("generalize: needs root (network namespaces, TUN devices): run it as root")
        return 2
    for c in (Rsync(), AirflowTransfer("probe", "", [])):
        avail = c.available()
        if not avail:
            say(f"generalize: cannot run: {avail.reason}")
            return 2
    from benchmarks.run import _compile_project, commit, host, machine

    _compile_project()
    datasets = {p.index: ensure_dataset(p, drawn[p.index][0], args.cache) for p in chosen}  # before any link is up
    result: dict[str, Any] = {
        "benchmark": "generalize",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "commit": commit(),
        "host": host(),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "seed": args.seed,
        "pairs_drawn": args.pairs,
        "only": args.only,
        "seconds": args.seconds,
        "reps": args.reps,
        "timeout_s": args.timeout,
        "verify": args.verify,
        "grid": {"name": args.grid, "settings": [{"pp": pp, "p": p, "cc": cc} for pp, p, cc in settings]},
        "skip_grid": args.skip_grid,
        "grid_from": None if reused is None else reused["source"],
        "oracle_top": args.oracle_top,
        "pairs": [],
        "summary": overall({}),
    }
    total = per_pair * len(chosen)
    done = 0
    t_start = time.monotonic()
    summaries: dict[int, dict[str, Any]] = {}
    for pair in chosen:
        pair_plan = plan
        if reused is not None and args.oracle_top:
            candidates = oracle_candidates(reused["runs"].get(pair.index, []), args.oracle_top)
            pair_plan = plan_runs(candidates, args.reps)
        doc = pair_doc(pair, *drawn[pair.index])
        doc["dataset"]["name"] = datasets[pair.index].name
        if reused is not None:
            doc["runs"].extend(
                dict(r, reused_from=reused["source"]["commit"]) for r in reused["runs"].get(pair.index, [])
            )
        result["pairs"].append(doc)
        dataset = datasets[pair.index]
        say(f"generalize: pair {pair.index}: bringing up the link ({pair.link()}) and sshd")
        bed = DrawnTestbed(pair)
        try:
            bed.up()
        except Exception as exc:  # noqa: BLE001 - a pair whose link does not come up is recorded, the others still run
            doc["error"] = f"{type(exc).__name__}: {one_line(str(exc))}"
            for rep, kind, name, setting in pair_plan:
                done += 1
                doc["runs"].append({"contender": name, "kind": kind, "rep": rep, "setting": setting, "ok": False})
                doc["runs"][-1]["error"] = f"test bed did not come up: {doc['error']}"
            say(f"generalize: pair {pair.index}: FAILED to bring up the test bed: {doc['error']}")
            write_results(args.out, result)
            continue
        try:
            rsync = Rsync()
            rsync.timeout = args.timeout
            rsync.prepare(bed)
            fixed_store = bed.work / "fixed-store.db"  # never read by auto: its cold store stays empty
            for rep, kind, name, setting in pair_plan:
                done += 1
                if kind == RSYNC:
                    contender: Contender = rsync
                elif kind == GRID:
                    assert setting is not None
                    knobs = ["--pp", str(setting["pp"]), "-p", str(setting["p"]), "-c", str(setting["cc"])]
                    contender = StoreCLI(name, kind, ["--algorithm", "fixed", *knobs], fixed_store)
                else:
                    contender = StoreCLI(name, kind, ["--algorithm", "auto"], bed.work / f"auto-store-rep{rep}.db")
                contender.timeout = args.timeout
                contender.prepare(bed)
                prefix = f"[{done}/{total} {time.monotonic() - t_start:5.0f}s] pair {pair.index} rep {rep} {name}"
                say(f"{prefix} ...")
                rec = {"contender": name, "kind": kind, "rep": rep, "setting": setting}
                if kind == GRID and reused is not None:
                    rec["recheck"] = True
                rec.update(one_run(bed, contender, dataset, args.verify == "hash"))
                doc["runs"].append(rec)
                tuning = f"; tuning: {rec['tuning_source']}" if rec.get("tuning_source") else ""
                tuning += f"; ran {rec['chosen']}" if rec.get("chosen") and kind != GRID else ""
                if rec["ok"]:
                    say(f"{prefix}: {rec['mbit']:.1f} Mbit/s in {rec['seconds']:.1f} s{tuning}")
                elif rec.get("timed_out"):
                    say(
                        f"{prefix}: stopped at {args.timeout:g} s, {rec.get('partial_mbit', 0.0):.1f} Mbit/s had landed"
                    )
                else:
                    say(f"{prefix}: FAILED: {rec.get('error')}")
                write_results(args.out, result)
        finally:
            bed.down()
        doc["summary"] = summaries[pair.index] = pair_summary(doc["runs"])
        result["summary"] = overall(summaries)
        print(pair_table(doc), flush=True)
        write_results(args.out, result)

    result["summary"] = overall(summaries)
    runs = [r for p in result["pairs"] for r in p["runs"]]
    result["failed_runs"] = sum(1 for r in runs if is_failure(r))
    result["stopped_runs"] = sum(1 for r in runs if r.get("timed_out"))
    result["finished"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_results(args.out, result)
    print("\nsummary over pairs (ratio of Mbit/s; below 1: auto slower):")
    for key, _, _ in RATIOS:
        o = result["summary"][key]
        if o["pairs"]:
            print(
                f"  {key:20s} median {o['median']:.2f} over {o['pairs']} pair(s); worst pair {o['worst']['pair']}: "
                f"{o['worst']['ratio']:.2f}; {o['below_1']} below 1"
            )
        else:
            print(f"  {key:20s} n/a (no pair has both figures)")
    print(
        f"generalize: {len(runs)} runs in {time.monotonic() - t_start:.0f} s, {result['failed_runs']} failed, "
        f"{result['stopped_runs']} stopped at the time limit; {args.out / 'generalize.json'}, {args.out / 'generalize.md'}"
    )
    if result["failed_runs"]:
        failed = sorted(
            {f"pair {p['index']} {r['contender']}" for p in result["pairs"] for r in p["runs"] if is_failure(r)}
        )
        say(f"generalize: {result['failed_runs']} runs FAILED (errors in generalize.json): {'; '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
