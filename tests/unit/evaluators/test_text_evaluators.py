"""exact_match, regex, numeric and fuzzy on hand-computed answers; their options checked."""

from __future__ import annotations

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.core.types.episode import BaseEvaluationTarget
from nexrl.rollout.evaluators import build
from nexrl.rollout.evaluators.fuzzy import levenshtein, similarity
from nexrl.rollout.evaluators.regex import last_boxed


def score(name: str, answer: str, row: dict, **options) -> tuple[float, dict]:
    result = build(name, options).evaluate(row, BaseEvaluationTarget(final_answer=answer))
    return result.reward, result.metrics


@pytest.mark.parametrize(
    ("answer", "options", "reward"),
    [
        ("Paris", {}, 1.0),
        ("  paris \n", {}, 1.0),  # case and ends of whitespace ignored by default
        ("PARIS", {"ignore_case": False}, 0.0),
        ("Paris.", {}, 0.0),  # punctuation counts by default
        ("Paris.", {"ignore_punctuation": True}, 1.0),
        ("New   York", {"reference_key": "city"}, 1.0),  # whitespace runs -> one space
        ("Lyon", {}, 0.0),
    ],
)
def test_exact_match_normalises_as_its_options_say(answer, options, reward) -> None:
    row = {"answer": "Paris", "city": "new york"}
    assert score("exact_match", answer, row, **options)[0] == reward


def test_exact_match_accepts_any_of_a_list_of_references() -> None:
    assert score("exact_match", "NYC", {"answer": ["New York", "nyc"]})[0] == 1.0


def test_last_boxed_balances_nested_braces() -> None:
    assert last_boxed(r"\boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"\boxed{unclosed") is None
    assert last_boxed("no box") is None
    # the last complete box: an unclosed one after it does not hide it
    assert last_boxed(r"\boxed{12} and \boxed{1") == "12"


@pytest.mark.parametrize(
    ("answer", "options", "reward", "extracted"),
    [
        (r"so the answer is \boxed{42}.", {}, 1.0, 1.0),
        ("the answer is 42", {}, 0.0, 0.0),  # no \boxed{}: format not followed
        ("3 apples and 42 pears: 41", {"extract": "last_number"}, 0.0, 1.0),
        ("3 apples, 42", {"extract": "last_number"}, 1.0, 1.0),
        ("<answer> 42 </answer>", {"extract": "tag"}, 1.0, 1.0),
        ("<final>42</final>", {"extract": "tag", "tag": "final"}, 1.0, 1.0),
        ("ANSWER: 42.0", {"extract": "pattern", "pattern": r"ANSWER:\s*(\S+)"}, 0.0, 1.0),
        (
            "ANSWER: 42.0",
            {"extract": "pattern", "pattern": r"ANSWER:\s*(\S+)", "compare": "numeric"},
            1.0,
            1.0,
        ),
    ],
)
def test_regex_extracts_then_compares(answer, options, reward, extracted) -> None:
    assert score("regex", answer, {"answer": "42"}, **options) == (
        reward,
        {"extracted": extracted},
    )


@pytest.mark.parametrize(
    ("answer", "options", "reward"),
    [
        ("about 3.14159", {"abs_tol": 1e-3}, 1.0),  # |3.14159 - 3.1416| = 1e-5
        ("about 3.15", {"abs_tol": 1e-3}, 0.0),  # 0.0084 > 0.001
        ("1,000", {"reference_key": "big", "rel_tol": 0.01}, 1.0),  # |1000-1005| <= 10.05
        ("990", {"reference_key": "big", "rel_tol": 0.01}, 0.0),  # 15 > 10.05
        ("3/4", {"reference_key": "frac"}, 1.0),
        ("pi is 3.1416 or so", {"extract": "whole"}, 0.0),  # the whole text is no number
    ],
)
def test_numeric_tolerance(answer, options, reward) -> None:
    row = {"answer": "3.1416", "big": "1005", "frac": "0.75"}
    assert score("numeric", answer, row, **options)[0] == reward


def test_numeric_reports_answers_without_a_number() -> None:
    assert score("numeric", "no idea", {"answer": "1"}) == (0.0, {"parsed": 0.0})


def test_levenshtein_by_hand() -> None:
    assert levenshtein("kitten", "sitting") == 3  # k->s, e->i, +g
    assert levenshtein("", "abc") == 3
    assert levenshtein("flaw", "lawn") == 2
    assert similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert similarity("", "") == 1.0


def test_fuzzy_threshold_and_graded() -> None:
    row = {"answer": "sitting"}
    assert score("fuzzy", "kitten", row, threshold=0.5) == (1.0, {"similarity": 4 / 7})
    assert score("fuzzy", "kitten", row, threshold=0.6)[0] == 0.0
    assert score("fuzzy", "kitten", row, graded=True)[0] == pytest.approx(4 / 7)
    assert score("fuzzy", " SITTING ", row)[0] == 1.0


@pytest.mark.parametrize(
    ("name", "options", "line"),
    [
        (
            "numeric",
            {"tolerance": 0.1},
            "rollout_worker.evaluator_options.tolerance: unknown option (allowed: "
            "reference_key, abs_tol, rel_tol, extract)",
        ),
        (
            "exact_match",
            {"ignore_case": "yes"},
            "rollout_worker.evaluator_options.ignore_case: expected bool, got 'yes'",
        ),
        (
            "regex",
            {"extract": "xml"},
            "rollout_worker.evaluator_options.extract: 'xml' is not one of: boxed, "
            "last_number, tag, pattern",
        ),
        (
            "regex",
            {"extract": "pattern"},
            "rollout_worker.evaluator_options.pattern: required with extract: pattern",
        ),
        (
            "fuzzy",
            {"threshold": 2},
            "rollout_worker.evaluator_options.threshold: must be in [0, 1], got 2",
        ),
    ],
)
def test_a_wrong_option_is_one_line_naming_the_field(name, options, line) -> None:
    with pytest.raises(RecipeError) as info:
        build(name, options)
    assert info.value.problems == [line]


def test_an_unknown_name_lists_the_named_evaluators() -> None:
    with pytest.raises(RecipeError) as info:
        build("exactmatch")
    assert info.value.problems == [
        "rollout_worker.evaluator: unknown evaluator 'exactmatch'; did you mean "
        "'exact_match'? valid names: 'code_execution', 'exact_match', 'fuzzy', 'llm_judge', "
        "'multi_criteria', 'numeric', 'regex' (or a class 'path/to/file.py:ClassName')"
    ]


def test_required_fields_follow_the_reference_option() -> None:
    assert build("exact_match", {"reference_key": "gold"}).required_fields == ("gold",)


def test_multi_criteria_weighted_sum_logs_each_criterion() -> None:
    criteria = [
        {"name": "correct", "evaluator": "regex", "weight": 0.75, "options": {"extract": "tag"}},
        {"name": "close", "evaluator": "fuzzy", "weight": 0.25, "options": {"graded": True}},
    ]
    ev = build("multi_criteria", {"criteria": criteria})
    answer = "<answer>42</answer>"  # extracted '42' == '42'; similarity to '42': 1 - 17/19
    result = ev.evaluate({"answer": "42"}, BaseEvaluationTarget(final_answer=answer))
    assert result.reward == pytest.approx(0.75 * 1.0 + 0.25 * (2 / 19))
    assert result.metrics == pytest.approx(
        {"correct": 1.0, "correct/extracted": 1.0, "close": 2 / 19, "close/similarity": 2 / 19}
    )
    assert ev.required_fields == ("answer",)
    normalised = build("multi_criteria", {"criteria": criteria[:1] * 1, "normalise_weights": True})
    assert (
        normalised.evaluate({"answer": "42"}, BaseEvaluationTarget(final_answer=answer)).reward
        == 1.0
    )


def test_multi_criteria_names_the_criterion_whose_options_are_wrong() -> None:
    criteria = [{"name": "n", "evaluator": "numeric", "options": {"tol": 1}}]
    with pytest.raises(RecipeError) as info:
        build("multi_criteria", {"criteria": criteria})
    assert info.value.problems == [
        "rollout_worker.evaluator_options.criteria[0].options.tol: unknown option (allowed: "
        "reference_key, abs_tol, rel_tol, extract)"
    ]


def test_a_plugin_registers_its_own_named_evaluator() -> None:
    from dataclasses import dataclass

    from nexrl.core.types.episode import EvaluationRunResult
    from nexrl.rollout.evaluators import EVALUATORS, NamedEvaluator, register

    @dataclass
    class LengthOptions:
        limit: int = 5

    try:

        @register("short_answer")
        class Short(NamedEvaluator):
            Options = LengthOptions

            def evaluate(self, data, evaluation_target):
                return EvaluationRunResult(
                    reward=float(len(evaluation_target.final_answer) <= self.options.limit)
                )

        assert score("short_answer", "abc", {}, limit=3)[0] == 1.0
        assert score("short_answer", "abcd", {}, limit=3)[0] == 0.0
    finally:  # unit test files share a process: leave the registry as it was
        EVALUATORS._entries.pop("short_answer", None)
