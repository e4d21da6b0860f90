"""Reward 1 when a math solution's final answer equals the reference integer.

Rules (``MathEvaluator.evaluate``):

1. The answer is taken from ``evaluation_target.final_answer``: the content of
   the last complete ``\\boxed{...}`` (braces inside are matched, so
   ``\\boxed{\\frac{1}{2}}`` is one box); with no complete box, the last number
   in the text (``-3``, ``1,234``, ``$12``, ``12.0``).
2. The answer and the row's ``answer`` are normalised the same way: surrounding
   spaces, ``$`` / ``\\$`` and a leading ``+`` are removed, thousands separators
   go (``1,234``, ``1\\,234``, ``1{,}234`` -> ``1234``) and a zero fraction goes
   (``12.0``, ``12.00`` -> ``12``).
3. Reward 1.0 when the two normalised strings are equal, else 0.0 (so
   ``\\boxed{12 apples}`` or ``\\boxed{12.5}`` against ``12`` scores 0).

Metrics: ``has_boxed`` (1 when a complete box was found) and ``answer_found``
(1 when a non-empty answer was extracted). ``ground_truth`` is the row's answer
and ``extra_info["extracted"]`` the normalised extracted answer. A row without
an ``answer`` raises ``ValueError`` naming the field (the rollout then gets
reward 0 and counts as an evaluator error).
"""

from __future__ import annotations

import re
from typing import Any

from nexrl.rollout.evaluators.regex import last_boxed
from nexrl.rollout_worker import BaseEvaluationTarget, EvaluationRunResult, Evaluator

# A number as written in text: optional sign and $, digits with or without
# thousands separators, an optional fraction.
NUMBER = re.compile(r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")
THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
ZERO_FRACTION = re.compile(r"(-?\d+)\.0+")


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (None if there is none)."""
    matches = NUMBER.findall(text)
    return matches[-1] if matches else None


def normalize(answer: str) -> str:
    """Canonical form of an answer: ``' +$1,234.0 '`` -> ``'1234'``."""
    s = answer.strip().replace("\\$", "").replace("$", "")
    s = s.replace("\\,", "").replace("{,}", ",").strip()
    s = s.removeprefix("+")
    if THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    zero = ZERO_FRACTION.fullmatch(s)
    return zero.group(1) if zero else s


class MathEvaluator(Evaluator):
    """Exact match of the final (boxed, else last) number against ``data["answer"]``."""

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        if data.get("answer") is None:
            raise ValueError(
                "MathEvaluator: the data row has no 'answer' field (the reference integer "
                f"answer); the row's fields are {sorted(data)}"
            )
        reference = str(data["answer"])
        text = evaluation_target.final_answer
        boxed = last_boxed(text)
        raw = boxed if boxed is not None else last_number(text)
        extracted = normalize(raw) if raw is not None else ""
        correct = extracted != "" and extracted == normalize(reference)
        return EvaluationRunResult(
            reward=1.0 if correct else 0.0,
            ground_truth=reference,
            metrics={
                "has_boxed": float(boxed is not None),
                "answer_found": float(extracted != ""),
            },
            extra_info={"extracted": extracted},
        )
