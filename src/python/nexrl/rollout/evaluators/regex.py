"""``regex``: extract the answer (``\\boxed{}``, the last number, a tag, a pattern),
then compare it with the reference."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult
from nexrl.rollout.evaluators.common import Normalise, ReferenceEvaluator, opt
from nexrl.rollout.evaluators.numeric import NUMBER, parse_number
from nexrl.rollout.evaluators.registry import register

__all__ = ["Regex", "last_boxed"]

EXTRACTS = ("boxed", "last_number", "tag", "pattern")
BOXED = "\\boxed{"


def last_boxed(text: str) -> str | None:
    """The content of the last complete ``\\boxed{...}`` (nested braces balanced: one box
    holds ``\\frac{1}{2}``), or None; an unclosed box after it does not hide it."""
    start = text.rfind(BOXED)
    while start >= 0:
        i = start + len(BOXED)
        depth = 1
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i:j]
        start = text.rfind(BOXED, 0, start)
    return None


@dataclass
class RegexOptions(Normalise):
    reference_key: str = opt("answer", "Data field with the reference answer (or a list of them).")
    extract: str = opt(
        "boxed",
        "What to take from the answer: 'boxed' (the last \\boxed{...}), 'last_number', "
        "'tag' (the last <tag>...</tag>) or 'pattern' (the last match of pattern).",
    )
    tag: str = opt("answer", "The tag name for extract: tag.")
    pattern: str = opt("", "A Python regex for extract: pattern (its group 1 if it has one).")
    compare: str = opt("exact", "'exact' (normalised text) or 'numeric' (within abs_tol).")
    abs_tol: float = opt(1e-6, "Tolerance for compare: numeric.")
    ignore_case: bool = opt(True, "Compare case-insensitively.")
    ignore_whitespace: bool = opt(True, "Strip the ends and make whitespace runs one space.")
    ignore_punctuation: bool = opt(False, "Drop ASCII punctuation before comparing.")

    def check(self) -> list[str]:
        out = []
        if self.extract not in EXTRACTS:
            out.append(f"extract: '{self.extract}' is not one of: {', '.join(EXTRACTS)}")
        if self.compare not in ("exact", "numeric"):
            out.append(f"compare: '{self.compare}' is not one of: exact, numeric")
        if self.extract == "pattern":
            if not self.pattern:
                out.append("pattern: required with extract: pattern")
            else:
                try:
                    re.compile(self.pattern)
                except re.error as exc:
                    out.append(f"pattern: not a valid regex: {exc}")
        return out


@register("regex")
class Regex(ReferenceEvaluator):
    """e = extract(answer); reward = 1 if e was found and equals a reference (``exact``:
    after normalisation; ``numeric``: |e - r| <= abs_tol) else 0; metric ``extracted`` =
    1 when something was extracted (the format was followed)."""

    Options = RegexOptions
    what = "1 when the extracted part (\\boxed{}, last number, tag, pattern) matches a reference"
    options: RegexOptions

    def extract(self, text: str) -> str | None:
        o = self.options
        if o.extract == "boxed":
            return last_boxed(text)
        if o.extract == "last_number":
            found = re.findall(NUMBER, text)
            return found[-1] if found else None
        pattern = (
            rf"<{re.escape(o.tag)}>(.*?)</{re.escape(o.tag)}>" if o.extract == "tag" else o.pattern
        )
        matches = list(re.finditer(pattern, text, re.S))
        if not matches:
            return None
        last = matches[-1]
        return last.group(1) if last.re.groups else last.group(0)

    def _equal(self, got: str, ref: str) -> bool:
        if self.options.compare == "numeric":
            x, r = parse_number(got), parse_number(ref)
            return x is not None and r is not None and abs(x - r) <= self.options.abs_tol
        return self.options.norm(got) == self.options.norm(ref)

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        refs = self.references(data)
        got = self.extract(evaluation_target.final_answer)
        hit = got is not None and any(self._equal(got, r) for r in refs)
        return EvaluationRunResult(
            reward=float(hit),
            ground_truth=refs[0],
            metrics={"extracted": float(got is not None)},
            extra_info={"extracted": got},
        )
