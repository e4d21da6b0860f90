"""NexRL's own command-line flags, as recipe overrides (``nexrl train`` takes both).

    -c/--train-config RECIPE   the recipe (instead of the positional RECIPE)
    -m/--mode MODE             trainer.mode=MODE (self-hosted | training-service)
    -t/--tag TAG               experiment_name=<the recipe's experiment_name>-TAG
    --inference-url URL        service.inference_service.base_urls=[URL, ...]

Flags become ``key=value`` overrides placed before the user's own, so an explicit
``trainer.mode=...`` on the same command line wins over ``-m``; the tag is applied
last, to the experiment name the recipe and every override give.
"""

from __future__ import annotations

import argparse

from nexrl.core.errors import NexrlError

__all__ = ["FlagError", "apply_flags"]


class FlagError(NexrlError):
    """Two recipes given, or a flag value a recipe override cannot carry."""


def _quoted(value: str) -> str:
    """A Hydra override string literal (a URL's ``:`` and ``/`` stay text)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def apply_flags(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """``(recipe, overrides)`` of parsed ``nexrl train`` arguments with NexRL's flags
    folded in (module doc)."""
    recipe, overrides = args.recipe, list(args.overrides)
    if args.train_config is not None:
        if recipe is not None and "=" not in recipe:
            raise FlagError(
                f"two recipes: {recipe!r} and -c {args.train_config!r}; give one of them"
            )
        if recipe is not None:  # `-c r.yaml key=value`: the first override, not a recipe
            overrides.insert(0, recipe)
        recipe = args.train_config
    flags: list[str] = []
    if args.mode is not None:
        flags.append(f"trainer.mode={args.mode}")
    if args.inference_url:
        for url in args.inference_url:
            if not url.startswith(("http://", "https://")):
                raise FlagError(
                    f"--inference-url {url!r}: an OpenAI base URL starts with http:// or "
                    "https:// (e.g. http://127.0.0.1:8000/v1)"
                )
        urls = ",".join(_quoted(u) for u in args.inference_url)
        flags.append(f"service.inference_service.base_urls=[{urls}]")
    overrides = [*flags, *overrides]
    if args.tag is not None and recipe is not None:
        if not args.tag or any(c in args.tag for c in "/ \t'\""):
            raise FlagError(
                f"-t {args.tag!r}: a tag is a suffix for run and job names; use letters, "
                "digits, '-', '_' or '.'"
            )
        name = _experiment_name(recipe, overrides)
        if name is not None:
            overrides.append(f"experiment_name={_quoted(f'{name}-{args.tag}')}")
    return recipe, overrides


def _experiment_name(recipe: str, overrides: list[str]) -> str | None:
    """The composed recipe's experiment name; None when it does not compose (the
    recipe check that follows says why)."""
    from omegaconf import OmegaConf

    from nexrl.driver.recipe.compose import load_recipe

    try:
        name = OmegaConf.select(load_recipe(recipe, overrides), "experiment_name")
    except Exception:
        return None
    return None if name is None else str(name)
