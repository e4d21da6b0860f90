"""``fuzzy``: reward by normalised edit distance to the reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult
from nexrl.rollout.evaluators.common import Normalise, ReferenceEvaluator, opt
from nexrl.rollout.evaluators.registry import register

__all__ = ["Fuzzy", "levenshtein", "similarity"]


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character each):
    the Wagner-Fischer dynamic programme, one row at a time."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def similarity(a: str, b: str) -> float:
    """1 - levenshtein(a, b) / max(len(a), len(b)); 1 for two empty strings."""
    longest = max(len(a), len(b))
    return 1.0 if longest == 0 else 1.0 - levenshtein(a, b) / longest


@dataclass
class FuzzyOptions(Normalise):
    reference_key: str = opt("answer", "Data field with the reference answer (or a list of them).")
    threshold: float = opt(0.8, "Similarity at or above which the reward is 1.")
    graded: bool = opt(False, "Reward = the similarity itself instead of 0/1 at the threshold.")
    ignore_case: bool = opt(True, "Compare case-insensitively.")
    ignore_whitespace: bool = opt(True, "Strip the ends and make whitespace runs one space.")
    ignore_punctuation: bool = opt(False, "Drop ASCII punctuation before comparing.")

    def check(self) -> list[str]:
        return (
            []
            if 0 <= self.threshold <= 1
            else [f"threshold: must be in [0, 1], got {self.threshold}"]
        )


@register("fuzzy")
class Fuzzy(ReferenceEvaluator):
    """s = max over references of 1 - lev(a, r) / max(|a|, |r|) on normalised text
    (Levenshtein 1966); reward = 1 if s >= threshold else 0 (``graded``: reward = s);
    metric ``similarity`` = s."""

    Options = FuzzyOptions
    what = "1 when the normalised edit-distance similarity reaches threshold (or the similarity)"
    options: FuzzyOptions

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        refs = self.references(data)
        answer = self.options.norm(evaluation_target.final_answer)
        s = max(similarity(answer, self.options.norm(r)) for r in refs)
        reward = s if self.options.graded else float(s >= self.options.threshold)
        return EvaluationRunResult(reward=reward, ground_truth=refs[0], metrics={"similarity": s})
