"""``exact_match``: reward 1 when the answer equals the reference after normalisation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult
from nexrl.rollout.evaluators.common import Normalise, ReferenceEvaluator, opt
from nexrl.rollout.evaluators.registry import register


@dataclass
class ExactMatchOptions(Normalise):
    reference_key: str = opt("answer", "Data field with the reference answer (or a list of them).")
    ignore_case: bool = opt(True, "Compare case-insensitively (Unicode casefold).")
    ignore_whitespace: bool = opt(True, "Strip the ends and make whitespace runs one space.")
    ignore_punctuation: bool = opt(False, "Drop ASCII punctuation before comparing.")


@register("exact_match")
class ExactMatch(ReferenceEvaluator):
    """reward = 1 if norm(answer) == norm(reference) for some accepted reference, else 0,
    where norm applies the options (NFKC, casefold, punctuation, whitespace)."""

    Options = ExactMatchOptions
    what = "1 when the whole answer equals a reference after normalisation"
    options: ExactMatchOptions

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        refs = self.references(data)
        answer = self.options.norm(evaluation_target.final_answer)
        hit = any(answer == self.options.norm(r) for r in refs)
        return EvaluationRunResult(reward=float(hit), ground_truth=refs[0])
