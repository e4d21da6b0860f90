"""``multi_criteria``: a weighted sum of named sub-evaluators, each logged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nexrl.core.config.errors import RecipeError
from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult
from nexrl.rollout.evaluators.common import opt
from nexrl.rollout.evaluators.registry import (
    OPTIONS_FIELD,
    EvaluatorContext,
    NamedEvaluator,
    build,
    register,
)

CRITERION_KEYS = ("name", "evaluator", "weight", "options")


@dataclass
class MultiCriteriaOptions:
    criteria: list[Any] = field(
        default_factory=list,
        metadata={
            "help": "The criteria: a list of {name, evaluator (a named evaluator), weight, "
            "options (that evaluator's options)}."
        },
    )
    normalise_weights: bool = opt(False, "Divide the weighted sum by the sum of the weights.")

    def check(self) -> list[str]:
        if not self.criteria:
            return ["criteria: at least one criterion {name, evaluator, weight, options}"]
        out, names = [], set()
        for i, c in enumerate(self.criteria):
            where = f"criteria[{i}]"
            if not isinstance(c, dict):
                out.append(f"{where}: expected a mapping {{name, evaluator, weight, options}}")
                continue
            if unknown := sorted(set(c) - set(CRITERION_KEYS)):
                out.append(
                    f"{where}.{unknown[0]}: unknown key (allowed: {', '.join(CRITERION_KEYS)})"
                )
            if not isinstance(c.get("name"), str) or not isinstance(c.get("evaluator"), str):
                out.append(f"{where}: 'name' and 'evaluator' (a named evaluator) are required")
            elif c["name"] in names:
                out.append(f"{where}.name: '{c['name']}' is used twice")
            names.add(c.get("name"))
            w = c.get("weight", 1.0)
            if isinstance(w, bool) or not isinstance(w, int | float):
                out.append(f"{where}.weight: expected float, got {w!r}")
        return out


@register("multi_criteria")
class MultiCriteria(NamedEvaluator):
    """reward = sum_i w_i * r_i (``normalise_weights``: divided by sum_i w_i), r_i the
    reward of criterion i's evaluator; metric ``<name>`` = r_i and ``<name>/<metric>``
    each of its metrics, so every criterion is logged on its own (``eval/<name>``)."""

    Options = MultiCriteriaOptions
    what = "weighted sum of named sub-evaluators, each logged as its own metric"
    options: MultiCriteriaOptions

    def __init__(self, options: Any, context: EvaluatorContext | None = None) -> None:
        super().__init__(options, context)
        self.criteria: list[tuple[str, float, NamedEvaluator]] = []
        problems: list[str] = []
        for i, c in enumerate(options.criteria):
            try:
                sub = build(
                    c["evaluator"],
                    c.get("options") or {},
                    self.context,
                    field=f"{OPTIONS_FIELD}.criteria[{i}].options",
                )
            except RecipeError as exc:
                problems += exc.problems
                continue
            self.criteria.append((c["name"], float(c.get("weight", 1.0)), sub))
        if problems:
            raise RecipeError(problems)

    @property
    def required_fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f for _, _, e in self.criteria for f in e.required_fields))

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        total, metrics, truth = 0.0, {}, ""
        for name, weight, sub in self.criteria:
            result = sub.evaluate(data, evaluation_target)
            total += weight * result.reward
            metrics[name] = result.reward
            metrics.update({f"{name}/{k}": v for k, v in result.metrics.items()})
            truth = truth or result.ground_truth
        if self.options.normalise_weights:
            total /= sum(w for _, w, _ in self.criteria) or 1.0
        return EvaluationRunResult(reward=total, ground_truth=truth, metrics=metrics)
