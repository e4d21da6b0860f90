"""The math recipe (Qwen2.5-0.5B, GRPO): evaluator, data and the recipe itself."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.plugins import load_object
from nexrl.driver.cli.train import main
from nexrl.driver.recipe import load_recipe_checked
from nexrl.rollout_worker import BaseEvaluationTarget, EvaluationRunResult

ROOTS = [Path.cwd()]
RECIPE = "recipes/math/qwen2.5_0.5b_grpo.yaml"
DATA = Path("recipes/math/data")
DEFAULT_MODEL_DIR = Path("models/Qwen2.5-0.5B-Instruct")


def evaluator() -> Any:
    cls = load_object("recipes/math/evaluator.py", "MathEvaluator", ROOTS, "test")
    return cls()


def score(text: str, answer: str = "1234") -> EvaluationRunResult:
    result: EvaluationRunResult = evaluator().evaluate(
        {"prompt": "q", "answer": answer}, BaseEvaluationTarget(final_answer=text)
    )
    return result


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- evaluator ---------------------------------------------------------------


def test_boxed_answer_is_rewarded() -> None:
    r = score("7 + 5 = 12, so the total is \\boxed{12}.", answer="12")
    assert r.reward == 1.0
    assert r.metrics == {"has_boxed": 1.0, "answer_found": 1.0}
    assert r.ground_truth == "12"


def test_last_boxed_wins_and_beats_later_numbers() -> None:
    # The last box counts, not the first box nor the numbers written after it.
    text = "First guess \\boxed{10}, no: \\boxed{12}. Check: 12 - 2 = 10"
    assert score(text, answer="12").reward == 1.0
    assert score(text, answer="10").reward == 0.0


def test_nested_braces_inside_a_box() -> None:
    r = score("\\boxed{\\frac{24}{2}}", answer="12")
    assert r.reward == 0.0 and r.metrics["has_boxed"] == 1.0
    assert r.extra_info["extracted"] == "\\frac{24}{2}"


def test_falls_back_to_the_last_number_without_a_box() -> None:
    r = score("She buys 3 pens at $4, so 3 x 4 = 12. The answer is 12.", answer="12")
    assert r.reward == 1.0
    assert r.metrics == {"has_boxed": 0.0, "answer_found": 1.0}
    assert score("12 is wrong, it is 13", answer="12").reward == 0.0


def test_unclosed_box_falls_back_to_the_last_number() -> None:
    r = score("so 5 + 7 = 12 and \\boxed{12", answer="12")
    assert r.reward == 1.0 and r.metrics["has_boxed"] == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{1,234}",
        "\\boxed{$1,234}",
        "\\boxed{\\$1234}",
        "\\boxed{1234.0}",
        "\\boxed{ +1234 }",
        "\\boxed{1{,}234}",
        "In total 1,234 seats.",
        "Total: $1,234.00",
    ],
)
def test_normalises_separators_dollars_signs_and_zero_fractions(text: str) -> None:
    r = score(text, answer="1234")
    assert r.reward == 1.0, text
    assert r.extra_info["extracted"] == "1234"


@pytest.mark.parametrize(
    ("text", "answer"),
    [("\\boxed{$12}", "12"), ("It costs $12", "12"), ("\\boxed{12.0}", "12"), ("12.00", "12")],
)
def test_dollar_and_trailing_zero_fraction(text: str, answer: str) -> None:
    assert score(text, answer).reward == 1.0


@pytest.mark.parametrize(
    "text",
    ["\\boxed{13}", "\\boxed{12.5}", "\\boxed{12 apples}", "\\boxed{-12}", "1,2"],
)
def test_wrong_answers_score_zero(text: str) -> None:
    assert score(text, answer="12").reward == 0.0


def test_no_number_at_all() -> None:
    r = score("I am not sure how to solve this.", answer="12")
    assert r.reward == 0.0
    assert r.metrics == {"has_boxed": 0.0, "answer_found": 0.0}
    empty_box = score("\\boxed{}", answer="12")
    assert empty_box.reward == 0.0
    assert empty_box.metrics == {"has_boxed": 1.0, "answer_found": 0.0}


def test_integer_answer_in_the_row_is_accepted() -> None:
    r = evaluator().evaluate({"answer": 12}, BaseEvaluationTarget(final_answer="\\boxed{12}"))
    assert r.reward == 1.0 and r.ground_truth == "12"


def test_row_without_answer_raises_naming_the_field() -> None:
    with pytest.raises(ValueError, match="'answer'") as info:
        evaluator().evaluate({"prompt": "q"}, BaseEvaluationTarget(final_answer="\\boxed{1}"))
    assert "prompt" in str(info.value)  # lists the fields the row does have


# -- data --------------------------------------------------------------------

# Each template's sentence, read back independently of make_data.py, with the
# answer it implies (numbers as written, thousands separators removed).
CHECKS: list[tuple[re.Pattern[str], Callable[..., float]]] = [
    (
        re.compile(r"\w+ buys (\d+) [\w -]+ at \$(\d+) each and (\d+) [\w -]+ at \$(\d+) each\."),
        lambda a, p, b, q: a * p + b * q,
    ),
    (
        re.compile(r"\w+ has \$(\d+) and buys (\d+) [\w -]+ that cost \$(\d+) each\."),
        lambda bill, a, p: bill - a * p,
    ),
    (
        re.compile(r"\w+ has (\d+) \w+ and shares them equally among (\d+) friends\."),
        lambda total, k: total / k,
    ),
    (
        re.compile(r"A bakery makes (\d+) muffins and packs them into boxes of (\d+)\."),
        lambda t, k: t / k,
    ),
    (
        re.compile(r"\w+ has (\d+) \w+\. \w+ gives away (\d+), then buys (\d+) packs with (\d+)"),
        lambda a, b, c, d: a - b + c * d,
    ),
    (
        re.compile(r"makes (\d+) \w+ per hour\. It runs for (\d+) hours, and (\d+) of the"),
        lambda r, h, bad: r * h - bad,
    ),
    (
        re.compile(r"has (\d+) classes with (\d+) students each\. .* into (\d+) equal teams"),
        lambda c, s, t: c * s / t,
    ),
    (
        re.compile(r"has (\d+) rows with (\d+) seats in each row\. If ([\d,]+) seats are"),
        lambda rows, seats, taken: rows * seats - taken,
    ),
    (
        re.compile(r"saves \$(\d+) every week for (\d+) weeks and then spends \$(\d+)"),
        lambda w, n, s: w * n - s,
    ),
    (
        re.compile(r"(\d+) friends share the cost of a \$(\d+) dinner equally\."),
        lambda k, total: total / k,
    ),
]


def implied_answer(prompt: str) -> float:
    hits = [(p, f) for p, f in CHECKS if p.search(prompt)]
    assert len(hits) == 1, f"expected one known template, got {len(hits)}: {prompt}"
    pattern, fn = hits[0]
    match = pattern.search(prompt)
    assert match is not None
    return float(fn(*(int(g.replace(",", "")) for g in match.groups())))


@pytest.mark.parametrize("split", ["train", "test"])
def test_shipped_data_parses_with_correct_whole_answers(split: str) -> None:
    path = DATA / f"{split}.jsonl"
    assert path.stat().st_size < 1_000_000
    rows = read_rows(path)
    assert len(rows) == {"train": 2000, "test": 200}[split]
    for row in rows:
        assert set(row) == {"prompt", "answer"}
        assert isinstance(row["prompt"], str) and isinstance(row["answer"], str)
        assert re.fullmatch(r"-?\d+", row["answer"]), row
        assert row["prompt"].endswith("put your final answer within \\boxed{}.")
        assert implied_answer(row["prompt"]) == int(row["answer"]), row
        assert int(row["answer"]) >= 0  # grade school: no negative results


def test_splits_are_disjoint_distinct_and_varied() -> None:
    train = [r["prompt"] for r in read_rows(DATA / "train.jsonl")]
    test = [r["prompt"] for r in read_rows(DATA / "test.jsonl")]
    assert len(set(train)) == len(train) >= 50
    assert len(set(test)) == len(test) >= 50
    assert not set(train) & set(test)
    # Every template appears in both splits.
    for pattern, _ in CHECKS:
        assert any(pattern.search(p) for p in train), pattern.pattern
        assert any(pattern.search(p) for p in test), pattern.pattern


def test_make_data_reproduces_the_shipped_files_byte_for_byte(tmp_path: Path) -> None:
    make = load_object("recipes/math/make_data.py", "make", ROOTS, "test")
    make(tmp_path, 2000, 200, 0)
    for name in ("train.jsonl", "test.jsonl"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_make_data_cli_honours_out_and_seed(tmp_path: Path) -> None:
    cli = load_object("recipes/math/make_data.py", "main", ROOTS, "test")
    cli(["--out", str(tmp_path / "a"), "--n-train", "30", "--n-test", "5", "--seed", "0"])
    cli(["--out", str(tmp_path / "b"), "--n-train", "30", "--n-test", "5", "--seed", "1"])
    a_train = read_rows(tmp_path / "a" / "train.jsonl")
    assert len(a_train) == 30 and len(read_rows(tmp_path / "a" / "test.jsonl")) == 5
    assert a_train != read_rows(tmp_path / "b" / "train.jsonl")  # the seed matters


# -- the recipe ----------------------------------------------------------------


@pytest.fixture(scope="module")
def stand_in_model(tiny_model: Callable[..., Path]) -> Path:
    """A tiny Qwen2 model directory standing in for the (absent) Qwen2.5 weights."""
    return tiny_model(seed=0)


def test_recipe_passes_the_checker_with_a_model_directory(
    stand_in_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NEXRL_QWEN_PATH", raising=False)
    assert main([RECIPE, f"model.path={stand_in_model}", "--check"]) == 0
    captured = capsys.readouterr()
    assert f"{RECIPE}: recipe is valid" in captured.out
    assert captured.err == ""


def test_model_path_comes_from_nexrl_qwen_path(
    stand_in_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NEXRL_QWEN_PATH", str(stand_in_model))
    assert main([RECIPE, "--print-config"]) == 0
    assert f"path: {stand_in_model}\n" in capsys.readouterr().out


@pytest.mark.skipif(
    DEFAULT_MODEL_DIR.exists(), reason="the Qwen weights are present in this checkout"
)
def test_missing_weights_are_a_clear_error_naming_model_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("NEXRL_QWEN_PATH", raising=False)
    assert main([RECIPE, "--check"]) == 2
    captured = capsys.readouterr()
    assert "recipe is valid" not in captured.out
    assert "model.path" in captured.err
    assert str(DEFAULT_MODEL_DIR) in captured.err
    assert "Traceback" not in captured.err
    # The model directory is the only problem: data and evaluator resolve.
    assert "data_files" not in captured.err and "evaluator" not in captured.err


def test_a_wrong_nexrl_qwen_path_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-model"
    monkeypatch.setenv("NEXRL_QWEN_PATH", str(missing))
    assert main([RECIPE, "--check"]) == 2
    err = capsys.readouterr().err
    assert "model.path" in err and str(missing) in err and "Traceback" not in err


def test_recipe_settings_for_a_real_model(stand_in_model: Path) -> None:
    cfg = load_recipe_checked(RECIPE, [f"model.path={stand_in_model}"]).cfg
    # Validation runs on the held-out split, never on the training data.
    assert list(cfg.validate.data_files) == ["recipes/math/data/test.jsonl"]
    assert list(cfg.data.data_files) == ["recipes/math/data/train.jsonl"]
    assert cfg.validate.every > 0
    # One optimizer step = whole GRPO groups of 8.
    assert cfg.rollout_worker.group_size == 8
    assert 64 <= cfg.trajectory_pool.batch_size <= 256
    assert cfg.trajectory_pool.batch_size % cfg.trainer.micro_batch_size == 0
    assert cfg.trainer.bf16 and cfg.trainer.zero_stage in (1, 2)
    assert cfg.trainer.lr == pytest.approx(1e-6)
    assert cfg.rollout_worker.evaluator == "recipes/math/evaluator.py:MathEvaluator"
    assert cfg.weight.sync_mode == "batch-async" and cfg.weight.staleness_threshold == 1
