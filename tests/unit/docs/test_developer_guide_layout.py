"""The developer guide's wing table is the source tree's import graph.

docs/developer-guide.md lists the wings of ``src/python/nexrl`` (one per
process, over a shared ``core``) and their rules. These tests read that table
and the code's imports (module level and inside functions, which is where
cycles used to hide) and check each rule: the guide lists every wing, ``core``
imports no wing, a process wing imports only ``core`` and itself (the driver
may use every wing), no two packages import each other through any path, and
nothing in ``nexrl`` imports the engines in ``backends``, whose own folders
mirror the wings and form no cycle either.
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
# Beside the wings: the package, `python -m nexrl`, and NexRL's documented evaluator API.
BESIDE = {"__init__": set(), "__main__": {"driver"}, "rollout_worker": {"rollout"}}
PROCESS_WINGS = {"rollout", "trainer", "inference"}


def wing_table() -> set[str]:
    """The wings the guide's rows ``| `core/` | every process | ... |`` name."""
    return set(re.findall(r"^\|\s*`([a-z_]+)/`\s*\|", GUIDE.read_text(), re.M))


def entries() -> set[str]:
    """The folders and modules directly under ``nexrl/``."""
    dirs = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return dirs | {p.stem for p in SRC.glob("*.py")}


def is_module(dotted: str) -> bool:
    where = SRC.parent / dotted.replace(".", "/")
    return where.is_dir() or where.with_suffix(".py").exists()


def imports(path: Path) -> set[tuple[str, int]]:
    """(module, line) of every ``nexrl.*`` this file imports, anywhere in it; in
    ``from nexrl.x import y`` the module is ``nexrl.x.y`` where ``y`` is a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "nexrl":
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out.add((sub if is_module(sub) else node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out.update((a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "nexrl")
    return out


WINGS = {"core", "driver", "rollout", "trainer", "inference"}
# What each part may import besides itself: core nothing, a process wing core, the
# driver every wing; beside them, `python -m nexrl` the driver and NexRL's
# documented evaluator API the rollout wing.
MAY_IMPORT = {
    "core": set(),
    "rollout": {"core"},
    "trainer": {"core"},
    "inference": {"core"},
    "driver": WINGS | {"rollout_worker"},
    "__init__": set(),
    "__main__": {"driver"},
    "rollout_worker": {"rollout"},
}


def crossings(here: str, modules: set[tuple[str, int]]) -> list[str]:
    """``module (line N)`` for each import of ``here`` (a wing, or a file beside them)
    that the rules forbid."""
    wrong = []
    for module, line in sorted(modules):
        parts = module.split(".")
        there = parts[1] if len(parts) > 1 else here
        if there not in ({here, "__version__"} | MAY_IMPORT[here]):
            wrong.append(f"{module} (line {line})")
    return wrong


def test_core_imports_no_wing_and_a_process_wing_only_core_and_itself() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        here = path.relative_to(SRC).with_suffix("").parts[0]
        wrong += [f"{path}: {here} imports {x}" for x in crossings(here, imports(path))]
    assert not wrong, "\n".join(wrong)


def test_the_rules_catch_a_crossing() -> None:
    assert crossings("rollout", {("nexrl.trainer.loss", 3), ("nexrl.core.pool", 4)}) == [
        "nexrl.trainer.loss (line 3)"
    ]
    assert crossings("core", {("nexrl.driver.cli", 1)}) == ["nexrl.driver.cli (line 1)"]
    assert crossings("driver", {("nexrl.trainer.spec", 1), ("nexrl.inference", 2)}) == []


def node_of(parts: tuple[str, ...] | list[str]) -> str | None:
    """A package of a wing (``core.pool``), or the wing itself for its own modules."""
    if not parts or not ((SRC / parts[0]).is_dir() or (SRC / f"{parts[0]}.py").exists()):
        return None
    if len(parts) >= 2 and (SRC / parts[0] / parts[1]).is_dir():
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def walk(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path, node, nxt]
            if nxt not in state and (found := walk(nxt, [*path, node])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := walk(start, [])):
            return found
    return None


def test_no_two_packages_import_each_other() -> None:
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        here = node_of(path.relative_to(SRC).with_suffix("").parts)
        for module, _ in imports(path):
            there = node_of(module.split(".")[1:])
            if here and there and there != here:
                graph.setdefault(here, set()).add(there)
    found = find_cycle(graph)
    assert found is None, "package cycle in nexrl: " + " -> ".join(found or [])


def test_a_cycle_is_found_where_there_is_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


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


def test_backends_folders_are_named_after_the_wing_that_runs_them() -> None:
    folders = {p.name for p in BACKENDS.iterdir() if (p / "__init__.py").exists()}
    assert folders <= wing_table(), (
        f"backends/ folders that are not wings: {sorted(folders - wing_table())}"
    )


def test_backends_packages_form_no_cycle() -> None:
    """The graph of backends' packages (backends.inference, backends.inference.embedded,
    backends.trainer, ...: one node a folder) has no cycle."""
    root = BACKENDS.parent

    def folder_of(module: str) -> str:
        return module if (root / module.replace(".", "/")).is_dir() else module.rpartition(".")[0]

    graph: dict[str, set[str]] = {}
    for path in sorted(BACKENDS.rglob("*.py")):
        here = ".".join(path.parent.relative_to(root).parts)
        for module, _ in _imports_of(path, "backends"):
            if (target := folder_of(module)) != here:
                graph.setdefault(here, set()).add(target)
    found = find_cycle(graph)
    assert found is None, "package cycle in backends: " + " -> ".join(found or [])


MAX_MODULE_LINES = 400  # "one responsibility per module; modules of a few hundred lines"


def test_no_module_is_over_the_size_agreed() -> None:
    """Every module of ``nexrl`` and ``backends`` (vLLM's plugin included) stays under
    ``MAX_MODULE_LINES``: a module that grows past it is split by responsibility."""
    roots = (SRC, SRC.parent / "backends")
    sizes = {
        str(p.relative_to(SRC.parent)): len(p.read_text().splitlines())
        for root in roots
        for p in root.rglob("*.py")
    }
    assert len(sizes) > 250  # both trees were found
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}
