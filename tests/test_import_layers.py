"""The import contract of airflow_transfer/ ([tool.airflow_transfer.layers] in pyproject.toml).

Reads every module with `ast` (no import runs), takes its imports at any depth (inside
functions too; `if TYPE_CHECKING:` blocks excluded) and checks:

- no import cycle between modules (Tarjan's strongly connected components);
- the layer order: a module imports only from its own layer or lower ones, and never from
  another slice of its own layer ("a | b");
- only the Airflow surface imports `airflow` (the core runs without Airflow installed);
- every import inside a function says why on its line or the line above the group
  ("# heavy: ..."), ratcheted: the count of those without a reason may only go down.

A module-level import of a package counts as an import of its __init__ only (as in
import-linter). `from pkg import name` where pkg resolves `name` lazily through a literal
``_EXPORTS = {name: submodule}`` (tuning/__init__.py) counts as an import of that submodule.
"""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "airflow_transfer"
CONTRACT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["airflow_transfer"]["layers"]


@dataclass
class Module:
    name: str  # dotted, e.g. airflow_transfer.protocols.endpoint
    path: Path
    imports: dict[str, int] = field(default_factory=dict)  # imported module -> first line
    externals: dict[str, int] = field(default_factory=dict)  # top-level name of a third-party import -> line
    unexplained: list[int] = field(default_factory=list)  # lines of in-function imports without a reason


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _lazy_exports(tree: ast.Module) -> dict[str, str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def _load() -> dict[str, Module]:
    trees: dict[str, tuple[Path, ast.Module]] = {}
    for path in sorted((ROOT / PKG).rglob("*.py")):
        trees[_module_name(path)] = (path, ast.parse(path.read_text(), filename=str(path)))
    exports = {name: _lazy_exports(tree) for name, (path, tree) in trees.items() if path.name == "__init__.py"}
    modules: dict[str, Module] = {}
    for name, (path, tree) in trees.items():
        mod = modules[name] = Module(name, path)
        is_pkg = path.name == "__init__.py"
        lines = path.read_text().splitlines()

        def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
            if isinstance(node, ast.Import):
                return [a.name for a in node.names]
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                pkg = ".".join(base + ([node.module] if node.module else []))
            else:
                pkg = node.module or ""
            out = []
            for alias in node.names:
                sub = f"{pkg}.{alias.name}"
                if sub in trees:
                    out.append(sub)
                elif alias.name in exports.get(pkg, {}):
                    out.append(f"{pkg}.{exports[pkg][alias.name]}")
                else:
                    out.append(pkg)
            return out

        def record(node: ast.Import | ast.ImportFrom) -> None:
            for target in targets(node):
                if target == PKG or target.startswith(PKG + "."):
                    while target not in trees:  # `import airflow_transfer.x.y as z`, names of a module
                        target = target.rsplit(".", 1)[0]
                    if target != name:
                        mod.imports.setdefault(target, node.lineno)
                else:
                    mod.externals.setdefault(target.split(".")[0], node.lineno)

        def explained(group: list[ast.stmt]) -> bool:
            above = lines[group[0].lineno - 2].strip() if group[0].lineno > 1 else ""
            if above.startswith("#"):
                return True
            return all("#" in lines[n.lineno - 1] for n in group)

        def visit(stmts: list[ast.stmt], in_function: bool) -> None:
            group: list[ast.stmt] = []
            for node in [*stmts, None]:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    record(node)
                    group.append(node)
                    continue
                if group and in_function and not explained(group):
                    mod.unexplained.extend(n.lineno for n in group)
                group = []
                if node is None:
                    continue
                if isinstance(node, ast.If) and _is_type_checking(node.test):
                    visit(node.orelse, in_function)
                    continue
                inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                for attr in ("body", "orelse", "finalbody", "handlers", "cases"):
                    block = getattr(node, attr, None)
                    if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                        visit(block, inner)
                    elif isinstance(block, list):
                        for h in block:  # except handlers, match cases
                            visit(getattr(h, "body", []), inner)

        visit(tree.body, False)
    return modules


MODULES = _load()


def _rel(module: str) -> str:
    return module[len(PKG) + 1 :] if module != PKG else "__init__"


def _layers() -> list[list[list[str]]]:
    """[layer][slice] -> names, top layer first."""
    return [[part.split() for part in layer.split("|")] for layer in CONTRACT["stack"]]


def _place(module: str) -> tuple[int, int] | None:
    """(layer, slice) of a module: the longest name in the stack that is it or a package above it."""
    rel, best = _rel(module), None
    for li, layer in enumerate(_layers()):
        for si, names in enumerate(layer):
            for n in names:
                if (rel == n or rel.startswith(n + ".")) and (best is None or len(n) > best[0]):
                    best = (len(n), li, si)
    return None if best is None else best[1:]


def _edges() -> set[tuple[str, str]]:
    return {(m.name, t) for m in MODULES.values() for t in m.imports}


def _under(module: str, name: str) -> bool:
    """`module` is the module or package `name` (relative to airflow_transfer/) or inside it."""
    rel = _rel(module)
    return rel == name or rel.startswith(name + ".")


def _allow_entries() -> list[tuple[str, str]]:
    """[tool.airflow_transfer.layers] allow: "importer -> imported", each a module or a package."""
    return [tuple(x.strip() for x in entry.split("->")) for entry in CONTRACT.get("allow", [])]


def _allowed() -> set[tuple[str, str]]:
    return {(a, b) for a, b in _edges() if any(_under(a, x) and _under(b, y) for x, y in _allow_entries())}


def _sccs(edges: set[tuple[str, str]]) -> list[list[str]]:
    graph: dict[str, list[str]] = {m: [] for m in MODULES}
    for a, b in edges:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan; the graph is ~150 modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _where(a: str, b: str) -> str:
    m = MODULES[a]
    return f"{m.path.relative_to(ROOT)}:{m.imports[b]} {_rel(a)} -> {_rel(b)}"


def test_every_module_is_in_one_layer():
    unplaced = sorted(_rel(m) for m in MODULES if m != PKG and _place(m) is None)
    assert not unplaced, f"add these to [tool.airflow_transfer.layers] stack in pyproject.toml: {unplaced}"
    names = Counter(n for layer in _layers() for names in layer for n in names)
    assert not [n for n, c in names.items() if c > 1], "a name is in two layers"
    missing = [
        n for n in names if n != "__init__" and not any(_rel(m) == n or _rel(m).startswith(n + ".") for m in MODULES)
    ]
    assert not missing, f"the stack names modules that do not exist: {missing}"


def test_no_import_cycles():
    cycles = _sccs(_edges() - _allowed())
    assert not cycles, "import cycles (move the shared piece into a lower module):\n" + "\n".join(
        " <-> ".join(_rel(m) for m in c) for c in cycles
    )


def test_imports_go_down_the_layers():
    bad = []
    for a, b in sorted(_edges() - _allowed()):
        (la, sa), (lb, sb) = _place(a) or (0, 0), _place(b) or (len(_layers()), 0)
        if lb < la or (lb == la and sb != sa):
            bad.append(_where(a, b))
    assert not bad, (
        "imports against [tool.airflow_transfer.layers] (a module imports its own layer, its own "
        "slice, or lower layers):\n" + "\n".join(bad)
    )


def test_allow_list_has_no_stale_entries():
    edges = _edges()
    stale = [f"{x} -> {y}" for x, y in _allow_entries() if not any(_under(a, x) and _under(b, y) for a, b in edges)]
    assert not stale, f"remove these from [tool.airflow_transfer.layers] allow, they no longer happen: {stale}"


def test_only_the_airflow_surface_imports_airflow():
    surface = CONTRACT["airflow"]
    bad = [
        f"{m.path.relative_to(ROOT)}:{m.externals['airflow']}"
        for m in MODULES.values()
        if "airflow" in m.externals and not any(_under(m.name, s) for s in surface)
    ]
    assert not bad, f"Airflow imported outside the Airflow surface ({surface}): {bad}"


def test_imports_inside_functions_say_why():
    """Ratchet: an import inside a function keeps a heavy module out of import time (or breaks
    nothing else), and says so: `# heavy: pyarrow.parquet costs 0.2 s at import`."""
    found = sorted(f"{m.path.relative_to(ROOT)}:{line}" for m in MODULES.values() for line in m.unexplained)
    limit = CONTRACT["unexplained_function_imports"]
    assert len(found) <= limit, (
        f"{len(found) - limit} new import(s) inside functions without a reason: move them to the top of the "
        f"module, or add a comment on the line above saying why they must be lazy. All unexplained:\n"
        + "\n".join(found)
    )
    assert len(found) == limit, (
        f"only {len(found)} unexplained imports inside functions are left: lower "
        f"unexplained_function_imports in pyproject.toml to {len(found)}"
    )
