"""DataLoader: groups, per-epoch shuffling, filtering, epochs and exact resume."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from nexrl.core.data import DataError
from nexrl.driver.data import DataLoader, LoaderConfig, render_prompt, word_count_length
from tests.unit.data._datafiles import numbered_prompts, write_jsonl, write_parquet


def _files(tmp_path: Path, n_a: int = 4, n_b: int = 3) -> list[str]:
    return [
        write_parquet(tmp_path / "a.parquet", numbered_prompts(0, n_a)),
        write_jsonl(tmp_path / "b.jsonl", numbered_prompts(n_a, n_b)),
    ]


def _config(files: list[str], **over: Any) -> LoaderConfig:
    kwargs: dict[str, Any] = {"data_files": files, "group_size": 2}
    kwargs.update(over)
    return LoaderConfig(**kwargs)


def _answers(groups: list[list[dict[str, Any]]]) -> list[str]:
    return [g[0]["data_item"]["answer"] for g in groups]


def _keys(groups: list[list[dict[str, Any]]]) -> list[tuple[int, int]]:
    return [(g[0]["epoch"], g[0]["index"]) for g in groups]


def test_groups_repeat_each_prompt_with_stable_group_ids(tmp_path: Path) -> None:
    loader = DataLoader(_config(_files(tmp_path), shuffle=False, group_size=3, total_epochs=2))
    groups = list(loader)
    assert len(loader) == 7 and len(groups) == 14
    first = groups[0]
    assert [item["run_id"] for item in first] == [0, 1, 2]
    assert first[0] == {
        "group_id": 0,
        "run_id": 0,
        "epoch": 0,
        "index": 0,
        "prompt": "question 0",
        "data_item": {"prompt": "question 0", "answer": "0"},
    }
    assert all(item["group_id"] == first[0]["group_id"] for item in first)
    # group_id = epoch * len(loader) + index: unique across the two epochs.
    assert [g[0]["group_id"] for g in groups] == list(range(14))
    assert [g[0]["epoch"] for g in groups] == [0] * 7 + [1] * 7
    # Each dict owns its data: mutating one leaves the others and the next epoch intact.
    first[0]["data_item"]["answer"] = "changed"
    assert first[1]["data_item"]["answer"] == "0"
    assert groups[7][0]["data_item"]["answer"] == "0"


def test_chat_prompts_are_copied_per_item(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "hello there"}]
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": chat}])
    loader = DataLoader(_config([path], prompt_key="messages"))
    group = next(iter(loader))
    group[0]["prompt"].append({"role": "assistant", "content": "hi"})
    assert group[1]["prompt"] == chat
    assert next(loader)[0]["prompt"] == chat


def test_unshuffled_order_is_file_order_and_shuffled_order_is_reproducible(tmp_path: Path) -> None:
    files = _files(tmp_path)
    plain = DataLoader(_config(files, shuffle=False, total_epochs=1))
    assert _answers(list(plain)) == [str(i) for i in range(7)]

    def run(seed: int) -> list[tuple[int, int]]:
        return _keys(list(DataLoader(_config(files, seed=seed, total_epochs=3))))

    once, again, other = run(1), run(1), run(2)
    assert once == again
    assert once != other
    epochs = [[i for e, i in once if e == k] for k in range(3)]
    assert all(sorted(order) == list(range(7)) for order in epochs)
    assert len({tuple(order) for order in epochs}) == 3  # a fresh order every epoch
    assert epochs[0] != list(range(7))


def test_overlong_prompts_are_filtered_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [
        {"prompt": "one two three"},
        {"prompt": "one"},
        {"prompt": "a b c d e"},
        {"prompt": "x y"},
    ]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    with caplog.at_level(logging.INFO, logger="nexrl.driver.data"):
        loader = DataLoader(_config([path], max_prompt_length=2, shuffle=False))
    assert len(loader) == 2
    assert [g[0]["prompt"] for g in loader.next_batch(10)] == ["one", "x y"]
    assert loader.stats() == {
        "rows_read": 4,
        "bad_rows_skipped": 0,
        "filtered_overlong": 2,
        "num_prompts": 2,
    }
    assert "2 longer than max_prompt_length=2 dropped" in caplog.text


def test_every_prompt_too_long_names_the_length_that_would_keep_one(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a b c"}, {"prompt": "a b c d"}])
    with pytest.raises(DataError) as err:
        DataLoader(_config([path], max_prompt_length=2))
    assert str(err.value) == (
        f"data.data_files: every prompt in ['{path}'] is longer than "
        "data.max_prompt_length=2 tokens (the shortest has 3); raise "
        "data.max_prompt_length to at least 3"
    )


def test_most_prompts_too_long_is_a_warning_naming_the_longest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [{"prompt": "a b c"}, {"prompt": "a b c d e"}, {"prompt": "a"}]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.data"):
        assert len(DataLoader(_config([path], max_prompt_length=2))) == 1
    assert (
        "data: 2 of 3 prompts in data.data_files are longer than data.max_prompt_length=2 "
        "tokens and are left out (the longest has 5); raise data.max_prompt_length to train "
        "on them"
    ) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.data"):
        DataLoader(_config([path], max_prompt_length=3))  # one of three: no warning
    assert "left out" not in caplog.text


def test_custom_prompt_length_function_is_used(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "abcdef"}, {"prompt": "ab"}])
    loader = DataLoader(_config([path], max_prompt_length=3), prompt_length=len)
    assert loader.stats()["filtered_overlong"] == 1 and len(loader) == 1


def test_default_length_counts_words_of_the_rendered_prompt() -> None:
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2 + 2 ?"}]
    assert render_prompt(chat) == "system: be brief\nuser: 2 + 2 ?"
    assert word_count_length(chat) == 8
    assert word_count_length("  several   spaced\twords \n") == 3


def test_skipped_bad_rows_are_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "ok"}, "{broken", {"text": "no prompt"}])
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.data"):
        loader = DataLoader(_config([path], bad_rows="skip"))
    assert loader.stats()["bad_rows_skipped"] == 2 and len(loader) == 1
    assert "skipped 2 bad rows" in caplog.text and "line 2" in caplog.text
    with pytest.raises(DataError, match=r"line 2: invalid JSON"):
        DataLoader(_config([path]))


def test_no_usable_prompts_is_an_error(tmp_path: Path) -> None:
    rows = [{"prompt": "far too long a prompt"}, {"question": "no prompt field"}]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(DataError) as err:
        DataLoader(_config([path], max_prompt_length=2, bad_rows="skip"))
    assert str(err.value) == (
        f"data.data_files: no usable prompts in ['{path}']: 2 rows read, 1 bad rows skipped, "
        "1 longer than data.max_prompt_length=2 tokens dropped; check data.prompt_key and "
        "data.max_prompt_length"
    )


def test_errors_about_validation_files_name_validate_data_files(tmp_path: Path) -> None:
    """Through the path a run takes (``validation_groups``): the field to fix is named."""
    from nexrl.driver.controller.setup import validation_groups
    from nexrl.driver.recipe import load_recipe_checked

    too_long = tmp_path / "too_long.jsonl"  # rows --check passes: only the loader drops them
    too_long.write_text(json.dumps({"prompt": "word " * 100, "answer": "1"}) + "\n")
    recipe = load_recipe_checked(
        "recipes/max_digit/max_digit_tiny.yaml", [f"validate.data_files=[{too_long}]"]
    )
    with pytest.raises(DataError, match=r"^validate\.data_files: every prompt in .* is longer"):
        validation_groups(recipe, word_count_length)


def test_max_samples_keeps_the_first_prompts(tmp_path: Path) -> None:
    loader = DataLoader(_config(_files(tmp_path), max_samples=5, total_epochs=1))
    assert len(loader) == 5
    assert sorted(_answers(list(loader))) == ["0", "1", "2", "3", "4"]


def test_next_batch_stays_in_one_epoch_and_ends_when_exhausted(tmp_path: Path) -> None:
    loader = DataLoader(_config(_files(tmp_path), total_epochs=2))
    sizes, epochs = [], []
    while batch := loader.next_batch(3):
        sizes.append(len(batch))
        epochs.append({g[0]["epoch"] for g in batch})
    assert sizes == [3, 3, 1, 3, 3, 1]
    assert epochs == [{0}, {0}, {0}, {1}, {1}, {1}]
    assert loader.exhausted and loader.next_batch(3) == [] and list(loader) == []


def test_drop_last_skips_the_short_tail_of_each_epoch(tmp_path: Path) -> None:
    files = _files(tmp_path)
    loader = DataLoader(_config(files, total_epochs=2, drop_last=True))
    batches = []
    while batch := loader.next_batch(3):
        batches.append(batch)
    assert [len(b) for b in batches] == [3, 3, 3, 3]
    full = _keys(list(DataLoader(_config(files, total_epochs=2))))
    assert [k for b in batches for k in _keys(b)] == full[0:6] + full[7:13]
    with pytest.raises(DataError, match=r"only 7 prompts per epoch"):
        DataLoader(_config(files, drop_last=True)).next_batch(8)


def test_unbounded_epochs_keep_going(tmp_path: Path) -> None:
    loader = DataLoader(_config(_files(tmp_path)))
    for _ in range(7 * 5):
        next(loader)
    assert loader.epoch == 4 and not loader.exhausted
    assert next(loader)[0]["epoch"] == 5


def _drain(loader: DataLoader) -> list[tuple[int, int, int]]:
    return [(g[0]["epoch"], g[0]["index"], g[0]["group_id"]) for g in loader]


def test_resume_mid_epoch_yields_exactly_the_rest(tmp_path: Path) -> None:
    cfg = _config(_files(tmp_path), total_epochs=3, seed=5)
    full = _drain(DataLoader(cfg))
    original = DataLoader(cfg)
    seen = [(g[0]["epoch"], g[0]["index"], g[0]["group_id"]) for g in original.next_batch(3)]
    seen += _drain_n(original, 6)  # 9 consumed: into epoch 1
    state = json.loads(json.dumps(original.state_dict()))  # checkpoints are JSON
    resumed = DataLoader(cfg)
    resumed.load_state_dict(state)
    assert resumed.epoch == 1
    assert seen + _drain(resumed) == full
    # The original continues identically too (state_dict has no side effects).
    assert seen + _drain(original) == full


def _drain_n(loader: DataLoader, n: int) -> list[tuple[int, int, int]]:
    return [
        (g[0]["epoch"], g[0]["index"], g[0]["group_id"]) for g in (next(loader) for _ in range(n))
    ]


def test_resume_exactly_at_the_epoch_boundary_does_not_skip_an_epoch(tmp_path: Path) -> None:
    cfg = _config(_files(tmp_path), total_epochs=3, seed=11)
    full = _drain(DataLoader(cfg))
    original = DataLoader(cfg)
    epoch0 = _drain_n(original, 7)  # the last prompt of epoch 0 was just handed out
    assert {e for e, _, _ in epoch0} == {0}
    state = original.state_dict()
    assert (state["epoch"], state["position"]) == (0, 7)

    resumed = DataLoader(cfg)
    resumed.load_state_dict(state)
    nxt = next(resumed)[0]
    assert (nxt["epoch"], nxt["index"], nxt["group_id"]) == full[7]
    assert nxt["epoch"] == 1
    rest = _drain(resumed)
    assert [*epoch0, full[7], *rest] == full
    assert len(rest) == 7 * 2 - 1


def test_resume_at_every_position_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    cfg = _config(_files(tmp_path, 2, 1), total_epochs=3, seed=3)
    full = _drain(DataLoader(cfg))
    for k in range(len(full) + 1):
        original = DataLoader(cfg)
        head = _drain_n(original, k)
        resumed = DataLoader(cfg)
        resumed.load_state_dict(original.state_dict())
        assert head + _drain(resumed) == full, k


def test_resume_of_batches_at_the_epoch_boundary(tmp_path: Path) -> None:
    cfg = _config(_files(tmp_path, 3, 3), total_epochs=2)
    full = _drain(DataLoader(cfg))
    original = DataLoader(cfg)
    assert len(original.next_batch(3)) == 3 and len(original.next_batch(3)) == 3
    resumed = DataLoader(cfg)
    resumed.load_state_dict(original.state_dict())
    batch = resumed.next_batch(3)
    assert [(g[0]["epoch"], g[0]["index"], g[0]["group_id"]) for g in batch] == full[6:9]


def test_resume_of_a_finished_loader_stays_finished(tmp_path: Path) -> None:
    cfg = _config(_files(tmp_path), total_epochs=1)
    original = DataLoader(cfg)
    list(original)
    resumed = DataLoader(cfg)
    resumed.load_state_dict(original.state_dict())
    assert resumed.exhausted and resumed.next_batch(1) == []
    # Raising total_epochs afterwards continues with the next epoch.
    longer = DataLoader(_config(cfg.data_files, total_epochs=2))
    longer.load_state_dict(original.state_dict())
    assert next(longer)[0]["epoch"] == 1


def test_resume_refuses_changed_data_or_order(tmp_path: Path) -> None:
    files = _files(tmp_path)
    state = DataLoader(_config(files)).state_dict()
    with pytest.raises(DataError, match=r"data.seed is 43 .* data.seed=42"):
        DataLoader(_config(files, seed=43)).load_state_dict(state)
    with pytest.raises(DataError, match=r"data.shuffle"):
        DataLoader(_config(files, shuffle=False)).load_state_dict(state)
    with pytest.raises(DataError, match=r"prompt data changed.*7 prompts then, 4 now"):
        DataLoader(_config(files[:1])).load_state_dict(state)
    # Same number of prompts, different content.
    other = write_jsonl(tmp_path / "other.jsonl", numbered_prompts(100, 7))
    with pytest.raises(DataError, match=r"prompt data changed"):
        DataLoader(_config([other])).load_state_dict(state)
    with pytest.raises(DataError, match=r"not a version-1 state"):
        DataLoader(_config(files)).load_state_dict({"epoch": 0})


def test_config_mistakes_name_the_field(tmp_path: Path) -> None:
    files = _files(tmp_path)
    with pytest.raises(DataError, match=r"data.bad_rows"):
        DataLoader(_config(files, bad_rows="ignore"))
    with pytest.raises(DataError, match=r"rollout_worker.group_size: must be >= 1"):
        DataLoader(_config(files, group_size=0))
    with pytest.raises(DataError, match=r"data.data_files: no data files"):
        DataLoader(_config([]))
    with pytest.raises(DataError, match=r"nope.jsonl: data file not found"):
        DataLoader(_config([*files, str(tmp_path / "nope.jsonl")]))


def test_failing_prompt_length_names_the_row(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "fine"}, {"prompt": "boom"}])

    def length(prompt: Any) -> int:
        if prompt == "boom":
            raise ValueError("tokenizer exploded")
        return 1

    with pytest.raises(DataError) as info:
        DataLoader(_config([path]), prompt_length=length)
    assert str(info.value).startswith(f"{path}, line 2: prompt_length failed")
    assert "tokenizer exploded" in str(info.value)


def test_prompts_past_the_models_context_are_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """data.max_prompt_length above the model's context: such a prompt failed every
    rollout of its group with the server's 400 until max_task_failures stopped the run,
    neither setting named. Through the run's path: ``data_config`` with the model's
    folder (its config.json)."""
    from nexrl.driver.controller.setup import data_config
    from nexrl.driver.recipe import load_recipe_checked

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 8}))
    rows = [{"prompt": "max 1 2", "answer": "2"}, {"prompt": "max 1 2 3 4 5 6 7", "answer": "7"}]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    recipe = load_recipe_checked(
        "recipes/max_digit/max_digit_tiny.yaml",
        [f"data.data_files=[{path}]", "data.max_prompt_length=100", "data.shuffle=false"],
    )
    cfg = data_config(recipe, model)  # max_digit answers in 1 token: 8 - 1 = 7 for a prompt
    assert cfg.context_limit == (
        7,
        "the model's context of 8 tokens less rollout_worker.max_response_length=1",
    )
    with caplog.at_level(logging.WARNING, logger="nexrl.driver.data"):
        loader = DataLoader(cfg)  # (the word count: 3 and 8 "tokens")
    assert [g[0]["prompt"] for g in loader.next_batch(1)] == ["max 1 2"]
    assert (
        "data: 1 of 2 prompts in data.data_files are longer than 7 tokens (the model's "
        "context of 8 tokens less rollout_worker.max_response_length=1) and are left out "
        "(the longest has 8); use a model with a longer context, or a shorter "
        "rollout_worker.max_response_length to train on them"
    ) in caplog.text
    assert data_config(recipe).context_limit is None  # no model folder: not known
