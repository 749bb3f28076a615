"""The shape of the code, checked: no import cycle between files, layers import only downward, no long module.

Every ``import`` statement counts, wherever it stands: at the top, inside a function, or under
``if TYPE_CHECKING:`` (a back edge hidden there is still a design cycle: the importer drives the imported object).
``from package import name`` counts as an edge to ``package.name`` when that is a module, else to the package.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Top-level packages, lowest layer first: each may import only the ones before it (shared DESIGN.md "Layers").
LAYERS = ("transport", "runtime", "launcher", "actors")
MAX_LINES = 400


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file under the given top-level packages."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")[: None if is_package else -1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in known:  # `import a.b.c` of a non-module attribute: its nearest module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, counting every import statement in the file."""
    graph = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        graph[module] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= _targets(module, is_package, node, files)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in component)


def test_no_import_cycle_between_files() -> None:
    graph = import_graph(module_files(ROOT, LAYERS))
    found = cycles(graph)
    assert not found, "import cycles (break each with a narrow seam, not a hidden import):\n" + "\n".join(
        describe(component, graph) for component in found
    )


def test_layers_import_only_downward() -> None:
    graph = import_graph(module_files(ROOT, LAYERS))
    upward = []
    for module, targets in graph.items():
        level = LAYERS.index(module.partition(".")[0])
        upward += [f"{module} -> {t}" for t in sorted(targets) if LAYERS.index(t.partition(".")[0]) > level]
    assert not upward, "imports from a higher layer (order: " + " < ".join(LAYERS) + "):\n" + "\n".join(upward)


def test_no_module_over_400_lines() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    assert tracked, "git listed no Python file"
    long = {
        name: count
        for name in tracked
        if (ROOT / name).exists() and (count := len((ROOT / name).read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"


@pytest.mark.parametrize("hidden", ["top", "function", "type_checking"])
def test_the_checker_sees_a_cycle_however_the_import_is_written(tmp_path: Path, hidden: str) -> None:
    back_edge = {
        "top": "from pkg import a\n",
        "function": "def f():\n    from pkg.a import A\n",
        "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
    }[hidden]
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\nclass A: ...\n")
    (package / "b.py").write_text(back_edge + "class B: ...\n")
    (package / "c.py").write_text("import pkg.a\n")  # imports into the cycle, not part of it
    graph = import_graph(module_files(tmp_path, ["pkg"]))
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
