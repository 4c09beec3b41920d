"""MkDocs hook: one reference page per public operator and sensor, from their docstrings.

Operators and sensors are found by importing every module of
airflow_transfer.operators and airflow_transfer.sensors, so a new class gets
its page (and its nav entry) without anyone editing the docs. The page body is
a mkdocstrings directive; the text comes from the class docstring.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from mkdocs.structure.files import File

PACKAGES = {"operators": "airflow_transfer.operators", "sensors": "airflow_transfer.sensors"}


def discover() -> dict[str, list[type]]:
    from airflow.sdk import BaseOperator

    found: dict[str, list[type]] = {}
    for kind, package_name in PACKAGES.items():
        package = importlib.import_module(package_name)
        modules = [package] + [
            importlib.import_module(m.name) for m in pkgutil.walk_packages(package.__path__, package_name + ".")
        ]
        classes = {}
        for module in modules:
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and not name.startswith("_")
                    and obj.__module__ == module.__name__
                    and issubclass(obj, BaseOperator)
                    and not inspect.isabstract(obj)
                ):
                    classes[obj.__qualname__] = obj
        found[kind] = sorted(classes.values(), key=lambda c: c.__name__)
    return found


def page_path(kind: str, cls: type) -> str:
    return f"reference/{kind}/{cls.__name__}.md"


_FOUND: dict[str, list[type]] = {}


def on_config(config):
    _FOUND.clear()
    _FOUND.update(discover())
    reference: list = [{"Overview": "reference/index.md"}]
    for kind, classes in _FOUND.items():
        if classes:
            reference.append({kind.capitalize(): [{c.__name__: page_path(kind, c)} for c in classes]})
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Reference" in entry:
            entry["Reference"] = reference + [e for e in entry["Reference"] if e not in reference]
    return config


def _first_line(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def index_page() -> str:
    lines = [
        "# Operators and sensors",
        "",
        "Generated from the docstrings: every public operator and sensor of the provider has a page.",
        "Import paths are on each page; arguments are keyword-only.",
        "",
    ]
    for kind, classes in _FOUND.items():
        lines += [f"## {kind.capitalize()}", ""]
        if not classes:
            lines += [f"No {kind} in this version yet.", ""]
            continue
        lines += ["| Class | What it does |", "| --- | --- |"]
        lines += [f"| [{c.__name__}]({kind}/{c.__name__}.md) | {_first_line(c)} |" for c in classes]
        lines.append("")
    return "\n".join(lines)


def on_files(files, config):
    files.append(File.generated(config, "reference/index.md", content=index_page()))
    for kind, classes in _FOUND.items():
        for cls in classes:
            body = (
                f"# {cls.__name__}\n\n"
                f"`from {cls.__module__} import {cls.__name__}`\n\n"
                f"::: {cls.__module__}.{cls.__name__}\n"
            )
            files.append(File.generated(config, page_path(kind, cls), content=body))
    return files
