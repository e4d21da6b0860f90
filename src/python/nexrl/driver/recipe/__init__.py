"""Recipes: compose a recipe (Hydra), check it whole, and hand out the typed result.

* ``nexrl.driver.recipe.compose``: Hydra compose of a ``.yaml`` recipe plus overrides;
* ``nexrl.driver.recipe.load``: ``load_recipe_checked`` and ``Recipe``: the structure
  check against the schema (``nexrl.core.config``), the recipe's plugins imported,
  then every component's registered checks; all problems reported at once;
* ``nexrl.driver.recipe.checks``: the run-wide checks no one component owns.

User classes and functions named in a recipe are loaded by ``nexrl.core.plugins``.

``Recipe`` and ``load_recipe_checked`` are imported on first use (PEP 562): the
checks import every component's registry (torch among them), and ``nexrl train``
composes a recipe first, without them, to see what it starts
(``nexrl.core.process.forkserver``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nexrl.core.util.lazy import lazy_names

if TYPE_CHECKING:
    from nexrl.driver.recipe.load import Recipe, load_recipe_checked

__all__ = ["Recipe", "load_recipe_checked"]


__getattr__ = lazy_names(__name__, {"Recipe": "load", "load_recipe_checked": "load"})
