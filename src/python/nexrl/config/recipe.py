"""``load_recipe_checked``: compose, check and type a recipe before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nexrl.config.errors import RecipeError
from nexrl.config.loader import load_recipe
from nexrl.config.modules import resolve_path
from nexrl.config.rules import RULES
from nexrl.config.schema import RecipeConfig
from nexrl.config.structure import check_structure
from nexrl.plugins import load_plugins


@dataclass
class Recipe:
    """A validated recipe: the typed config plus where relative paths resolve.

    ``roots`` are the workspace root (the working directory) and the recipe's
    folder, in that order; ``resolve`` finds a recipe-relative path. ``plugins``
    are the recipe's plugins, resolved (absolute files, module names) and already
    imported in this process; the cluster imports them in every worker.
    """

    path: Path
    cfg: DictConfig
    roots: list[Path] = field(default_factory=list)
    plugins: tuple[str, ...] = ()

    def resolve(self, value: str) -> Path:
        found = resolve_path(value, self.roots)
        if found is None:
            raise RecipeError([f"'{value}' not found under {', '.join(map(str, self.roots))}"])
        return found


def load_recipe_checked(
    recipe: str | Path, overrides: list[str] | tuple[str, ...] = (), workspace: Path | None = None
) -> Recipe:
    """Load ``recipe`` with ``overrides`` and validate it; raise ``RecipeError`` listing
    every problem (structure first; then the plugins are imported, so the cross-field
    rules see the names they register; then the rules)."""
    raw = load_recipe(recipe, overrides)
    path = Path(recipe).resolve()
    roots = [(workspace or Path.cwd()).resolve(), path.parent]
    problems = check_structure(RecipeConfig, raw, roots)
    if problems:
        raise RecipeError(problems)
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(RecipeConfig), raw)
    except Exception as exc:  # the structure check should have caught it; never a traceback
        raise RecipeError([str(exc).splitlines()[0]]) from None
    assert isinstance(cfg, DictConfig)
    plugins = load_plugins([str(p) for p in cfg.plugins], roots)
    problems = [p for rule in RULES for p in rule(cfg, roots)]
    if problems:
        raise RecipeError(problems)
    return Recipe(path=path, cfg=cfg, roots=roots, plugins=plugins)
