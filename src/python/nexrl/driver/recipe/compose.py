"""Load a recipe: a Hydra YAML file plus ``key=value`` overrides.

A recipe is composed with Hydra's compose API from the recipe's own folder, so
``defaults: [common, _self_]`` finds ``common.yaml`` next to it. The configs
shipped with nexrl (``nexrl/driver/recipe/configs``) are on the search path too, so a recipe
can inherit ``nexrl_base`` without copying it.
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.schema import RecipeConfig

SHIPPED_CONFIGS = Path(__file__).resolve().parent / "configs"


def load_recipe(recipe: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """Compose ``recipe`` (a ``.yaml`` path) with Hydra ``overrides``.

    Raises ``RecipeError`` (never a Hydra traceback) when the file is missing,
    the YAML does not parse, a ``defaults`` entry is not found or an override
    is malformed.
    """
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    path = Path(recipe).expanduser()
    if path.suffix not in (".yaml", ".yml"):
        raise RecipeError([f"{recipe}: a recipe is a .yaml file; got '{path.name}'"])
    if not path.is_file():
        raise RecipeError([f"{recipe}: recipe file not found (working directory: {Path.cwd()})"])
    path = path.resolve()
    search = f"hydra.searchpath=[file://{SHIPPED_CONFIGS}]"
    overrides = [_force(o) for o in overrides]
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base="1.3"):
            cfg = compose(config_name=path.stem, overrides=[*overrides, search])
    except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError) as exc:
        why = _unknown_override(exc) or _missing_default(exc, path.parent) or _one_line(exc)
        raise RecipeError([f"{recipe}: {why}"]) from None
    return cfg


def _missing_default(exc: BaseException, folder: Path) -> str | None:
    """Hydra's "In 'r': Could not load 'nexrl_bsae'. Config search path: ..." for a
    ``defaults`` entry that names no config: where it was looked for, with the closest
    name (the search path's provider list is no help to a user)."""
    import difflib

    found = re.search(r"In '([^']+)': Could not load '([^']+)'", str(exc))
    if not found:
        return None
    name = found.group(2)
    known = sorted(
        {p.stem for d in (folder, SHIPPED_CONFIGS) for p in d.glob("*.y*ml")} - {found.group(1)}
    )
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return (
        f"defaults: no config '{name}' next to the recipe ({folder}) or shipped with "
        f"nexrl ({', '.join(p.stem for p in sorted(SHIPPED_CONFIGS.glob('*.yaml')))}){hint}"
    )


def _force(override: str) -> str:
    """``key=value`` on a recipe section becomes ``++key=value`` (set or add): every schema
    field can be overridden whether or not the recipe file spells it out. Unknown keys
    are then reported by the schema check, with suggestions."""
    if override.startswith(("+", "~")) or "=" not in override:
        return override
    key = override.split("=", 1)[0]
    if key.split(".", 1)[0] in RecipeConfig.__dataclass_fields__:
        return f"++{override}"
    return override


def _unknown_override(exc: BaseException) -> str | None:
    """Hydra's "Could not override 'trainerr.lr'. To append to your config use
    +trainerr.lr=1" for a key whose section is no recipe section: the section named,
    with the closest one (adding the misspelt key, as Hydra suggests, is not the fix)."""
    import difflib

    found = re.search(r"Could not override '([^']+)'", str(exc))
    if not found:
        return None
    key = found.group(1)
    top = key.split(".", 1)[0]
    fields = list(RecipeConfig.__dataclass_fields__)
    if top in fields:
        return None
    close = difflib.get_close_matches(top, fields, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return (
        f"override {key}: the recipe has no section or field '{top}'{hint} "
        "(every field: docs/config-reference.md)"
    )


def _one_line(exc: BaseException) -> str:
    """Hydra's message on one line, without its "full stack trace" and grammar-link hints."""
    text = str(exc).strip().split("\n\nSet the environment variable HYDRA_FULL_ERROR")[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("See https://hydra.cc")]
    return "; ".join(lines)
