"""``load_recipe_checked``: compose, check and type a recipe before anything starts."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from nexrl.core.config.checks import run_checks
from nexrl.core.config.errors import RecipeError
from nexrl.core.config.paths import expand_pattern, is_pattern, resolve_path
from nexrl.core.config.record import another_run, recorded_config, recorded_yaml
from nexrl.core.config.renames import migrate
from nexrl.core.config.schema import RecipeConfig
from nexrl.core.config.structure import structure_problems
from nexrl.core.plugins import load_plugins
from nexrl.core.pool import checks as pool_checks
from nexrl.driver.metrics import checks as metric_checks
from nexrl.driver.modeling import checks as model_checks
from nexrl.driver.recipe import checks as run_checks_module
from nexrl.driver.recipe.compose import load_recipe
from nexrl.inference import checks as inference_checks
from nexrl.rollout.worker import checks as rollout_checks
from nexrl.trainer import checks as trainer_checks
from nexrl.trainer.algorithms import checks as algorithm_checks
from nexrl.trainer.algorithms.defaults import LOSS_FIELDS

__all__ = ["CHECK_MODULES", "Recipe", "load_recipe_checked"]

# Every component's checks, registered (nexrl.core.config.checks) by importing them here.
CHECK_MODULES = (
    pool_checks,
    run_checks_module,
    trainer_checks,
    rollout_checks,
    algorithm_checks,
    metric_checks,
    model_checks,
    inference_checks,
)

log = logging.getLogger("nexrl.driver.recipe")


@dataclass
class Recipe:
    """A validated recipe: the typed config plus where relative paths resolve.

    ``roots`` are the workspace root (the working directory) and the recipe's
    folder, in that order; ``resolve`` finds a recipe-relative path. ``plugins``
    are the recipe's plugins, resolved (absolute files, module names) and already
    imported in this process; the cluster imports them in every worker.
    ``deprecations`` has one line per renamed key the recipe still uses (it works:
    its value was moved to the new key); the CLI prints each as a warning.
    """

    path: Path
    cfg: DictConfig
    roots: list[Path] = field(default_factory=list)
    plugins: tuple[str, ...] = ()
    deprecations: tuple[str, ...] = ()

    @property
    def output_dir(self) -> Path:
        """``output_dir``, absolute (workers may run elsewhere)."""
        return Path(str(self.cfg.output_dir)).expanduser().resolve()

    @functools.cached_property
    def spec(self) -> RecipeConfig:
        """The checked recipe as its dataclasses: every value typed, every interpolation
        resolved, ``output_dir`` absolute (the pool and snapshot paths that interpolate
        it follow). The driver reads this; the processes get specs built from it.
        ``rollout_worker.evaluator`` is ``""`` in ``mode: sft`` (nothing is scored).
        Built once, on first use; read-only by convention (the recipe does not change)."""
        cfg = self._absolute()
        if OmegaConf.is_missing(cfg.rollout_worker, "evaluator"):  # mode: sft
            cfg.rollout_worker.evaluator = ""
        spec = OmegaConf.to_object(cfg)
        assert isinstance(spec, RecipeConfig)
        return spec

    def record(self) -> dict[str, Any]:
        """The recipe as metric sinks keep it (``nexrl.core.config.record``: resolved but
        for environment values), ``output_dir`` absolute."""
        return recorded_config(self._absolute())

    def record_yaml(self) -> str:
        """The recipe as a run folder's ``config.yaml`` records it (see ``record``)."""
        return recorded_yaml(self._absolute())

    def new_run_advice(self) -> str:
        """How to start another run instead, for error lines
        (``nexrl.core.config.record.another_run``)."""
        return another_run(self.cfg)

    def required_data_fields(self) -> tuple[tuple[str, str], ...]:
        """``(field, who reads it)``: what every data row must hold for the run's
        evaluator and custom worker (``nexrl.rollout.worker.dry_run``)."""
        from nexrl.rollout.worker.dry_run import required_data_fields

        return required_data_fields(self.cfg, list(self.roots))

    def _absolute(self) -> DictConfig:
        cfg = self.cfg.copy()
        OmegaConf.update(cfg, "output_dir", str(self.output_dir))
        return cfg

    def resolve(self, value: str) -> Path:
        found = resolve_path(value, self.roots)
        if found is None:
            raise RecipeError([f"'{value}' not found under {', '.join(map(str, self.roots))}"])
        return found


def load_recipe_checked(
    recipe: str | Path, overrides: list[str] | tuple[str, ...] = (), workspace: Path | None = None
) -> Recipe:
    """Load ``recipe`` with ``overrides`` and validate it; raise ``RecipeError`` listing
    every problem. Renamed keys are first moved to their new keys
    (``nexrl.core.config.renames``), with one deprecation line each, logged and kept on
    the ``Recipe`` (and on the ``RecipeError``); then come the structure problems
    (unknown, missing, ill-typed keys, old keys that could not be moved), then,
    with the recipe's plugins imported (so the checks see the names they
    register), every registered check's. A field with a structure problem
    takes its default for the checks, so they still run; a check that trips over
    one is skipped, and its problems on that field are not repeated."""
    on_command_line = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    migrated = migrate(load_recipe(recipe, overrides), on_command_line)
    deprecations = migrated.deprecations
    for line in deprecations:
        log.warning("%s: %s", recipe, line)
    raw = migrated.cfg
    path = Path(recipe).resolve()
    # the working directory, then the recipe's folder (once, when it is the same)
    roots = list(dict.fromkeys([(workspace or Path.cwd()).resolve(), path.parent]))
    _expand_file_patterns(raw, roots)
    structure = [*migrated.problems, *structure_problems(RecipeConfig, raw, roots)]
    problems = [p for _, p in structure]
    bad = {where for where, _ in structure}
    cfg = _typed(raw, bad)
    if cfg is None:  # the structure check should have caught it; never a traceback
        raise RecipeError(problems or ["the recipe does not fit the schema"], deprecations)
    try:
        plugins = load_plugins([str(p) for p in cfg.plugins], roots)
    except RecipeError as exc:
        raise RecipeError([*problems, *exc.problems], deprecations) from None
    checked = run_checks(cfg, roots, skip_failing=bool(problems))
    problems.extend(p for p in checked if not _about(p, bad))
    if problems:
        raise RecipeError(problems, deprecations)
    _resolve_algorithm(cfg)
    return Recipe(path=path, cfg=cfg, roots=roots, plugins=plugins, deprecations=deprecations)


#: list fields whose entries may be patterns (``data/*.jsonl``)
PATTERN_FIELDS = ("data.data_files", "validate.data_files")


def _expand_file_patterns(raw: DictConfig, roots: list[Path]) -> None:
    """Each pattern entry of ``PATTERN_FIELDS`` becomes the files it names, sorted (what
    the run reads, and ``config.yaml`` records); one that names no file stays, for the
    structure check to report."""
    for key in PATTERN_FIELDS:
        try:
            values = OmegaConf.select(raw, key)
        except Exception:  # an interpolation that does not resolve: reported elsewhere
            continue
        if not OmegaConf.is_list(values) or not any(
            isinstance(v, str) and is_pattern(v) for v in values
        ):
            continue
        expanded: list[Any] = []
        for v in values:
            found = expand_pattern(v, roots) if isinstance(v, str) and is_pattern(v) else []
            expanded.extend(found or [v])
        OmegaConf.update(raw, key, expanded, merge=False)


def _resolve_algorithm(cfg: DictConfig) -> None:
    """Fill the ``algorithm`` fields left null with the chosen algorithm's own defaults
    (``nexrl.trainer.algorithms.resolve_algorithm``), so ``--print-config`` and the run's
    ``config.yaml`` show the values in effect."""
    from nexrl.core.config.schema import typed
    from nexrl.trainer.algorithms import resolve_algorithm

    resolved = resolve_algorithm(
        typed(cfg.algorithm), max_response_length=int(cfg.rollout_worker.max_response_length)
    )
    for name in ("norm_adv_by_std", "loss_agg_mode", "loss_norm_length"):
        cfg.algorithm[name] = getattr(resolved, name)
    for name in LOSS_FIELDS:
        cfg.algorithm[name] = getattr(resolved, name)


def _typed(raw: DictConfig, bad: set[str]) -> DictConfig | None:
    """``raw`` merged onto the schema, without the keys that have structure problems
    (they take their defaults); None when even that does not merge."""
    base = OmegaConf.structured(RecipeConfig)
    try:
        if not bad:
            cfg = OmegaConf.merge(base, raw)
        else:
            data: Any = OmegaConf.to_container(raw, resolve=False)
            for where in bad:
                _drop(data, where.split("."))
            cfg = OmegaConf.merge(base, data)
    except Exception as exc:
        if not bad:
            raise RecipeError([str(exc).splitlines()[0]]) from None
        return None
    assert isinstance(cfg, DictConfig)
    return cfg


def _drop(data: Any, keys: list[str]) -> None:
    for key in keys[:-1]:
        if not isinstance(data, dict) or key not in data:
            return
        data = data[key]
    if isinstance(data, dict):
        data.pop(keys[-1], None)


def _about(problem: str, fields: set[str]) -> bool:
    """Whether ``problem`` ("field: ..." or "field (value) ...") is about one of ``fields``."""
    head = problem.split(":", 1)[0].split(" ", 1)[0]
    return head in fields
