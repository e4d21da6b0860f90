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


# Modules that read the recipe itself, at recipe time, in the driver: each component's
# registered checks (any checks.py) and the --check dry run of the task code. The
# processes get typed specs. (An import is what this sees: a module handed the recipe
# as ``Any``, as ``TrainerSpec.from_recipe`` is, is not caught.)
SRC = CONFIG.parent.parent
RECIPE_TIME = {"rollout/worker/dry_run.py"}


def _imports_omegaconf(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any(n.split(".")[0] == "omegaconf" for n in names):
            return True
    return False


def test_the_recipe_stays_in_the_driver_and_the_recipe_time_modules() -> None:
    """``DictConfig`` (omegaconf) is imported only by the driver, the schema, the
    components' checks and the dry run."""
    readers = {
        path.relative_to(SRC).as_posix() for path in SRC.rglob("*.py") if _imports_omegaconf(path)
    }
    assert readers & RECIPE_TIME == RECIPE_TIME  # the list is not stale
    wrong = sorted(
        rel
        for rel in readers
        if not rel.startswith(("driver/", "core/config/"))
        and not rel.endswith("/checks.py")
        and rel not in RECIPE_TIME
    )
    assert not wrong, f"modules outside the driver that read the recipe: {wrong}"
