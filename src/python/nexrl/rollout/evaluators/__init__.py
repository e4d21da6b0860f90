"""Evaluators a recipe picks by name: ``rollout_worker.evaluator: exact_match`` with
``rollout_worker.evaluator_options: {...}`` (the user guide's "Evaluators by name"
lists each one, its options and the data fields it reads).

    from nexrl.rollout.evaluators import EVALUATORS, build
    ev = build("numeric", {"abs_tol": 0.01})
"""

from nexrl.rollout.evaluators import (  # noqa: F401  (each module registers its evaluator)
    code_execution,
    exact_match,
    fuzzy,
    llm_judge,
    multi_criteria,
    numeric,
    regex,
)
from nexrl.rollout.evaluators.registry import (
    EVALUATORS,
    EvaluatorContext,
    NamedEvaluator,
    build,
    is_named,
    register,
)

__all__ = ["EVALUATORS", "EvaluatorContext", "NamedEvaluator", "build", "is_named", "register"]
