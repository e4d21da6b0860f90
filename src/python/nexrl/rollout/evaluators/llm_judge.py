"""``llm_judge``: an LLM scores the answer through any OpenAI-compatible endpoint (the
run's own inference service by default)."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult
from nexrl.rollout.evaluators.common import opt
from nexrl.rollout.evaluators.registry import EvaluatorContext, NamedEvaluator, register

__all__ = ["DEFAULT_PROMPT", "LLMJudge"]

log = logging.getLogger(__name__)

DEFAULT_PROMPT = (
    "You grade answers. Question:\n{question}\n\nReference answer:\n{reference}\n\n"
    "Answer to grade:\n{answer}\n\nReply with one line 'Score: N', N from 0 (wrong) to 10 "
    "(fully correct)."
)


@dataclass
class LLMJudgeOptions:
    base_url: str = opt("", "OpenAI-compatible endpoint; empty = the run's inference service.")
    model: str = opt("", "Model name sent to it; empty = the run's served_model_name.")
    api_key: str = opt(
        "", "API key; empty = the run's service key (use ${oc.env:VAR}, not the key itself)."
    )
    prompt: str = opt(DEFAULT_PROMPT, "The judge's prompt: {question}, {answer}, {reference}.")
    question_key: str = opt("prompt", "Data field with the question.")
    reference_key: str = opt("answer", "Data field with the reference; empty = none.")
    score_pattern: str = opt(
        r"[Ss]core\s*[:=]\s*(-?\d+(?:\.\d+)?)", "Regex whose group 1 is the score (last match)."
    )
    max_score: float = opt(10.0, "The score that means fully correct (reward = score/max).")
    timeout_s: float = opt(30.0, "Timeout of one judge request, seconds.")
    max_retries: int = opt(2, "Retries of a failed judge request (openai client).")
    max_tokens: int = opt(256, "max_tokens of the judge's reply.")
    temperature: float = opt(0.0, "The judge's sampling temperature.")

    def check(self) -> list[str]:
        out = []
        try:
            if re.compile(self.score_pattern).groups < 1:
                out.append("score_pattern: needs a group (the score), e.g. 'Score: (\\d+)'")
        except re.error as exc:
            out.append(f"score_pattern: not a valid regex: {exc}")
        bad = [
            k
            for k in re.findall(r"{(\w*)}", self.prompt)
            if k not in ("question", "answer", "reference")
        ]
        if bad:
            out.append(
                f"prompt: unknown placeholder {{{bad[0]}}} (allowed: {{question}}, {{answer}}, {{reference}})"
            )
        if self.max_score <= 0 or self.timeout_s <= 0:
            out.append("max_score/timeout_s: must be > 0")
        return out


def _text(value: Any) -> str:
    """A prompt field as text: a string, or the last user message of a message list."""
    if isinstance(value, list):
        users = [
            m.get("content", "") for m in value if isinstance(m, dict) and m.get("role") == "user"
        ]
        return str(users[-1]) if users else ""
    return str(value)


@register("llm_judge")
class LLMJudge(NamedEvaluator):
    """s = the last match of score_pattern in the judge's reply to the prompt template;
    reward = clamp(s / max_score, 0, 1). A judge that fails (timeout after its retries,
    an error, a reply without a score) gives reward 0 and ``judge_failures`` = 1: the
    run goes on. Metrics per sample: ``judge_calls``, ``judge_failures``,
    ``judge_prompt_tokens``, ``judge_completion_tokens`` (the cost, as the endpoint
    reports ``usage``)."""

    Options = LLMJudgeOptions
    what = "an LLM's parsed score of the answer (any OpenAI-compatible endpoint)"
    options: LLMJudgeOptions

    def __init__(self, options: Any, context: EvaluatorContext | None = None) -> None:
        super().__init__(options, context)
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def required_fields(self) -> tuple[str, ...]:
        keys = (self.options.question_key, self.options.reference_key)
        return tuple(k for k in keys if k)

    def client(self) -> Any:
        from nexrl.core.chat.client import make_client

        with self._lock:
            if self._client is None:
                o = self.options
                self._client = make_client(
                    o.base_url or self.context.base_urls[0],
                    api_key=o.api_key or self.context.api_key,
                    timeout_s=o.timeout_s,
                    max_retries=o.max_retries,
                )
            return self._client

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        o = self.options
        reference = str(data[o.reference_key]) if o.reference_key else ""
        prompt = o.prompt.format(
            question=_text(data[o.question_key]),
            answer=evaluation_target.final_answer,
            reference=reference,
        )
        metrics = {"judge_calls": 1.0, "judge_failures": 0.0}
        metrics |= {"judge_prompt_tokens": 0.0, "judge_completion_tokens": 0.0}
        try:
            reply = self.client().chat.completions.create(
                model=o.model or self.context.model,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=o.max_tokens,
                temperature=o.temperature,
            )
        except Exception as exc:  # the judge is down, slow or rude: the sample scores 0
            log.warning("llm_judge: no verdict: %s: %s", type(exc).__name__, exc)
            metrics["judge_failures"] = 1.0
            return EvaluationRunResult(
                reward=0.0,
                ground_truth=reference,
                metrics=metrics,
                extra_info={"judge_error": f"{type(exc).__name__}: {exc}"},
            )
        if reply.usage is not None:
            metrics["judge_prompt_tokens"] = float(reply.usage.prompt_tokens or 0)
            metrics["judge_completion_tokens"] = float(reply.usage.completion_tokens or 0)
        text = (reply.choices[0].message.content if reply.choices else None) or ""
        found = re.findall(o.score_pattern, text)
        if not found:
            metrics["judge_failures"] = 1.0
            return EvaluationRunResult(
                reward=0.0, ground_truth=reference, metrics=metrics, extra_info={"judge": text}
            )
        score = float(found[-1] if isinstance(found[-1], str) else found[-1][0])
        reward = min(max(score / o.max_score, 0.0), 1.0)
        return EvaluationRunResult(
            reward=reward, ground_truth=reference, metrics=metrics, extra_info={"judge": text}
        )
