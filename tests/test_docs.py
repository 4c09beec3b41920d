"""The docs site builds with MkDocs in strict mode (warnings fail) and documents every operator and sensor."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.airflow_env import REPO, airflow_env

_DISCOVER = r"""
import importlib, inspect, json, pkgutil
from airflow.sdk import BaseOperator
found = {}
for package_name in ("airflow_transfer.operators", "airflow_transfer.sensors"):
    package = importlib.import_module(package_name)
    names = [package_name] + [m.name for m in pkgutil.walk_packages(package.__path__, package_name + ".")]
    for module_name in names:
        module = importlib.import_module(module_name)
        exported = getattr(module, "__all__", None)
        for name, obj in vars(module).items():
            if exported is not None and name not in exported:
                continue
            if name.startswith("_") or not inspect.isclass(obj) or not issubclass(obj, BaseOperator):
                continue
            if obj.__module__.startswith("airflow_transfer.") and not inspect.isabstract(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = {"name": obj.__name__, "doc": inspect.getdoc(obj) or ""}
print(json.dumps(found))
"""


def _public_operator_classes(env: dict) -> dict[str, dict]:
    """Public operator and sensor classes of the provider, found independently of the docs hook.

    In a subprocess, so Airflow's configuration never loads into the test process.
    """
    proc = subprocess.run([sys.executable, "-c", _DISCOVER], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_docs_build_strict_with_a_reference_page_per_operator_and_sensor(tmp_path):
    site = tmp_path / "site"
    env = airflow_env(tmp_path / "airflow-home")  # the hook imports the operators, hence Airflow
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]

    classes = _public_operator_classes(env)
    assert "airflow_transfer.operators.transfer.TunedTransferOperator" in classes
    for dotted, cls in classes.items():
        kind = "sensors" if ".sensors." in dotted else "operators"
        page = site / "reference" / kind / cls["name"] / "index.html"
        assert page.exists(), f"no reference page for {dotted}"
        html = page.read_text()
        assert cls["doc"], f"{dotted} has no docstring"
        first_line = cls["doc"].splitlines()[0]
        assert first_line.split("`")[0][:40] in html, f"{dotted}: docstring not rendered"
        params = [
            line.split(":param ", 1)[1].split(":", 1)[0]
            for line in cls["doc"].splitlines()
            if line.strip().startswith(":param ")
        ]
        for name in params:
            assert f"<code>{name}</code>" in html or f">{name}<" in html, f"{dotted}: parameter {name} missing"

    for page in (
        "quickstart",
        "concepts",
        "tuning",
        "integrity",
        "protocols",
        "ui",
        "benchmarks",
        "troubleshooting",
        "durability",
        "store",
        "transfers",
        "profilers",
        "testbed",
    ):
        assert (site / page / "index.html").exists(), page
    ui = (site / "ui" / "index.html").read_text()
    for shot in ("ui-transfers.png", "ui-transfer.png", "ui-in-airflow.png", "ui-tuning.png", "ui-protocols.png"):
        assert shot in ui and (site / "img" / shot).exists(), shot


# --- the stable interfaces are written down in docs/ ---------------------------------------


def _subcommands():
    import argparse

    from airflow_transfer import cli

    parser = cli._parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


def _mentions(text: str, word: str) -> bool:
    """`word` appears on its own (not as the prefix of a longer flag or key)."""
    import re

    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text) is not None


def test_the_cli_reference_names_every_subcommand_and_flag():
    doc = (REPO / "docs" / "cli.md").read_text()
    missing = []
    commands = _subcommands()
    assert {"copy", "plan", "list", "profile", "query"} <= set(commands)
    for name, parser in commands.items():
        if f"airflow-transfer {name}" not in doc:
            missing.append(name)
        for action in parser._actions:
            missing += [
                f"{name} {o}" for o in action.option_strings if o not in ("-h", "--help") and not _mentions(doc, o)
            ]
    assert not missing, f"docs/cli.md does not mention: {missing}"


def test_the_summary_schema_documents_every_top_level_key():
    from airflow_transfer.summary import ORDER, SHAPES

    doc = (REPO / "docs" / "summary.md").read_text()
    assert set(ORDER) == {k for keys in SHAPES.values() for k in keys}
    # the summary's own keys, the sections a session adds, and what a failed --json and an operator add
    keys = [*ORDER, "server", "replicas", "protocols", "protocol_order", "files_sent_twice_in_full", "error", "state"]
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing, f"docs/summary.md does not document: {missing}"
    from airflow_transfer.cli_endpoint import error_object
    from airflow_transfer.errors import AuthError

    error = error_object(AuthError("refused", "h", "fix"), "refused (h): fix", 1)
    assert [k for k in error if f"`{k}`" not in doc] == []


def test_the_benchmark_results_schema_documents_every_key_of_latest_json():
    doc = (REPO / "docs" / "summary.md").read_text()
    section = doc[doc.index("## The benchmark results file") :]
    results = json.loads((REPO / "benchmarks" / "results" / "latest.json").read_text())
    missing: list[str] = []

    def walk(value, path: str, depth: int) -> None:
        if depth > 3:
            return
        if isinstance(value, dict):
            for key, inner in value.items():
                if f"`{key}`" not in section:
                    missing.append(path + key)
                walk(inner, f"{path}{key}.", depth + 1)
        elif isinstance(value, list) and value:
            walk(value[0], f"{path}[].", depth + 1)

    walk(results, "", 0)
    assert results["runs"] and not missing, f"docs/summary.md does not document: {missing}"


def test_nothing_in_the_repository_cites_a_file_outside_it():
    # spelt in two parts, so this file does not cite them itself
    for pattern in ("DESIGN" + ".md", ".." + "/shared"):
        found = subprocess.run(
            ["git", "grep", "-n", "-F", pattern], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert found.returncode == 1 and not found.stdout, f"{pattern} is cited:\n{found.stdout[:2000]}"
