"""Totals of a chaos session, and its report (benchmarks/results/chaos.md / chaos.json)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from benchmarks.chaos.faults import KINDS


def totals(records: list[dict]) -> dict:
    injected = [r for r in records if r["injected"]]
    vio = Counter(v["kind"] for r in records for v in r["violations"])
    by_kind = {}
    for k in KINDS:
        mine = [r for r in records if r["kind"] == k]
        inj = [r for r in mine if r["injected"]]
        by_kind[k] = {
            "runs": len(mine),
            "injected": len(inj),
            "reported": sum(r["reported"] for r in inj),
            "attempts": sum(len(r["attempts"]) for r in mine),
            "violations": sum(len(r["violations"]) for r in mine),
        }
    return {
        "runs": len(records),
        "faults_injected": len(injected),
        "faults_reported": sum(r["reported"] for r in injected),
        "faults_unreported": sum(not r["reported"] for r in injected),
        "not_injected": len(records) - len(injected),
        "attempts": sum(len(r["attempts"]) for r in records),
        "completed": sum(r["completed"] for r in records),
        "violations": sum(vio.values()),
        "lost": vio["lost"],
        "corrupted": vio["corrupted"],
        "leftover": vio["leftover"],
        "journal": vio["journal"],
        "stray": vio["stray"],
        "incomplete": vio["incomplete"],
        "by_kind": by_kind,
    }


def passed(t: dict) -> bool:
    return t["violations"] == 0 and t["faults_unreported"] == 0


def write(out_dir: Path, meta: dict, records: list[dict]) -> dict:
    t = totals(records)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "chaos.json").write_text(json.dumps({"meta": meta, "totals": t, "runs": records}, indent=1) + "\n")
    lines = [
        "# Chaos suite: faults at random moments over wan50",
        "",
        f"Command: `{meta['command']}`  ",
        f"Seed: {meta['seed']} · link: {meta['rtt_ms']:.0f} ms RTT, {meta['rate_mbit']:.0f} Mbit/s (emulated) · "
        f"dataset: {meta['files']} files, {meta['bytes'] / 2**20:.1f} MiB (one {meta['big_mib']} MiB file over "
        f"p={meta['p']} ranges) · verify: sha256, file or block mode per run  ",
        f"Started {meta['started']} · duration {meta['duration_s'] / 60:.1f} min · commit {meta['commit'][:12]}  ",
        f"Machine: {meta['machine']}",
        "",
        f"**Result: {'PASS' if passed(t) else 'FAIL'}** — {t['runs']} runs, {t['faults_injected']} faults injected, "
        f"{t['faults_reported']} reported; {t['lost']} files lost, {t['corrupted']} corrupted under final names, "
        f"{t['leftover']} leftover temporary files, {t['journal']} journal disagreements, "
        f"{t['incomplete']} runs that never completed.",
        "",
        "| fault | runs | injected | reported | attempts | violations |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k, b in t["by_kind"].items():
        lines.append(f"| {k} | {b['runs']} | {b['injected']} | {b['reported']} | {b['attempts']} | {b['violations']} |")
    lines += [
        "",
        f"Runs where the copy ended before the fault's moment (not counted as injected): "
        f"{t['not_injected']}. Attempts include the Airflow-style re-runs after a failed or killed attempt.",
        "",
    ]
    bad = [r for r in records if r["violations"] or (r["injected"] and not r["reported"])]
    if bad:
        lines += ["## Violations", ""]
        for r in bad[:50]:
            what = "; ".join(f"{v['kind']} {v['path']}: {v['detail']}" for v in r["violations"][:5])
            if r["injected"] and not r["reported"]:
                what = (what + "; " if what else "") + f"fault not reported: {r['how']}"
            lines.append(f"- run {r['run']} ({r['kind']}): {what}")
        lines.append("")
    lines += ["How each fault counts as reported, and what the invariants are: docs/reliability.md.", ""]
    (out_dir / "chaos.md").write_text("\n".join(lines))
    return t
