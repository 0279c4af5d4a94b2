"""The shape of the code, kept by a test: layers, packages and stages without import circles.

Every module's imports are read with ``ast`` — at module level and inside
functions alike, since a deferred import is still a dependency a reader has to
hold in their head. The rules (docs/architecture.md):

- an app imports only from the apps below it: singularity ← hitl ← grading ← evolution;
- evolution's packages (``evolution.<first part>``) form no circle;
- the stage modules of ``evolution.loop`` import no other stage (only the machine knows the order);
- no module inside grading/ or hitl/ is part of an import circle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("singularity", "hitl", "grading", "evolution")

#: The seed's "loop in one picture", one module a stage; ``machine`` alone knows their order.
STAGES = (
    "opening",
    "brief",
    "proposer",
    "decide",
    "apply",
    "check",
    "merge",
    "watch",
    "verdict",
    "revert",
    "settle",
)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The project module a dotted import name lands in (a name inside a module is that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if MODULES[module].name != "__init__.py":
                parts = parts[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    owners = (_owner(name) for name in names)
    return [owner for owner in owners if owner and owner != module]


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges[module].update(_targets(module, node))
    return edges


GRAPH = _graph()


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    nodes = set(edges) | {o for targets in edges.values() for o in targets}
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return found


def _collapsed(prefix: str, key) -> dict[str, set[str]]:
    """The import graph of modules under ``prefix``, each module replaced by ``key(module)`` (None: left out)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in GRAPH.items():
        if not module.startswith(prefix) or key(module) is None:
            continue
        for target in targets:
            if target.startswith(prefix) and key(target) is not None and key(target) != key(module):
                edges[key(module)].add(key(target))
    return edges


def test_an_app_imports_only_from_the_apps_below_it():
    rank = {app: i for i, app in enumerate(APPS)}
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if rank[target.split(".")[0]] > rank[module.split(".")[0]]
    )
    assert upward == [], "imports that run up the stack (singularity ← hitl ← grading ← evolution):\n" + "\n".join(
        upward
    )


def test_evolutions_packages_form_no_import_circle():
    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else module

    circles = _circles(_collapsed("evolution", package))
    assert circles == [], f"import circles between evolution's packages: {circles}"


def test_the_stage_modules_of_the_loop_import_no_other_stage():
    stages = {f"evolution.loop.{name}" for name in STAGES}
    present = stages & set(MODULES)
    assert present == stages, f"stage modules missing from evolution/loop/: {sorted(stages - present)}"
    crossings = sorted(
        f"{module} imports {target}" for module in stages for target in GRAPH.get(module, ()) if target in stages
    )
    assert crossings == [], "a stage imports another stage (only evolution.loop.machine knows the order):\n" + (
        "\n".join(crossings)
    )


def test_the_loops_modules_form_no_import_circle():
    circles = _circles(_collapsed("evolution.loop", lambda m: m))
    assert circles == [], f"import circles inside evolution/loop/: {circles}"


def test_grading_and_hitl_have_no_import_circle():
    for app in ("grading", "hitl"):
        circles = _circles(_collapsed(app, lambda m: m))
        assert circles == [], f"import circles inside {app}/: {circles}"
