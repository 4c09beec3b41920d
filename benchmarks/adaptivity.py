"""Adaptivity: does `--algorithm auto` follow the link when its rate drops mid-transfer?

    .venv/bin/python -m benchmarks.adaptivity                  # mixed on wan50, drop to 100 Mbit/s for 20 s
    .venv/bin/python -m benchmarks.adaptivity --quick          # a fifth of mixed, drop for 8 s (smoke)

Issue #5's experiment (paper 003: parameters optimal at submission may not be
at execution): an upload of the `mixed` dataset over the emulated wan50 link;
`--drop-after` seconds into the copy the emulator's rate falls to
`--drop-to` Mbit/s for `--drop-for` seconds, then returns. The tuning library
is filled first by `airflow-transfer profile --quick` (what the profiling DAG
does), so `auto` starts from measured figures.

Figures: the rate the link offered over the run (its configured rate
integrated over time, times the payload ceiling of 1448/1500), the payload
the copy moved, and their ratio (the target is at least 70 %); a trace of
the emulator's forward byte counter sampled every 0.5 s; and every chunk's
pp / p / cc and throughput from the copy's summary. Writes
benchmarks/results/adaptivity.json, adaptivity.md and adaptivity.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from benchmarks.contenders.airflow_transfer import AirflowTransfer
from benchmarks.contenders.base import ContenderFailed, clear, verify_tree
from benchmarks.contenders.testbed import Testbed
from benchmarks.datasets import ensure, resolve
from benchmarks.run import commit, machine

RESULTS = Path(__file__).resolve().parent / "results"
PAYLOAD = 1448 / 1500  # TCP payload per 1500-byte packet with timestamps


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class RateSchedule(threading.Thread):
    """Drops the link's rate at `after` s for `length` s while sampling the forward byte counter."""

    def __init__(self, bed: Testbed, base: float, low: float, after: float, length: float) -> None:
        super().__init__(daemon=True)
        self.bed, self.base, self.low, self.after, self.length = bed, base, low, after, length
        self.samples: list[tuple[float, int]] = []
        self.changes: list[tuple[float, float]] = [(0.0, base)]
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        link = self.bed.link
        phase = 0
        while not self.stop.is_set():
            now = time.monotonic() - self.t0
            if phase == 0 and now >= self.after:
                link.set(rate_mbit=self.low)
                self.changes.append((now, self.low))
                phase = 1
            elif phase == 1 and now >= self.after + self.length:
                link.set(rate_mbit=self.base)
                self.changes.append((now, self.base))
                phase = 2
            self.samples.append((now, link.stats()["fwd"]["tx_bytes"]))
            self.stop.wait(0.5)
        if phase == 1:
            link.set(rate_mbit=self.base)

    def offered_bytes(self, end: float) -> float:
        """Payload bytes the link could have carried from 0 to `end` s."""
        total = 0.0
        points = [c for c in self.changes if c[0] < end] + [(end, 0.0)]
        for (t, rate), (t_next, _) in zip(points, points[1:]):
            total += rate * 1e6 / 8 * (t_next - t) * PAYLOAD
        return total


def chart(
    path: Path,
    trace: list[tuple[float, float]],
    changes: list[tuple[float, float]],
    end: float,
    chunks: list[dict],
    title: str,
    job_seconds: float = 0.0,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    if trace:
        ax.plot(
            [t for t, _ in trace],
            [m for _, m in trace],
            color="#1f6fb4",
            linewidth=1.2,
            label="link throughput (emulator counter, 0.5 s)",
        )
    steps_t = [t for t, _ in changes] + [end]
    steps_r = [r for _, r in changes] + [changes[-1][1]]
    ax.step(steps_t, steps_r, where="post", color="#cc5500", linestyle="--", linewidth=1, label="link rate")
    # One lane per chunk at the bottom: Multi-Chunk runs chunks at once. The summary's
    # start_s counts from the job's start, which is `job_seconds` before the process ended.
    top = max(r for _, r in changes) * 1.08
    offset = end - job_seconds if job_seconds else 0.0
    lane = 0.035
    t_seq = 0.0
    for i, c in enumerate(chunks):
        start = offset + c["start_s"] if c.get("start_s") is not None else t_seq  # older summaries: in turn
        t_end = start + c["seconds"]
        t_seq = t_end
        ymin = i * lane
        ax.axvspan(start, t_end, ymin=ymin, ymax=ymin + lane * 0.85, color="#888888" if i % 2 else "#555555")
        ax.text(
            start + 0.3,
            top * (ymin + lane * 0.15),
            f"{c['id']} pp{c['pp']} p{c['p']} cc{c['cc']}",
            fontsize=6,
            color="white",
            va="bottom",
        )
    ax.set_xlim(0, end)
    ax.set_ylim(0, top)
    ax.set_xlabel("seconds since the copy started")
    ax.set_ylabel("Mbit/s")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.adaptivity", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="wan50")
    ap.add_argument("--dataset", default="mixed")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--algorithm", default="auto")
    ap.add_argument("--drop-to", type=float, default=100.0, help="Mbit/s during the drop (default 100)")
    ap.add_argument("--drop-after", type=float, default=10.0, help="seconds into the copy (default 10)")
    ap.add_argument("--drop-for", type=float, default=20.0, help="seconds (default 20)")
    ap.add_argument("--quick", action="store_true", help="a fifth of the dataset, an 8 s drop after 4 s (smoke)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.scale, args.drop_after, args.drop_for = 0.2, 4.0, 8.0
    spec = resolve([args.dataset], scale=args.scale)[0]
    ds = ensure(spec)
    with Testbed(args.profile) as bed:
        row = AirflowTransfer(f"airflow-transfer --algorithm {args.algorithm}", "", ["--algorithm", args.algorithm])
        row.prepare(bed)  # fills the tuning library for this link first
        row.timeout = 1800
        remote = bed.fresh_remote_dir("adaptivity")
        sched = RateSchedule(bed, bed.rate_mbit, args.drop_to, args.drop_after, args.drop_for)
        say(
            f"adaptivity: {ds.name} ({ds.files} files, {ds.bytes / 2**20:.0f} MiB) over {args.profile}; rate "
            f"{bed.rate_mbit:g} -> {args.drop_to:g} Mbit/s at {args.drop_after:g} s for {args.drop_for:g} s"
        )
        sched.t0 = time.monotonic()
        sched.start()
        try:
            seconds = row.run(ds.path, remote)
        except ContenderFailed as exc:
            say(f"adaptivity: the copy failed: {exc}")
            return 1
        finally:
            sched.stop.set()
            sched.join()
        bed.wait_server_idle()
        verified = verify_tree(ds, remote, content=True)
        summary = json.loads(row.last.stdout.strip().splitlines()[-1])
        clear(remote)
    offered = sched.offered_bytes(seconds)
    fraction = ds.bytes / offered if offered else 0.0
    trace = [
        (t1, (b1 - b0) * 8 / (t1 - t0) / 1e6) for (t0, b0), (t1, b1) in zip(sched.samples, sched.samples[1:]) if t1 > t0
    ]
    chunks = [
        {k: c.get(k) for k in ("id", "files", "bytes", "pp", "p", "cc", "start_s", "seconds", "throughput_mbit")}
        for c in summary.get("chunks", [])
    ]
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "commit": commit(),
        "profile": args.profile,
        "dataset": ds.name,
        "files": ds.files,
        "bytes": ds.bytes,
        "algorithm": args.algorithm,
        "drop": {"to_mbit": args.drop_to, "after_s": args.drop_after, "for_s": args.drop_for},
        "seconds": round(seconds, 2),
        "offered_payload_bytes": int(offered),
        "fraction_of_available": round(fraction, 3),
        "verified": verified,
        "tuning": summary.get("tuning"),
        "job_seconds": summary.get("seconds"),
        "chunks": chunks,
        "rate_changes": sched.changes,
        "trace_mbit": [(round(t, 2), round(m, 1)) for t, m in trace],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "adaptivity.json").write_text(json.dumps(result, indent=1) + "\n")
    title = (
        f"{args.algorithm} on {ds.name} over {args.profile}: rate drop to {args.drop_to:g} Mbit/s for "
        f"{args.drop_for:g} s; {fraction:.0%} of the available rate"
    )
    try:
        chart(
            args.out / "adaptivity.png",
            trace,
            sched.changes,
            seconds,
            chunks,
            title,
            job_seconds=summary.get("seconds") or 0.0,
        )
    except ImportError:
        say("adaptivity: no chart: matplotlib is not installed (benchmarks/bench.sh installs it)")
    lines = [
        "# Adaptivity: a rate drop in the middle of a transfer",
        "",
        f"- command: `python -m benchmarks.adaptivity {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"- date {result['date']}, commit `{result['commit'][:12]}`, {result['machine']}",
        f"- {ds.name}: {ds.files} files, {ds.bytes / 2**20:,.0f} MiB; link {args.profile}; rate "
        f"{args.drop_to:g} Mbit/s from {args.drop_after:g} s to {args.drop_after + args.drop_for:g} s",
        f"- `--algorithm {args.algorithm}`, tuning source: {(summary.get('tuning') or {}).get('source')}",
        f"- copy time {seconds:.1f} s; the link offered {offered / 2**20:,.0f} MiB of payload in that time; "
        f"moved {ds.bytes / 2**20:,.0f} MiB: **{fraction:.0%} of the available rate** (target: at least 70 %); "
        f"destination {'content-verified' if verified else 'NOT verified'}",
        "",
        "![adaptivity](adaptivity.png)",
        "",
        "| chunk | files | MiB | pp | p | cc | seconds | Mbit/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {c['id']} | {c['files']} | {c['bytes'] / 2**20:.0f} | {c['pp']} | {c['p']} | {c['cc']} | "
        f"{c['seconds']:.2f} | {c['throughput_mbit']:.0f} |"
        for c in chunks
    ]
    (args.out / "adaptivity.md").write_text("\n".join(lines) + "\n")
    say(f"adaptivity: {seconds:.1f} s, {fraction:.0%} of the available rate; {args.out / 'adaptivity.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
