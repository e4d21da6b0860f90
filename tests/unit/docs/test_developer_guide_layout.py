"""The developer guide's layer table is the source tree's import graph.

docs/developer-guide.md lists every package of ``src/python/nexrl`` with a
layer number and the process it runs in. These tests read that table and the
code's imports (module level and inside functions, which is where cycles used
to hide) and check the guide's two claims: every package is in the table, and a
package imports only packages of lower layers (so there is no cycle).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nexrl

SRC = Path(nexrl.__file__).parent
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
