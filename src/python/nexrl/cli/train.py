"""``nexrl train``: the training entry point (``./pants run src/python/nexrl:train``).

    train RECIPE.yaml [key=value ...] [--print-config] [--check]

The recipe is composed with the overrides and validated against the typed
schema before any cluster starts; user mistakes are reported as a list of
problems (exit 2), never as a traceback.
"""

from __future__ import annotations

import argparse
import sys

from omegaconf import OmegaConf

from nexrl.config.errors import RecipeError
from nexrl.config.recipe import load_recipe_checked


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nexrl train",
        description="Run an RL post-training recipe (Hydra YAML) on Dask.",
    )
    p.add_argument("recipe", help="path to the recipe .yaml file")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.lr=1e-5")
    p.add_argument("--print-config", action="store_true", help="print the resolved recipe and exit")
    p.add_argument("--check", action="store_true", help="validate the recipe and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        recipe = load_recipe_checked(args.recipe, args.overrides)
    except RecipeError as exc:
        print(f"error: {args.recipe}: {exc.render()}", file=sys.stderr)
        return 2
    if args.print_config:
        print(OmegaConf.to_yaml(recipe.cfg, resolve=True), end="")
    if args.check:
        print(f"{args.recipe}: recipe is valid")
    if args.print_config or args.check:
        return 0
    print(OmegaConf.to_yaml(recipe.cfg, resolve=True), end="")
    print(
        "nexrl: recipe loaded and valid; the training loop is not part of this build yet "
        "(see docs/index.md, 'Status')."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
