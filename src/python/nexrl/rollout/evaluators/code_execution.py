"""``code_execution``: run the model's Python program on the row's test cases in a
sandbox (``nexrl.rollout.evaluators.sandbox``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from nexrl.core.types.episode import BaseEvaluationTarget, EvaluationRunResult
from nexrl.rollout.evaluators.common import opt
from nexrl.rollout.evaluators.registry import EvaluatorContext, NamedEvaluator, register
from nexrl.rollout.evaluators.sandbox import SandboxLimits, run_sandboxed, sandbox_python

__all__ = ["CodeExecution", "program_of"]

FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)


def program_of(answer: str) -> str:
    """The last fenced code block of ``answer`` (```python ... ```), or the whole answer."""
    blocks = FENCE.findall(answer)
    return blocks[-1] if blocks else answer


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


@dataclass
class CodeExecutionOptions:
    tests_key: str = opt(
        "tests",
        "Data field with the test cases: a list (or its JSON text) of {input, output}: "
        "stdin given to the program and the stdout expected.",
    )
    python: str = opt("python3", "The interpreter the program runs with (found in /usr/bin).")
    all_or_nothing: bool = opt(False, "Reward 1 only when every test passes (else the share).")
    cpu_s: float = opt(2.0, "CPU seconds per test (RLIMIT_CPU).")
    wall_s: float = opt(5.0, "Wall-clock seconds per test; then the process group is killed.")
    memory_mb: int = opt(512, "Address space per test, MiB (RLIMIT_AS).")
    file_size_kb: int = opt(1024, "Largest file (stdout included) it may write, KiB.")
    nproc: int = opt(32, "Processes the sandbox user may have (RLIMIT_NPROC).")

    def check(self) -> list[str]:
        bad = [
            n
            for n in ("cpu_s", "wall_s", "memory_mb", "file_size_kb", "nproc")
            if getattr(self, n) <= 0
        ]
        return [f"{n}: must be > 0" for n in bad]


@register("code_execution")
class CodeExecution(NamedEvaluator):
    """Each test: the program (the answer's last fenced block) runs in the sandbox with
    the test's input on stdin; it passes when it exits 0 in time and its stdout equals
    the expected output (line by line, trailing spaces ignored). reward = passed / tests
    (``all_or_nothing``: 1 only if all pass); metrics ``tests_passed`` (that share),
    ``timeouts`` and ``crashes`` (tests killed by the clock, tests with a non-zero exit).
    A program that escapes nothing and prints nothing scores 0."""

    Options = CodeExecutionOptions
    what = "share of the row's test cases the program passes, run in a sandbox"
    options: CodeExecutionOptions

    def __init__(self, options: Any, context: EvaluatorContext | None = None) -> None:
        super().__init__(options, context)
        sandbox_python(options.python)  # SandboxUnavailable now (--check), not per sample
        o = options
        self.limits = SandboxLimits(o.cpu_s, o.memory_mb, o.file_size_kb, o.nproc, o.wall_s)

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.options.tests_key,)

    def tests(self, data: dict[str, Any]) -> list[dict[str, Any]]:
        tests = data[self.options.tests_key]
        if isinstance(tests, str):
            tests = json.loads(tests)
        if not isinstance(tests, list) or not all(
            isinstance(t, dict) and "output" in t for t in tests
        ):
            raise ValueError(
                f"{self.options.tests_key}: expected a list of {{input, output}}, got {tests!r:.80}"
            )
        return tests

    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        tests = self.tests(data)
        program = program_of(evaluation_target.final_answer)
        passed = timeouts = crashes = 0
        for t in tests:
            r = run_sandboxed(program, str(t.get("input", "")), self.limits, self.options.python)
            timeouts += r.timed_out
            crashes += not r.timed_out and r.returncode != 0
            passed += (
                not r.timed_out
                and r.returncode == 0
                and _lines(r.stdout) == _lines(str(t["output"]))
            )
        share = passed / len(tests) if tests else 0.0
        reward = float(share == 1.0) if self.options.all_or_nothing else share
        return EvaluationRunResult(
            reward=reward,
            ground_truth=json.dumps(tests)[:200],
            metrics={"tests_passed": share, "timeouts": float(timeouts), "crashes": float(crashes)},
        )
