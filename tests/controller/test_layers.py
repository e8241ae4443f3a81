"""Imports go one way (controller/README.md, "Modules"): each controller module imports only
modules of lower layers, so setting a switch up walks down the layers, never back and forth;
and no package of the repository's `topologies` imports itself round in a circle. Read from
the source (every import statement, also those inside functions)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Lower numbers sit lower: a module may import only modules of a lower layer.
CONTROLLER_LAYERS = {
    "errors": 0,
    "entries": 1,
    "registers": 2,
    "switch": 3,
    "control": 4, "allreduce": 4,       # generic entity operations; planning (talks to no switch)
    "install": 5,                       # a plan onto a switch
    "fabric": 6, "pool": 6,
    "__main__": 7, "__init__": 7,
}


def imports(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / package).glob("*.py")):
        mine = found.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    target = node.module
                elif node.module and node.module.startswith(f"{package}."):
                    target = node.module.split(".")[1]
                elif node.module == package:
                    mine.update(a.name for a in node.names if (REPO / package / f"{a.name}.py").exists())
                    continue
                else:
                    continue
                if target:
                    mine.add(target.split(".")[0])
            elif isinstance(node, ast.Import):
                mine.update(a.name.split(".")[1] for a in node.names if a.name.startswith(f"{package}."))
    return found


def test_every_controller_module_imports_only_lower_layers() -> None:
    graph = imports("controller")
    assert set(graph) == set(CONTROLLER_LAYERS), "a module was added or removed: give it its layer here"
    assert {"allreduce", "control"} <= graph["install"]      # the walk sees their imports at all
    upward = [f"{m} -> {t}" for m, targets in graph.items() for t in targets
              if CONTROLLER_LAYERS[t] >= CONTROLLER_LAYERS[m]]
    assert upward == []
    assert "control" not in graph["allreduce"] and "switch" not in graph["allreduce"]   # planning talks to no switch


def test_topologies_has_no_import_cycle() -> None:
    graph = imports("topologies")
    assert graph["fabric"] and graph["cleanup"]          # the walk sees their imports at all

    def cycle_from(module: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(graph.get(module, ())):
            if nxt in path:
                return path[path.index(nxt):] + (nxt,)
            found = cycle_from(nxt, path + (nxt,))
            if found:
                return found
        return None

    cycles = [c for m in graph if (c := cycle_from(m, (m,)))]
    assert cycles == []
