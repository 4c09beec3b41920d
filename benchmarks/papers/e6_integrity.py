"""Effect 6: block-level pipelining of transfer and checksum against sequential (paper 002, Table I, Fig. 2 and 4).

On this machine's own disk the destination checksums an 8 MiB block in ~6 ms against 120-200 ms
to send it (benchmarks/results/verify_cost.md), so no overlap can gain more than 1.03-1.05x. The
paper's gain needs checksums about as slow as the network, so this effect builds that destination
for real (benchmarks/papers/throttle.py): the landing directory on an ext4 loop device whose
reads are throttled for the checksum helpers only, each helper in a blkio cgroup of its own.

Two regimes: `balanced` (helper reads at 40 MiB/s, c ~ t on wan50, the setting of the mode
comparison) and `checksum-bound` (16 MiB/s, c ~ 2t, Cooley's ratio in the paper, the setting of
the checksum-thread comparison). t and c are measured as benchmarks/verify_cost.py measures them,
on the throttled destination: t from the transfer phase of the unverified run (its fixed start
kept apart, see `tc`), c by `checksum_seconds_per_byte` (fsync, page cache dropped, read back,
hash) run in a throttled cgroup on a file of the loop device. The Table I model
(airflow_transfer/integrity/model.py) predicts each mode from them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from airflow_transfer.integrity.model import CostModel, block_level_time, file_level_time, sequential_time
from benchmarks.papers.common import (
    IN_PART,
    NOT_MEASURED,
    NOT_REPRODUCED,
    REPO,
    REPRODUCED,
    Case,
    Context,
    Record,
    Section,
    by_case,
    md_table,
    median,
    pyplot,
)

NUMBER = 6
TITLE = "Block-level pipelining of transfer and checksum beats checking after the transfer"
PAPER = (
    "S. Liu, E.-S. Jung, R. Kettimuthu, X.-H. Sun, *Towards Optimizing Large-Scale Data Transfers with "
    "End-to-End Integrity Verification* (the copy followed carries no date)"
)
CLAIM = (
    "Checksumming every file at the destination after it is written costs a second pass; overlapping the "
    "checksum of block i with the sending of block i+1 hides most of it. Block-level pipelining cut the total "
    "time by up to 70 % against sending everything and then checksumming (sequential) and by up to 60 % "
    "against file-level pipelining, with times that follow the Table I model built from t and c (seconds to "
    "send and to checksum 500 MB; Fig. 2 on Cooley, where c ~ 2t). Where checksumming dominates, two checksum "
    "threads nearly halved the time (Fig. 4). Scaled here: 4 files of 96 MiB (the 20-10G shape: equal files "
    "much larger than a block) uploaded over wan50 with 8 MiB blocks, sha256, one SFTP connection, files in "
    "order (`--pp 8 -p 1 -c 1`), to a destination whose checksum reads are throttled so that c ~ t (modes) "
    "and c ~ 2t (1, 2 and 4 checksum threads)."
)
REPS = 3

EFFECT = "e6_integrity"
MIB = 1024 * 1024
PROFILE = "wan50"
ALGORITHM = "sha256"
KNOBS = ["--algorithm", "fixed", "--pp", "8", "-p", "1", "-c", "1"]
# Helper read rates: one SFTP connection over wan50 moves 30-40 MB/s on a quiet machine (at most
# a 2 MiB channel window per 50 ms RTT), 0.2-0.27 s per 8 MiB block; 40 MiB/s gives c = 0.2 s
# (c ~ t) and 16 MiB/s c = 0.5 s (c ~ 2t, the paper's Cooley), whatever the exact t turns out.
REGIMES = {"balanced": 40 * MIB, "checksum-bound": 16 * MIB}
FULL = {"files": 4, "size": 96 * MIB, "block": 8 * MIB, "probe": 64 * MIB}
QUICK = {"files": 4, "size": 16 * MIB, "block": 2 * MIB, "probe": 16 * MIB}
# (case id, regime, mode, checksum threads)
PLAN = [
    ("none", "balanced", "none", 0),
    ("sequential", "balanced", "sequential", 1),
    ("file", "balanced", "file", 1),
    ("block", "balanced", "block", 1),
    ("block-cb-t1", "checksum-bound", "block", 1),
    ("block-cb-t2", "checksum-bound", "block", 2),
    ("block-cb-t4", "checksum-bound", "block", 4),
]
HEADLINE_GAIN = 1.5  # block at least 1.5x faster than sequential (the acceptance line)
THREAD_GAIN = 1.5  # 2 checksum threads at least 1.5x faster than 1 where c ~ 2t ("almost half" in Fig. 4)
MODEL_TOLERANCE = 0.15  # every measured mode within 15 % of the Table I prediction

_PROBE = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from benchmarks.datasets import Dataset, DatasetSpec\n"
    "from benchmarks.verify_cost import checksum_seconds_per_byte\n"
    "p, n = Path(sys.argv[1]), int(sys.argv[2])\n"
    "ds = Dataset(DatasetSpec('e6-probe', 1, n), p.parent, {p.name: (n, '')})\n"
    "print(json.dumps(checksum_seconds_per_byte(ds, sys.argv[3])))\n"
)


def cases(quick: bool) -> list[Case]:
    scale = QUICK if quick else FULL
    return [
        Case(
            EFFECT,
            cid,
            PROFILE,
            {"regime": regime, "read_bps": REGIMES[regime], "mode": mode, "threads": threads, **scale},
        )
        for cid, regime, mode, threads in PLAN
    ]


# -- measuring ---------------------------------------------------------------------------
def measure(case: Case, ctx: Context) -> dict[str, Any]:
    from benchmarks.papers.throttle import SlowChecksums

    p = case.params
    ds = ctx.dataset(f"e6-{p['files']}x{p['size'] // MIB}m", p["files"], p["size"], seed=2021)
    bed = ctx.bed(PROFILE)
    if p["mode"] == "none":
        verify = ["--verify", "none"]
    else:
        verify = ["--verify", ALGORITHM, "--verify-mode", p["mode"], "--verify-block-size", str(p["block"])]
        if p["mode"] == "block":
            verify += ["--verify-threads", str(p["threads"])]  # fixed: no balancing during the run
    with SlowChecksums(bed, p["read_bps"]) as slow:
        os.sync()  # earlier runs' dirty pages are not written back during this one
        slow.mark()
        out = ctx.copy(bed, ds, [*KNOBS, *verify])
        v = out["summary"].get("verify", {})
        balance = v.get("balance", {})
        result: dict[str, Any] = {
            "ok": out["ok"],
            "seconds": out["seconds"],
            "mbit": out["mbit"],
            "error": out["error"],
            "bytes": ds.bytes,
            "transfer_s": _transfer_s(out["summary"].get("chunks", [])),
            "file_sizes": sorted(s for s, _ in ds.manifest.values()),
            "verify": {
                "mode": v.get("mode"),
                "where": v.get("where"),
                "verified": v.get("verified"),
                "threads": v.get("threads"),
                "c_block_helper_s": balance.get("c_block_measured_s"),
                "blocks_verified": v.get("blocks", {}).get("verified"),
            },
            "helpers": len(slow.helpers),
            "helper_throttled_after_s_max": max(slow.helpers.values(), default=None),
            "helper_read_bytes": slow.helper_read_bytes(),
            # When the destination's checksum reads ran, seconds from the copy's start (50 ms
            # samples): in sequential mode the transfer ends before the first, so the two phases
            # of the model can be told apart.
            "reads_s": [slow.reads[0][0], slow.reads[-1][0]] if slow.reads else None,
            "helper_busy_s": sorted((round(v, 2) for v in slow.busy.values()), reverse=True),
        }
        if p["mode"] == "none":
            result["c_probe"] = _probe_c(slow, ds, p["probe"])
    return result


def _transfer_s(chunks: list[dict[str, Any]]) -> float | None:
    """Seconds from the first chunk's start to the last one's end: the copy less its fixed start
    (interpreter, SSH connections, listing) and end."""
    spans = [(c["start_s"], c["start_s"] + c["seconds"]) for c in chunks if "start_s" in c and "seconds" in c]
    return round(max(e for _, e in spans) - min(b for b, _ in spans), 3) if spans else None


def _probe_c(slow: Any, ds: Any, size: int) -> dict[str, dict[str, float]]:
    """c per byte in each regime: verify_cost's measurement, run in a throttled cgroup on a file
    of the throttled destination (the first `size` bytes of one dataset file); and what an fsync
    of that file, freshly written, cost per byte."""
    probe = slow.target / "e6-probe" / "probe.bin"
    probe.parent.mkdir(exist_ok=True)
    with open(ds.path / sorted(ds.manifest)[0], "rb") as src, open(probe, "wb") as dst:
        dst.write(src.read(size))
        # The helper's fsync of freshly written data, which verify_cost's timer leaves out
        # (its files are long written): timed here on the same destination, for the notes.
        t0 = time.perf_counter()
        os.fsync(dst.fileno())
        fsync_s = time.perf_counter() - t0
    out: dict[str, dict[str, float]] = {"fsync": {"s_per_byte": fsync_s / size}}
    try:
        for regime, bps in REGIMES.items():
            slow.set_rate(bps)
            done = slow.run_confined(
                [sys.executable, "-c", _PROBE, str(probe), str(size), ALGORITHM], timeout=120, cwd=REPO
            )
            if done.returncode != 0:
                raise RuntimeError(f"checksum probe failed: {done.stderr.strip()[-300:]}")
            disk, mem = json.loads(done.stdout.strip().splitlines()[-1])
            out[regime] = {"disk_s_per_byte": disk, "mem_s_per_byte": mem}
    finally:
        shutil.rmtree(probe.parent, ignore_errors=True)
    return out


# -- the model and the verdict --------------------------------------------------------------
def _ok(records: list[Record]) -> list[Record]:
    return [r for r in records if r.result.get("ok")]


def tc(records: list[Record]) -> dict[str, dict[str, float]]:
    """t and c per block in each regime, and the copy's fixed start.

    t from the median unverified run as verify_cost's model_rows derives it, but over its
    transfer phase only: the fixed start (before any block moves, no checksum can overlap it)
    is kept apart and added to every prediction. Folding it into t, as verify_cost does, is
    harmless where c << t but makes the model overlap it with checksums where c >= t.
    c from the median probe of that regime."""
    none = [r for r in by_case(_ok(records)).get("none", []) if r.result.get("transfer_s")]
    t_run = median(r.result["seconds"] for r in none)
    if t_run is None:
        return {}
    block = none[0].params["block"]
    t = median(r.result["transfer_s"] for r in none) * block / none[0].result["bytes"]
    start = median(r.result["seconds"] - r.result["transfer_s"] for r in none) or 0.0
    probes = [r.result["c_probe"] for r in none if "c_probe" in r.result]
    out = {}
    for regime in REGIMES:
        c = median(p[regime]["disk_s_per_byte"] for p in probes)
        if c is not None:
            fsync = median(p["fsync"]["s_per_byte"] for p in probes) or 0.0
            out[regime] = {"t": t, "c": c * block, "start": start, "none_s": t_run, "fsync": fsync * block}
    return out


def predict(params: dict[str, Any], sizes: list[int], k: dict[str, float]) -> float:
    """The Table I model's seconds for one case: the fixed start plus the pipeline of t and c."""
    mode, block = params["mode"], params["block"]
    model = CostModel(t=k["t"], c=k["c"], unit=block, threads=max(1, params["threads"]))
    if mode == "none":
        return k["none_s"]
    if mode == "sequential":
        return k["start"] + sequential_time(sizes, model)
    if mode == "file":
        return k["start"] + file_level_time(sizes, model)
    return k["start"] + block_level_time(sizes, block, model)


def figures(records: list[Record]) -> dict[str, dict[str, Any]]:
    """Per case: measured median (min, max), the model's prediction, and what the helpers did."""
    costs = tc(records)
    out: dict[str, dict[str, Any]] = {}
    for cid, recs in by_case(_ok(records)).items():
        secs = [r.result["seconds"] for r in recs]
        p = recs[0].params
        reads = [r.result["reads_s"] for r in recs if r.result.get("reads_s")]
        row: dict[str, Any] = {
            "params": p,
            "measured": median(secs),
            "min": min(secs),
            "max": max(secs),
            "runs": len(secs),
            "c_helper": median(r.result["verify"].get("c_block_helper_s") for r in recs),
            "read_ratio": median(
                r.result["helper_read_bytes"] / r.result["bytes"] for r in recs if r.result.get("helper_read_bytes")
            ),
            "helpers": median(r.result["helpers"] for r in recs),
            "reads_from": median(x[0] for x in reads),
            "reads_to": median(x[1] for x in reads),
            # Seconds each helper spent reading, in the run nearest the median.
            "busy": min(recs, key=lambda r: abs(r.result["seconds"] - median(secs))).result.get("helper_busy_s"),
            "predicted": None,
        }
        k = costs.get(p["regime"])
        if k is not None:
            row["predicted"] = predict(p, recs[0].result["file_sizes"], k)
        out[cid] = row
    return out


def judge(fig: dict[str, dict[str, Any]], costs: dict[str, dict[str, float]]) -> tuple[str, str]:
    """The verdict from the medians, with the thresholds it applies."""
    if not fig:
        return NOT_MEASURED, "No successful run of this effect yet."
    get = lambda cid: fig.get(cid, {}).get("measured")
    seq, blk, t1, t2 = get("sequential"), get("block"), get("block-cb-t1"), get("block-cb-t2")
    parts, missing = [], []
    headline = threads = None
    if seq and blk:
        headline = seq / blk >= HEADLINE_GAIN
        parts.append(
            f"with c ~ t{_ratio(costs, 'balanced')}, block-level took {blk:.1f} s against {seq:.1f} s sequential, "
            f"{seq / blk:.2f}x faster ({'at least' if headline else 'below'} the {HEADLINE_GAIN}x threshold"
            + (f"; the most any overlap can gain here is {_max_gain(costs['balanced']):.2f}x" if costs else "")
            + ")"
        )
    else:
        missing += [cid for cid in ("sequential", "block") if not get(cid)]
    if t1 and t2:
        threads = t1 / t2 >= THREAD_GAIN
        parts.append(
            f"with c ~ 2t{_ratio(costs, 'checksum-bound')}, 2 checksum threads took {t2:.1f} s against {t1:.1f} s "
            f"with 1, {t1 / t2:.2f}x faster ({'at least' if threads else 'below'} the {THREAD_GAIN}x threshold)"
        )
    else:
        missing += [cid for cid in ("block-cb-t1", "block-cb-t2") if not get(cid)]
    off = {cid: f["measured"] / f["predicted"] - 1 for cid, f in fig.items() if f["predicted"] and cid != "none"}
    bad = {cid: d for cid, d in off.items() if abs(d) > MODEL_TOLERANCE}
    if off:
        worst = max(off, key=lambda k: abs(off[k]))
        parts.append(
            f"the Table I model was within {MODEL_TOLERANCE:.0%} of {len(off) - len(bad)} of {len(off)} measured "
            f"cases (largest gap {worst}: {off[worst]:+.0%})"
            + (f"; outside: {', '.join(f'{k} {d:+.0%}' for k, d in bad.items())}" if bad else "")
        )
    else:
        missing.append("none (the unverified run and checksum probe: no model without t and c)")
    why = "; ".join(parts) + "." if parts else ""
    if missing:
        why += f" Not measured yet: {', '.join(missing)}."
    why = why.strip()
    if headline is None and threads is None:
        return NOT_MEASURED, why
    if headline and threads and off and not bad:
        return REPRODUCED, why
    if headline or threads:
        return IN_PART, why
    return NOT_REPRODUCED, why


def _max_gain(k: dict[str, float]) -> float:
    """(t + c) / max(t, c): the most any overlap of transfer and checksum can gain over sequential."""
    return (k["t"] + k["c"]) / max(k["t"], k["c"])


def _ratio(costs: dict[str, dict[str, float]], regime: str) -> str:
    k = costs.get(regime)
    return f" (measured c/t {k['c'] / k['t']:.2f})" if k else ""


# -- the page -------------------------------------------------------------------------------
LABEL = {
    "none": "unverified (gives t)",
    "sequential": "sequential",
    "file": "file-level",
    "block": "block-level, 1 thread",
    "block-cb-t1": "block-level, 1 thread",
    "block-cb-t2": "block-level, 2 threads",
    "block-cb-t4": "block-level, 4 threads",
}


def render(records: list[Record], charts: Path) -> Section:
    if not records:
        return Section("", NOT_MEASURED, "No run of this effect yet.")
    fig = figures(records)
    costs = tc(records)
    seq = fig.get("sequential", {}).get("measured")
    rows = []
    for cid, regime, _, _ in PLAN:
        label = f"{REGIMES[regime] // MIB} MiB/s{_ratio(costs, regime)}"
        f = fig.get(cid)
        if f is None:
            rows.append([label, LABEL[cid], *[None] * 8])
            continue
        pred = f["predicted"]
        verified = f["params"]["mode"] != "none"
        rows.append(
            [
                label,
                LABEL[cid],
                f"{f['measured']:.1f} ({f['min']:.1f}-{f['max']:.1f})",
                pred,
                f"{f['measured'] / pred - 1:+.0%}" if pred and verified else None,
                f"{seq / f['measured']:.2f}x" if seq and regime == "balanced" and verified else None,
                f["helpers"] if verified else None,
                f"{f['c_helper'] * 1000:.0f}" if f["c_helper"] else None,
                f"{f['reads_from']:.1f}-{f['reads_to']:.1f}" if f["reads_from"] is not None else None,
                f"{f['read_ratio']:.2f}" if f["read_ratio"] else None,
            ]
        )
    table = md_table(
        [
            "helper read rate",
            "mode",
            "measured s, median (min-max)",
            "Table I model s",
            "measured vs model",
            "faster than sequential",
            "helpers",
            "helper's own c per block, ms",
            "checksum reads ran, s from start",
            "helper disk reads / bytes",
        ],
        rows,
    )
    verdict, why = judge(fig, costs)
    chart = _chart(fig, charts)
    return Section(table, verdict, why, [chart] if chart else [], _notes(records, costs, fig))


def _notes(records: list[Record], costs: dict[str, dict[str, float]], fig: dict[str, dict[str, Any]]) -> str:
    p = records[0].params
    reps = max(r.rep for r in records)
    lines = [
        f"Setup ({'quick: ' if p['size'] < FULL['size'] else ''}{p['files']} x {p['size'] // MIB} MiB, "
        f"{p['block'] // MIB} MiB blocks, {ALGORITHM}, `{' '.join(KNOBS)}`, wan50, medians of up to {reps} "
        "repetition(s), cases interleaved). The landing directory is an ext4 file system on a loop device; each "
        "destination checksum helper runs in a cgroup v1 blkio group of its own whose reads of that device are "
        f"throttled to {REGIMES['balanced'] // MIB} MiB/s (c ~ t) or {REGIMES['checksum-bound'] // MIB} MiB/s "
        "(c ~ 2t); the sshd, sftp-server and the sender are not slowed (benchmarks/papers/throttle.py). A "
        "loop device rather than the VM's disk: that disk reads ahead 8 MiB, which the helper's drop-before-read "
        "discards, so it would read every 8 MiB block about twice; the loop device reads ahead 128 KiB (the "
        "last column shows the helpers read each byte once). A read throttle rather than a CPU quota: it gives "
        "c = block / rate whatever else loads the 2 cores, while a CPU quota of a few per cent would turn every "
        "scheduling delay into checksum time.",
    ]
    if costs:
        k = costs["balanced"]
        cb = costs.get("checksum-bound", {})
        lines.append(
            f"t and c per block, measured as benchmarks/verify_cost.py measures them but on this destination: "
            f"t = {k['t'] * 1000:.0f} ms (the transfer phase of the median unverified run, scaled to one block; "
            f"the {k['start']:.1f} s before its first block moved, interpreter start, SSH connections and listing, "
            "are added to every prediction as they are, since no checksum can overlap them), "
            f"c = {k['c'] * 1000:.0f} ms at {REGIMES['balanced'] // MIB} MiB/s"
            + (f" and {cb['c'] * 1000:.0f} ms at {REGIMES['checksum-bound'] // MIB} MiB/s" if cb else "")
            + " (`checksum_seconds_per_byte`: fsync, page cache dropped, read back, hashed, in a throttled cgroup "
            f"on a file of the loop device). With c/t = {k['c'] / k['t']:.2f} no overlap can gain more than "
            f"(t + c) / max(t, c) = {_max_gain(k):.2f}x over sequential. The predictions come from t, c and the fixed start alone "
            "(airflow_transfer/integrity/model.py: Table I's lock-step pipeline, items in transfer order, threads "
            "dividing c). One cost is outside them: verify_cost's timer starts after the fsync, which "
            f"on freshly written data cost {k['fsync'] * 1000:.0f} ms per block here, paid by the helper before "
            "each read (in block mode it mostly overlaps the transfer). The checksum-read window says where the "
            "time went: in sequential mode the reads start when the transfer has ended."
        )
    busy = [
        f"{f['helpers']:g} thread(s) {'/'.join(f'{b:.1f}' for b in f['busy'])} s of a "
        f"{f['reads_to'] - f['reads_from']:.1f} s window"
        for cid, f in fig.items()
        if f["busy"] and f["reads_from"] is not None and cid.startswith("block-cb")
    ]
    t1, t2 = fig.get("block-cb-t1", {}).get("reads_from"), fig.get("block-cb-t2", {}).get("reads_from")
    if t1 is not None and t2 is not None:
        busy.append(
            f"the first checksum read came {t1:.1f} s after the start with 1 thread and {t2:.1f} s with 2 (each "
            "further thread opens its own SSH connection and helper while the first blocks are sent)"
        )
    if busy:
        lines.append(
            "How the checksum threads shared the work where c ~ 2t (seconds each helper was busy, running or "
            "waiting on its fsync or throttled read, sampled every 50 ms, against the span of all checksum reads; "
            f"the 1-thread row, busy throughout, shows what sampling misses): {'; '.join(busy)}. Each thread checks whole blocks (the paper "
            "split every block between its threads), so the last block still costs a full c."
        )
    lines.append(
        "Checksum threads on 2 cores: each `--verify-threads` thread runs its own helper on its own SSH "
        "connection, and here each helper gets its own throttle, so n threads read n times as fast, as n cores "
        "each hashing at one core's speed did on Cooley. The emulated cost is a wait, not CPU, so 4 threads can "
        "run on this 2-core machine; a destination whose checksum is really CPU-bound would gain at most 2x from "
        "threads on 2 cores, less the share sshd needs to decrypt. Past c/n = t the transfer is the slower stage "
        "and more threads add nothing, which the 4-thread row shows."
    )
    failed = [r for r in records if not r.result.get("ok")]
    if failed:
        lines.append(
            "Failed runs (left out of the medians): "
            + "; ".join(f"{r.case} rep {r.rep}: {(r.result.get('error') or '')[:160]}" for r in failed)
        )
    missing = [cid for cid, *_ in PLAN if cid not in fig]
    if missing:
        lines.append(f"Cases without a successful run yet: {', '.join(missing)}.")
    return "\n\n".join(lines)


def _chart(fig: dict[str, dict[str, Any]], charts: Path) -> str | None:
    ids = [cid for cid, *_ in PLAN if cid in fig]
    if not ids:
        return None
    plt = pyplot()
    fig_, ax = plt.subplots(figsize=(8, 4))
    xs = range(len(ids))
    meas = [fig[c]["measured"] for c in ids]
    spread = [[m - fig[c]["min"] for m, c in zip(meas, ids)], [fig[c]["max"] - m for m, c in zip(meas, ids)]]
    ax.bar([x - 0.2 for x in xs], meas, 0.4, yerr=spread, capsize=3, label="measured (median, min-max)")
    ax.bar([x + 0.2 for x in xs], [fig[c]["predicted"] or 0 for c in ids], 0.4, label="Table I model")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(
        [f"{LABEL[c].replace(', ', chr(10))}\n{REGIMES[fig[c]['params']['regime']] // MIB} MiB/s" for c in ids],
        fontsize=7,
    )
    ax.set_ylabel("seconds")
    ax.set_title("Upload with end-to-end checksums to a throttled destination (wan50)")
    ax.legend()
    fig_.tight_layout()
    name = "e6-integrity.png"
    charts.mkdir(parents=True, exist_ok=True)
    fig_.savefig(charts / name, dpi=110)
    plt.close(fig_)
    return name
