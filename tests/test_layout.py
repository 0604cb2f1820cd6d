"""The house rules of docs/design.md, checked on the source tree (they fail CI when broken).

- the import graph of kronlinalg/ has no circle;
- the shared packages (kronlinalg/common, kronlinalg/vendor) import no operation and not the
  planner; the planner imports no operation and no compiled extension (kronlinalg._ext);
- operations (modules that build an ``Operation``) never import each other;
- no benchmark or test imports a name starting with "_" from another module;
- no Python module of kronlinalg/ is over 700 lines;
- no KRONLINALG_* variable is read outside kronlinalg/common/config.py (C++: one reader,
  kernels/common/knobs.hpp), and every knob read is in config's table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "kronlinalg"
SHARED = ("kronlinalg.common", "kronlinalg.vendor")

if not (PKG / "_operation.py").exists():  # an installed copy of the tests without the source
    pytest.skip("the source tree is not here", allow_module_level=True)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, known: dict) -> set:
    """Every kronlinalg module `module` imports (function-level imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("kronlinalg"):
                    out.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_pkg, node)
            if not target.startswith("kronlinalg"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
    return {m for m in out if m in known and m != module}


def _graph() -> dict:
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def _operations() -> set:
    """Modules that build an Operation: the operations."""
    return {m for m, p in _modules().items()
            if re.search(r"^\w+ = Operation\(", p.read_text(encoding="utf-8"), re.M)}


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_circle():
    graph = _graph()
    # a package's __init__ importing its own submodules is not a circle through them
    edges = {m: {t for t in ts if not _in(t, m)} for m, ts in graph.items()}
    state, stack, circles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                circles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_operations_are_found():
    ops = _operations()
    assert {"kronlinalg.kron", "kronlinalg.structured"} <= ops, ops


def test_shared_packages_import_no_operation_and_not_the_planner():
    graph, ops = _graph(), _operations()
    bad = [(m, t) for m, ts in graph.items() if any(_in(m, s) for s in SHARED)
           for t in ts if t in ops or _in(t, "kronlinalg.planner")]
    assert not bad, bad


def test_planner_imports_no_operation_and_no_extension():
    graph, ops = _graph(), _operations()
    bad = [(m, t) for m, ts in graph.items() if _in(m, "kronlinalg.planner")
           for t in ts if t in ops or _in(t, "kronlinalg._ext")]
    assert not bad, bad
    # nor through a string import
    for path in (PKG / "planner").rglob("*.py"):
        assert "_ext" not in re.findall(r"import_module\([^)]*\)", path.read_text()), path


def test_operations_do_not_import_each_other():
    graph, ops = _graph(), _operations()
    bad = [(m, t) for m in ops for t in graph[m] if t in ops]
    assert not bad, bad


def _private_imports(path: Path) -> list:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    local = {p.stem for p in path.parent.glob("*.py")}  # a test's own helper modules
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            own = node.module.split(".")[0] in local
            if not own and any(part.startswith("_") and not part.startswith("__")
                               for part in node.module.split(".")):
                bad.append(f"from {node.module} import ...")
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and not own:
                    bad.append(f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if any(part.startswith("_") and not part.startswith("__")
                       for part in alias.name.split(".")):
                    bad.append(f"import {alias.name}")
    return bad


@pytest.mark.parametrize("folder", ["tests", "benchmarks", "asv_bench"])
def test_tests_and_benchmarks_import_no_private_name(folder):
    bad = {str(p.relative_to(ROOT)): b for p in (ROOT / folder).rglob("*.py")
           if (b := _private_imports(p))}
    assert not bad, bad


def test_no_module_over_700_lines():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 700}
    assert not long, long


def test_knobs_are_read_in_one_place():
    from kronlinalg.common import config

    config_py = PKG / "common" / "config.py"
    for path in PKG.rglob("*.py"):
        if path == config_py:
            continue
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"environ[^\n]*KRONLINALG_|getenv\([^)]*KRONLINALG_", text), path
    knobs_hpp = ROOT / "kernels" / "common" / "knobs.hpp"
    read = set()
    for path in (ROOT / "kernels").rglob("*"):
        if path.suffix not in (".h", ".hpp", ".cpp", ".cu", ".cuh") or path == knobs_hpp:
            continue
        text = path.read_text(encoding="utf-8")
        assert "getenv" not in text, f"{path}: read knobs through kernels/common/knobs.hpp"
        read |= set(re.findall(r'knob_\w+\("(KRONLINALG_\w+)"', text))
        read |= set(re.findall(r'Fp32Mode \w+\{?\(?"(KRONLINALG_\w+)"', text))
    for path in PKG.rglob("*.py"):
        read |= set(re.findall(r'config\.get\("(KRONLINALG_\w+)"\)', path.read_text()))
    missing = read - set(config.KNOBS)
    assert not missing, f"knobs read but not in kronlinalg/common/config.py: {sorted(missing)}"
