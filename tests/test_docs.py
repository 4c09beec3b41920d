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
