"""``nexrl.core.config`` is the bottom: it imports only itself, ``nexrl.core.errors`` and third-party
libraries (inside functions too), and every component's checks are registered."""

from __future__ import annotations

import ast
from pathlib import Path

import nexrl.core.config

CONFIG = Path(nexrl.core.config.__file__).parent
ALLOWED = ("nexrl.core.config", "nexrl.core.errors")


def _nexrl_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
    return [m for m in out if m == "nexrl" or m.startswith("nexrl.")]


def test_config_imports_nothing_above_it() -> None:
    files = sorted(CONFIG.rglob("*.py"))
    assert len(files) > 5
    bad = {
        str(f.relative_to(CONFIG)): m
        for f in files
        for m in _nexrl_imports(f)
        if not any(m == a or m.startswith(a + ".") for a in ALLOWED)
    }
    assert not bad, bad


def test_every_component_registers_its_checks() -> None:
    from nexrl.core.config.checks import CHECKS
    from nexrl.driver.recipe.load import CHECK_MODULES

    components = {name.rpartition(".")[0] for name in CHECKS}
    assert {
        "core.pool",
        "trainer",
        "trainer.algorithms",
        "rollout.worker",
        "inference",
        "driver.metrics",
        "driver.modeling",
    } <= components
    assert {m.__name__ for m in CHECK_MODULES} >= {f"nexrl.{c}.checks" for c in components}
