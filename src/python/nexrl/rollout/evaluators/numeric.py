"""``numeric``: reward 1 when the answer's number is within tolerance of the reference."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult
from nexrl.rollout.evaluators.common import ReferenceEvaluator, opt
from nexrl.rollout.evaluators.registry import register

__all__ = ["NUMBER", "Numeric", "parse_number"]

# -1,234.5e-3 or 3/4 (a fraction), thousands separators allowed
NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?:/\d+)?|[-+]?\.\d+"


def parse_number(text: str) -> float | None:
    """The number ``text`` is (``1,234.5``, ``-3e2``, ``3/4``), or None."""
    text = text.strip().replace(",", "")
    try:
        if "/" in text:
            return float(Fraction(text))
        return float(text)
    except (ValueError, ZeroDivisionError):
        return None


@dataclass
class NumericOptions:
    reference_key: str = opt("answer", "Data field with the reference number.")
    abs_tol: float = opt(1e-6, "Absolute tolerance.")
    rel_tol: float = opt(0.0, "Relative tolerance (of the reference's magnitude).")
    extract: str = opt(
        "last_number", "'last_number' (the answer's last number) or 'whole' (the whole answer)."
    )

    def check(self) -> list[str]:
        out = []
        if self.extract not in ("last_number", "whole"):
            out.append(f"extract: '{self.extract}' is not one of: last_number, whole")
        if self.abs_tol < 0 or self.rel_tol < 0:
            out.append("abs_tol/rel_tol: must be >= 0")
        return out


@register("numeric")
class Numeric(ReferenceEvaluator):
    """reward = 1 if |x - r| <= max(abs_tol, rel_tol * |r|) else 0 (the rule of
    ``math.isclose``), x the answer's number, r the reference's; metric ``parsed`` =
    1 when the answer held a number."""

    Options = NumericOptions
    what = "1 when the answer's number is within abs_tol/rel_tol of the reference"
    options: NumericOptions

    def value(self, text: str) -> float | None:
        if self.options.extract == "whole":
            return parse_number(text)
        found = re.findall(NUMBER, text)
        return parse_number(found[-1]) if found else None

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        (ref_text,) = self.references(data)[:1]
        ref = parse_number(ref_text)
        if ref is None:
            raise ValueError(f"reference {self.options.reference_key}={ref_text!r} is not a number")
        x = self.value(evaluation_target.final_answer)
        tol = max(self.options.abs_tol, self.options.rel_tol * abs(ref))
        hit = x is not None and abs(x - ref) <= tol
        return EvaluationRunResult(
            reward=float(hit), ground_truth=ref_text, metrics={"parsed": float(x is not None)}
        )
