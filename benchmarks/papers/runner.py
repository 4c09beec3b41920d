"""Measures the effects' cases in budgeted, resumable pieces and writes docs/papers.md.

Each (case, repetition) is measured once per commit. Repetitions are
interleaved: every case's first run before any case's second, so drift on the
shared machine spreads over all settings and a budgeted call leaves a figure
for as many cases as time allowed. Within a repetition the cases are grouped
by the link they need, so one emulated link serves many runs.

Records measured at another commit (or in the other mode, quick or full) are
set aside, never mixed in: every figure on the page comes from one commit.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from benchmarks.papers import EFFECTS
from benchmarks.papers.common import (
    NOT_MEASURED,
    REPO,
    Case,
    Context,
    Record,
    Section,
    machine,
)

DEFAULT_REPS = 3
# The page's first part: which paper each short number means (written by hand, kept here).
INTRO = Path(__file__).with_name("intro.md")
# Paths a run itself writes: a tree dirty only there still measures the commit.
OWN_OUTPUT = ("benchmarks/results/papers", "docs/papers.md", "docs/papers/")


def commit(repo: Path = REPO) -> str:
    """The last commit that changed anything but the run's own output, with "+dirty" when files
    outside that output differ from HEAD (new ones too). Committing the page and the records
    between budgeted calls therefore keeps the run going on the same figures' commit."""
    excludes = [f":(exclude){path}" for path in OWN_OUTPUT]
    measured = subprocess.run(
        ["git", "log", "-1", "--format=%H", "--", ".", *excludes], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True, text=True
    ).stdout
    dirty = [line[3:] for line in status.splitlines() if not line[3:].startswith(OWN_OUTPUT)]
    return f"{measured or 'unknown'}{'+dirty' if dirty else ''}"


def load_effects(names: Sequence[str] | None = None) -> list[ModuleType]:
    """The effect modules, in page order; `names` picks some (module names, or their numbers)."""
    mods = []
    for name in EFFECTS:
        try:
            mods.append(importlib.import_module(f"benchmarks.papers.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"benchmarks.papers.{name}":
                raise
            print(f"papers: effect {name} is not built; left off the page", file=sys.stderr)
    if not names:
        return mods
    wanted = set(names)
    picked = [m for m in mods if m.__name__.rsplit(".", 1)[1] in wanted or str(m.NUMBER) in wanted]
    unknown = wanted - {m.__name__.rsplit(".", 1)[1] for m in picked} - {str(m.NUMBER) for m in picked}
    if unknown:
        raise SystemExit(f"unknown effect(s) {', '.join(sorted(unknown))}; known: {', '.join(EFFECTS)} (or 1-8)")
    return picked


def effect_key(mod: ModuleType) -> str:
    return mod.__name__.rsplit(".", 1)[1]


class Book:
    """records.json: the runs of one commit and mode, saved after every run."""

    def __init__(self, path: Path, commit: str, quick: bool, log: Callable[[str], None]) -> None:
        self.path, self.commit, self.quick = path, commit, quick
        self.records: list[Record] = []
        if not path.exists():
            return
        data = json.loads(path.read_text())
        if data.get("commit") == commit and data.get("quick") == quick:
            self.records = [Record.from_json(r) for r in data.get("records", [])]
            return
        aside = path.with_name(
            f"records-{str(data.get('commit', 'unknown'))[:12]}{'-quick' if data.get('quick') else ''}.json"
        )
        path.replace(aside)
        log(
            f"papers: the records in {path.name} are of commit {data.get('commit')}; kept aside as {aside.name}, starting afresh"
        )

    def done(self, case: Case, rep: int) -> bool:
        return any(r.case == case.id and r.effect == case.effect and r.rep == rep for r in self.records)

    def add(self, record: Record) -> None:
        self.records.append(record)
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        body = {"commit": self.commit, "quick": self.quick, "records": [asdict(r) for r in self.records]}
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        tmp.replace(self.path)

    def of(self, key: str) -> list[Record]:
        return [r for r in self.records if r.effect == key]


def plan(mods: list[ModuleType], quick: bool, reps: int | None) -> list[tuple[int, Case]]:
    """(repetition, case) in the order they run: repetitions outermost, then by link, then as listed."""
    order: list[tuple[int, Case]] = []
    reps = reps or (1 if quick else None)  # a smoke run is one repetition unless asked otherwise
    per_mod = [(mod, mod.cases(quick), reps or getattr(mod, "REPS", DEFAULT_REPS)) for mod in mods]
    for rep in range(1, max((n for _, _, n in per_mod), default=0) + 1):
        batch = [(rep, case) for _, cases, n in per_mod if rep <= n for case in cases]
        batch.sort(key=lambda rc: rc[1].profile or "")  # stable: keeps each effect's own order within a link
        order.extend(batch)
    return order


def measure_all(
    mods: list[ModuleType],
    book: Book,
    quick: bool,
    reps: int | None,
    budget_min: float | None,
    log: Callable[[str], None],
    context: Context | None = None,
) -> int:
    """Runs what is not measured yet; returns how many (case, rep) are still missing."""
    by_key = {effect_key(m): m for m in mods}
    todo = [(rep, case) for rep, case in plan(mods, quick, reps) if not book.done(case, rep)]
    if not todo:
        return 0
    ctx = context or Context(log=log)
    info = machine()
    started = time.monotonic()
    left = len(todo)
    try:
        for i, (rep, case) in enumerate(todo):
            if budget_min is not None and i > 0 and time.monotonic() - started > budget_min * 60:
                log(f"papers: budget of {budget_min:g} min used; {left} run(s) left for the next call")
                break
            log(f"papers: [{i + 1}/{len(todo)}] {case.key} rep {rep} on {case.profile or 'its own setup'}")
            t0 = time.monotonic()
            try:
                result = by_key[case.effect].measure(case, ctx)
            except Exception as exc:  # noqa: BLE001 - one failed case must not end a long run
                traceback.print_exc(file=sys.stderr)
                result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            result.setdefault("wall_s", round(time.monotonic() - t0, 2))
            date = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            book.add(Record(case.effect, case.id, rep, dict(case.params), result, book.commit, date, info))
            left -= 1
    finally:
        if context is None:
            ctx.close()
    return left


def render_page(mods: list[ModuleType], book: Book, docs: Path, command: str, total: int) -> str:
    """docs/papers.md from whatever records exist; charts beside it in papers/."""
    charts = docs.parent / "papers"
    charts.mkdir(parents=True, exist_ok=True)
    sections: list[tuple[ModuleType, Section]] = []
    for mod in mods:
        recs = book.of(effect_key(mod))
        section = mod.render(recs, charts) if recs else Section("", NOT_MEASURED, "No run of this effect yet.")
        sections.append((mod, section))
    dates = sorted(r.date for r in book.records)
    machines = {json.dumps(r.machine, sort_keys=True) for r in book.records}
    lines = [
        INTRO.read_text().rstrip(),
        "",
        "## The effects, measured here",
        "",
        "Each paper's headline effect, measured on this project's emulated links (see",
        "[WAN testbed](testbed.md)), with a verdict drawn from the figures. Every figure below",
        "was produced by one command on one commit:",
        "",
        f"- command: `{command}` (resumable: it runs in budgeted pieces; see [Benchmarks](benchmarks.md))",
        f"- commit: `{book.commit}`{' (quick mode: tiny data, smoke figures only)' if book.quick else ''}",
        f"- runs: {len(book.records)} of {total} planned" + (f", {dates[0]} to {dates[-1]}" if dates else ""),
    ]
    for m in sorted(machines):
        d = json.loads(m)
        lines.append(
            f"- machine: {d['cpu']}, {d['cores']} cores, {d['mem_gib']} GiB, Linux {d['kernel']}; "
            f"Python loop of 2 million steps {d['python_loop_ms']} ms, SHA-256 of 64 MiB {d['sha256_64mib_ms']} ms"
        )
    lines += ["", "| effect | verdict |", "|---|---|"]
    lines += [f"| {mod.NUMBER}. {mod.TITLE} | {sec.verdict} |" for mod, sec in sections]
    for mod, sec in sections:
        lines += ["", f"### {mod.NUMBER}. {mod.TITLE}", "", f"Paper: {mod.PAPER}.", "", f"**Claim.** {mod.CLAIM}", ""]
        lines += [f"**Command.** `make papers PAPERS_ARGS='--effects {effect_key(mod)}'`", ""]
        lines += [f"**Verdict: {sec.verdict}.** {sec.why}", ""]
        if sec.table:
            lines += [sec.table, ""]
        lines += [f"![{mod.TITLE}](papers/{name})" for name in sec.charts]
        if sec.notes:
            lines += ["", sec.notes]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.papers", description=__doc__.splitlines()[0])
    ap.add_argument("--effects", default="", help="comma-separated module names or numbers (default: all eight)")
    ap.add_argument("--quick", action="store_true", help="tiny data, one repetition: a smoke run, not figures")
    ap.add_argument("--reps", type=int, help="repetitions per case (default: each effect's own, else 3)")
    ap.add_argument("--budget-min", type=float, help="start no new run after this many minutes")
    ap.add_argument("--restart", action="store_true", help="set the existing records aside and start afresh")
    ap.add_argument("--render-only", action="store_true", help="measure nothing; rewrite the page from the records")
    ap.add_argument("--out", type=Path, help="records folder (default benchmarks/results/papers, or papers-quick)")
    ap.add_argument("--docs", type=Path, help="page to write (default docs/papers.md; quick: <out>/papers.md)")
    args = ap.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        ap.error("--reps must be at least 1")
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    names = [n.strip() for n in args.effects.split(",") if n.strip()]
    mods = load_effects(names)
    out = args.out or REPO / "benchmarks" / "results" / ("papers-quick" if args.quick else "papers")
    docs = args.docs or (out / "papers.md" if args.quick or args.out else REPO / "docs" / "papers.md")
    path = out / "records.json"
    if args.restart and path.exists():
        path.replace(path.with_name(f"records-restarted-{int(time.time())}.json"))
    book = Book(path, commit(), args.quick, log)
    if book.commit.endswith("+dirty"):
        log("papers: the working tree differs from HEAD: these figures belong to no commit; commit first")
    all_mods = load_effects()
    left = 0
    if not args.render_only:
        if os.geteuid() != 0:
            raise SystemExit("papers: needs root (network namespaces, TUN devices, cgroups): run it with sudo")
        left = measure_all(mods, book, args.quick, args.reps, args.budget_min, log)
    total = len(plan(all_mods, args.quick, args.reps))
    command = "make papers" if not args.quick else "python -m benchmarks.papers --quick"
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(render_page(all_mods, book, docs, command, total))
    log(
        f"papers: wrote {docs} ({len(book.records)} of {total} runs measured{'; run again to continue' if left else ''})"
    )
    return 0
