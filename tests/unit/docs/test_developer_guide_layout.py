"""The developer guide's layer table is the source tree's import graph.

docs/developer-guide.md lists every package of ``src/python/nexrl`` with a
layer number and the process it runs in. These tests read that table and the
code's imports (module level and inside functions, which is where cycles used
to hide) and check the guide's two claims: every package is in the table, and a
package imports only packages of lower layers (so there is no cycle). The
engines in ``backends`` sit above all of ``nexrl``: nothing in ``nexrl`` imports
them (they register themselves), and their own packages form no cycle either.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import backends
import nexrl

SRC = Path(nexrl.__file__).parent
BACKENDS = Path(backends.__file__).parent
GUIDE = Path("docs/developer-guide.md")


def layer_table() -> dict[str, int]:
    """``{package: layer}`` from the guide's rows ``| 3 | `pool/` | ... |``."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*`([a-z_]+)(?:/|\.py)`\s*\|", GUIDE.read_text(), re.M)
    return {name: int(layer) for layer, name in rows}


def packages() -> set[str]:
    dirs = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    mods = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    return dirs | mods


def package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(package, line) of every ``nexrl.<package>`` this file imports, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "nexrl":
                continue
            if len(parts) > 1:
                out.add((parts[1], node.lineno))
            else:  # from nexrl import pool
                out.update((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "nexrl" and len(parts) > 1:
                    out.add((parts[1], node.lineno))
    return out


def test_the_guide_lists_every_package_of_the_tree_and_no_other() -> None:
    table = layer_table()
    assert table, f"no layer table found in {GUIDE}"
    assert set(table) == packages(), (
        f"missing from the guide: {sorted(packages() - set(table))}; "
        f"in the guide but not in the tree: {sorted(set(table) - packages())}"
    )


def test_packages_import_only_lower_layers() -> None:
    table = layer_table()
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if path.parent == SRC and path.stem == "__init__":
            continue
        here = package_of(path)
        for pkg, line in sorted(imported_packages(path)):
            if pkg != here and pkg in table and table[pkg] >= table[here]:
                wrong.append(
                    f"{path}:{line}: {here} (layer {table[here]}) imports {pkg} "
                    f"(layer {table[pkg]})"
                )
    assert not wrong, "\n".join(wrong)


def _imports_of(path: Path, top: str) -> set[tuple[str, int]]:
    """(module, line) of every import of ``top`` or ``top.*`` in this file, anywhere."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == top:
                out.add((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out.update((a.name, node.lineno) for a in node.names if a.name.split(".")[0] == top)
    return out


def test_nexrl_never_imports_backends() -> None:
    wrong = [
        f"{path}:{line}: imports {module}"
        for path in sorted(SRC.rglob("*.py"))
        for module, line in sorted(_imports_of(path, "backends"))
    ]
    assert not wrong, "\n".join(wrong)


def test_backends_packages_form_no_cycle() -> None:
    """The graph of backends' packages (backends.inference, backends.inference.embedded,
    backends.training, ...: one node a folder) has no cycle."""
    root = BACKENDS.parent

    def folder_of(module: str) -> str:
        return module if (root / module.replace(".", "/")).is_dir() else module.rpartition(".")[0]

    graph: dict[str, set[str]] = {}
    for path in sorted(BACKENDS.rglob("*.py")):
        here = ".".join(path.parent.relative_to(root).parts)
        for module, _ in _imports_of(path, "backends"):
            if (target := folder_of(module)) != here:
                graph.setdefault(here, set()).add(target)
    state: dict[str, str] = {}

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path, node, nxt]
            if nxt not in state and (found := cycle_from(nxt, [*path, node])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := cycle_from(start, [])):
            raise AssertionError("package cycle in backends: " + " -> ".join(found))
