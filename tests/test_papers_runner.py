"""`make papers`' runner: interleaved order, resume per commit, budget, failures kept, the page from partial records."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.papers import EFFECTS, runner
from benchmarks.papers.common import IN_PART, NOT_MEASURED, Case, Record, Section, md_table, median


def fake_effect(key: str, number: int, ids: list[str], profile_of=lambda i: "wan50", reps: int = 2, fail=()):
    mod = ModuleType(f"benchmarks.papers.{key}")
    mod.NUMBER, mod.TITLE, mod.PAPER, mod.CLAIM, mod.REPS = number, f"title {key}", f"paper of {key}", "claim", reps
    mod.calls = []

    def cases(quick: bool) -> list[Case]:
        return [Case(key, i, profile_of(i), {"x": n}) for n, i in enumerate(ids)]

    def measure(case: Case, ctx) -> dict:
        mod.calls.append((case.id, len(mod.calls)))
        if case.id in fail:
            raise RuntimeError("link went down")
        return {"ok": True, "mbit": 10.0 * (case.params["x"] + 1)}

    def render(records: list[Record], charts: Path) -> Section:
        rows = [[r.case, r.rep, r.result.get("mbit")] for r in records]
        return Section(md_table(["case", "rep", "Mbit/s"], rows), IN_PART, f"{len(records)} records")

    mod.cases, mod.measure, mod.render = cases, measure, render
    return mod


class NoContext:
    def close(self) -> None:
        pass


def book(tmp_path: Path, commit: str = "abc", quick: bool = False) -> runner.Book:
    return runner.Book(tmp_path / "records.json", commit, quick, log=lambda m: None)


def test_every_effect_module_is_listed_once_and_numbered_in_page_order():
    assert len(EFFECTS) == len(set(EFFECTS)) == 8
    mods = runner.load_effects()
    assert [runner.effect_key(m) for m in mods] == list(EFFECTS)
    assert [m.NUMBER for m in mods] == sorted(m.NUMBER for m in mods)
    for mod in mods:
        assert mod.TITLE and mod.PAPER and mod.CLAIM
        assert mod.cases(True), f"{mod.__name__} has no quick cases"


def test_plan_interleaves_repetitions_and_groups_cases_by_link():
    a = fake_effect("ea", 1, ["a1", "a2"], profile_of=lambda i: "wan50" if i == "a1" else "lan", reps=2)
    b = fake_effect("eb", 2, ["b1"], profile_of=lambda i: "lan", reps=1)
    order = [(rep, c.id) for rep, c in runner.plan([a, b], quick=False, reps=None)]
    # every first repetition before any second; within one, the lan cases together
    assert order == [(1, "a2"), (1, "b1"), (1, "a1"), (2, "a2"), (2, "a1")]
    assert len(runner.plan([a, b], quick=False, reps=3)) == 9


def test_resume_measures_only_what_is_missing_and_a_new_commit_starts_afresh(tmp_path):
    mod = fake_effect("ea", 1, ["a1", "a2", "a3"], reps=2)
    first = book(tmp_path)
    # a budget of 0 minutes still makes one run, then stops
    left = runner.measure_all([mod], first, False, None, 0, log=lambda m: None, context=NoContext())
    assert (len(first.records), left) == (1, 5)
    again = book(tmp_path)
    assert len(again.records) == 1
    left = runner.measure_all([mod], again, False, None, None, log=lambda m: None, context=NoContext())
    assert left == 0 and len(again.records) == 6
    assert [c for c, _ in mod.calls] == ["a1", "a2", "a3", "a1", "a2", "a3"]
    assert sorted((r.case, r.rep) for r in again.records) == sorted((c, r) for c in ("a1", "a2", "a3") for r in (1, 2))

    other = book(tmp_path, commit="def")
    assert other.records == []
    assert (tmp_path / "records-abc.json").exists()
    assert len(json.loads((tmp_path / "records-abc.json").read_text())["records"]) == 6
    # quick records never mix with full ones either
    assert book(tmp_path, commit="def", quick=True).records == []


def test_a_failing_case_is_recorded_as_failed_and_the_run_goes_on(tmp_path):
    mod = fake_effect("ea", 1, ["a1", "bad", "a3"], reps=1, fail={"bad"})
    b = book(tmp_path)
    assert runner.measure_all([mod], b, False, None, None, log=lambda m: None, context=NoContext()) == 0
    results = {r.case: r.result for r in b.records}
    assert results["bad"]["ok"] is False and "link went down" in results["bad"]["error"]
    assert results["a3"]["ok"] is True
    assert all(r.commit == "abc" and r.machine["cores"] >= 1 for r in b.records)


def test_page_renders_partial_records_and_says_what_is_missing(tmp_path):
    a = fake_effect("ea", 1, ["a1"], reps=1)
    b = fake_effect("eb", 2, ["b1"], reps=1)
    bk = book(tmp_path)
    runner.measure_all([a], bk, False, None, None, log=lambda m: None, context=NoContext())
    page = runner.render_page([a, b], bk, tmp_path / "docs" / "papers.md", "make papers", total=2)
    assert "runs: 1 of 2 planned" in page
    assert "### 1. title ea" in page and "### 2. title eb" in page and "# Papers" in page
    assert f"**Verdict: {IN_PART}.** 1 records" in page
    assert f"**Verdict: {NOT_MEASURED}.**" in page
    assert "| a1 | 1 | 10.0 |" in page
    assert "commit: `abc`" in page


def test_median_and_table_helpers():
    assert median([3.0, None, 1.0, 2.0]) == 2.0
    assert median([None]) is None
    table = md_table(["a", "b"], [["x", 1234.5], ["y", None]])
    assert table.splitlines()[2] == "| x | 1,234 |" and table.splitlines()[3] == "| y | - |"


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--effects", "e99_nothing", "--render-only"]])
def test_bad_arguments_fail_clearly(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        runner.main(argv)
    assert exc.value.code != 0


def test_the_measured_commit_ignores_commits_of_the_run_own_output(tmp_path):
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("commit", "-qm", "code")
    code = git("rev-parse", "HEAD")
    assert runner.commit(tmp_path) == code
    for path in ("docs/papers.md", "docs/papers/e1.png", "benchmarks/results/papers/records.json"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("figures\n")
    assert runner.commit(tmp_path) == code  # the run's own output, uncommitted: still that commit
    git("add", ".")
    git("commit", "-qm", "results")
    assert git("rev-parse", "HEAD") != code and runner.commit(tmp_path) == code
    (tmp_path / "code.py").write_text("x = 2\n")
    assert runner.commit(tmp_path) == f"{code}+dirty"
    git("commit", "-qam", "change")
    assert runner.commit(tmp_path) == git("rev-parse", "HEAD")
