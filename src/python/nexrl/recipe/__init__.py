"""Recipes: compose a recipe (Hydra), check it whole, and hand out the typed result.

* ``nexrl.recipe.compose``: Hydra compose of a ``.yaml`` recipe plus overrides;
* ``nexrl.recipe.load``: ``load_recipe_checked`` and ``Recipe``: the structure
  check against the schema (``nexrl.config``), the recipe's plugins imported,
  then every component's registered checks; all problems reported at once;
* ``nexrl.recipe.checks``: the run-wide checks no one component owns.

User classes and functions named in a recipe are loaded by ``nexrl.plugins``.
"""

from nexrl.recipe.load import Recipe, load_recipe_checked

__all__ = ["Recipe", "load_recipe_checked"]
