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


# The recipe as omegaconf holds it (``Recipe.cfg``) is read where it is loaded and
# checked: the recipe package, the command line, the schema, the checks, the dry run.
# Everything else in the driver reads ``Recipe.spec`` (typed) or what is built from it.
RECIPE_LOADING = ("driver/recipe/", "driver/cli/", "core/config/")


def _reads_recipe_cfg(path: Path) -> list[int]:
    """Lines that read ``<...>recipe.cfg``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "cfg":
            inner = node.value
            name = inner.id if isinstance(inner, ast.Name) else getattr(inner, "attr", "")
            if name == "recipe":
                out.append(node.lineno)
    return out


def test_no_dictconfig_below_the_recipe_loading() -> None:
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(RECIPE_LOADING) or rel.endswith("/checks.py") or rel in RECIPE_TIME:
            continue
        if _imports_omegaconf(path):
            offenders[rel] = "imports omegaconf"
        elif _reads_recipe_cfg(path):
            offenders[rel] = f"reads recipe.cfg on lines {_reads_recipe_cfg(path)}"
    assert not offenders, offenders


CASTS = {"int", "float", "str", "bool"}
TYPED_ROOTS = {"cfg", "spec", "rw", "rm", "svc"}


def _casts_of_recipe_values(path: Path) -> list[str]:
    """``int(cfg.trainer.total_train_steps)`` and the like: a cast of a value read from
    the typed recipe (which already has its type)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in CASTS or len(node.args) != 1:
            continue
        arg = node.args[0]
        if not isinstance(arg, ast.Attribute):
            continue
        root: ast.expr = arg
        while isinstance(root, ast.Attribute):
            if isinstance(root.value, ast.Name) and root.value.id == "self":
                break  # self.spec.x: the attribute right under self is the root
            root = root.value
        name = root.attr if isinstance(root, ast.Attribute) else getattr(root, "id", "")
        if name in TYPED_ROOTS:
            out.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return out


def test_typed_values_are_read_without_casting_them() -> None:
    """No ``int(cfg.trainer.total_train_steps)``: below the recipe loading every recipe
    value arrives typed. (``str(...)`` of a number for a command line is a conversion,
    not a cast: it is counted in the controller only, which builds no command lines.)"""
    controller = SRC / "driver" / "controller"
    casts = [c for p in sorted(controller.glob("*.py")) for c in _casts_of_recipe_values(p)]
    for path in sorted([*SRC.rglob("*.py"), *(SRC.parent / "backends").rglob("*.py")]):
        rel = path.relative_to(SRC.parent).as_posix().removeprefix("nexrl/")
        if rel.startswith(RECIPE_LOADING) or rel.endswith("/checks.py") or rel in RECIPE_TIME:
            continue
        casts += [
            c for c in _casts_of_recipe_values(path) if " str(" not in f" {c.split(' ', 1)[1]}"
        ]
    assert not casts, sorted(set(casts))


def test_the_cast_finder_finds_a_cast(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "a = int(self.spec.trainer.total_train_steps)\n"
        "b = float(cfg.runtime_monitor.task_timeout_s)\n"
        "c = int(result.global_step)\n"
        "d = recipe.cfg.trainer\n"
    )
    assert [c.split(" ", 1)[0] for c in _casts_of_recipe_values(sample)] == [
        "sample.py:1",
        "sample.py:2",
    ]
    assert _reads_recipe_cfg(sample) == [4]
