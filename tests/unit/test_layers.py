"""The package's layers hold: no module imports a layer above its own, and no import cycles.

Every ``import`` counts, including those inside functions and under ``TYPE_CHECKING``: a lazy
import hides a cycle from the interpreter, not from the reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline_steps"

# Lower numbers sit lower; a module may import its own layer and the layers below it.
LAYERS = {
    "core": 0,
    "tasks": 0,
    "domain": 1,
    "quality": 2,
    "evaluation": 2,
    "tuning": 2,
    "engines": 3,
    "steps": 4,
    "orchestration": 5,
    "services": 5,
    "commands": 6,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def resolve(name: str) -> str | None:
    """The package module an imported name lives in (``None`` outside the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> Iterator[str]:
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = resolve(name) if name.startswith("pipeline_steps") else None
            if target and target != module:
                yield target


GRAPH = {module: sorted(set(imports_of(module))) for module in MODULES}


def layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"
    return top, LAYERS[top]


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_every_package_has_a_layer() -> None:
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert packages == set(LAYERS)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{module} ({layer(module)[0]}) imports {target} ({layer(target)[0]})"
        for module, targets in GRAPH.items()
        for target in targets
        if layer(target)[1] > layer(module)[1]
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles() -> None:
    assert not cycles(GRAPH), "\n".join(" <-> ".join(c) for c in cycles(GRAPH))


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": ["b"], "b": ["a"], "c": ["a"]}, [["a", "b"]]),
        ({"a": ["b"], "b": ["c"], "c": []}, []),
        ({"a": ["b"], "b": ["c"], "c": ["a"]}, [["a", "b", "c"]]),
    ],
)
def test_cycle_finder(graph: dict[str, list[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected


def test_imports_inside_functions_count() -> None:
    assert "pipeline_steps.commands.serving" in GRAPH["pipeline_steps.commands.cli"]
