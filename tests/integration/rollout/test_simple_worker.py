"""The simple rollout worker against a real embedded server: token-exact trajectories."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.core.chat import InferenceClient
from nexrl.core.plugins import load_object
from nexrl.rollout.worker.simple import SimpleRolloutWorker
from nexrl.rollout_worker import BaseEvaluationTarget, EvaluationRunResult, Evaluator
from tests.integration.inference._helpers import SERVED_NAME

WORDS = ["max", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
ITEM = {"group_id": 7, "run_id": 2, "data_item": {"prompt": "max 4 3 9", "answer": "9"}}


@pytest.fixture(scope="module")
def tiny_model_dir(tiny_model: Callable[..., Path]) -> Path:
    """``embedded_server``'s model: the max-digit words only."""
    return tiny_model(vocab=WORDS, seed=3)


def worker(
    embedded_server: EmbeddedServer, evaluator: Evaluator, **sampling: Any
) -> SimpleRolloutWorker:
    client = InferenceClient(embedded_server.base_url, SERVED_NAME, timeout_s=30, max_retries=1)
    return SimpleRolloutWorker(client, evaluator, {"max_tokens": 3, **sampling})


def max_digit() -> Evaluator:
    cls = load_object("recipes/max_digit/evaluator.py", "MaxDigitEvaluator", [Path.cwd()], "t")
    return cls()


def test_trajectory_is_what_the_server_sampled(embedded_server: EmbeddedServer) -> None:
    w = worker(embedded_server, max_digit(), temperature=0.0)
    (traj,) = asyncio.run(w.rollout(ITEM))
    # Ask the server again directly, greedy: the same tokens and log-probs.
    client = InferenceClient(embedded_server.base_url, SERVED_NAME, timeout_s=30, max_retries=1)
    (gen,) = asyncio.run(
        client.chat([{"role": "user", "content": "max 4 3 9"}], max_tokens=3, temperature=0.0)
    )
    assert traj.prompt_ids == gen.prompt_token_ids
    assert traj.response_ids == gen.token_ids
    assert traj.logprobs == pytest.approx([min(0.0, x) for x in gen.logprobs or []])
    assert traj.loss_mask == [1] * len(gen.token_ids)
    assert (traj.group_id, traj.run_id, traj.policy_version) == (7, 2, gen.policy_version)
    expected = 1.0 if (gen.text or "").split()[:1] == ["9"] else 0.0
    assert traj.reward == expected
    assert traj.data_item == ITEM["data_item"]
    assert traj.metrics["response_length"] == len(gen.token_ids)


class Raises(Evaluator):
    def evaluate(
        self, data: dict[str, Any], evaluation_target: BaseEvaluationTarget
    ) -> EvaluationRunResult:
        raise KeyError("answer")


def test_evaluator_that_raises_gives_reward_zero_and_an_error_metric(
    embedded_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="nexrl.rollout_worker"):
        (traj,) = asyncio.run(worker(embedded_server, Raises()).rollout(ITEM))
    assert traj.reward == 0.0
    assert traj.metrics["evaluator_error"] == 1.0
    assert "KeyError" in traj.extra_info["evaluator_error"]
    # the log (a worker's log file) names the data row and keeps the traceback, so the
    # evaluator's own line that raised can be found
    (record,) = [r for r in caplog.records if "evaluator Raises failed" in r.getMessage()]
    assert 'on data row {"prompt": "max 4 3 9", "answer": "9"}' in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
    assert "in evaluate" in caplog.text and 'raise KeyError("answer")' in caplog.text


class NoTrain(SimpleRolloutWorker):
    def format_task_query(self, data_item: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": "max"},
            {"role": "user", "content": data_item["prompt"]},
        ]

    def get_train_loss_mask(self, trajectory_infos: list[dict[str, Any]]) -> list[bool]:
        return [False for _ in trajectory_infos]


def test_hooks_shape_the_query_and_the_loss_mask(embedded_server: EmbeddedServer) -> None:
    client = InferenceClient(embedded_server.base_url, SERVED_NAME, timeout_s=30, max_retries=1)
    plain = SimpleRolloutWorker(client, max_digit(), {"max_tokens": 2, "temperature": 0.0})
    custom = NoTrain(client, max_digit(), {"max_tokens": 2, "temperature": 0.0})

    async def both() -> list[list[Any]]:
        return list(await asyncio.gather(plain.rollout(ITEM), custom.rollout(ITEM)))

    (a,), (b,) = asyncio.run(both())
    assert len(b.prompt_ids) > len(a.prompt_ids)  # the system message is in the prompt
    assert b.loss_mask == [0] * len(b.response_ids)


def test_seeded_requests_repeat_a_sample_and_differ_between_samples(
    embedded_server: EmbeddedServer,
) -> None:
    """With a seed, a rollout re-samples exactly the same tokens (a retried or
    re-run group is repeatable), while the samples of one group stay distinct
    streams; without a seed no seed is sent."""
    w = worker(embedded_server, max_digit(), temperature=1.0, max_tokens=6)
    w.seed = 11

    async def sample(items: list[dict[str, Any]]) -> list[list[int]]:
        trajs = await asyncio.gather(*(w.rollout(i) for i in items))
        return [t.response_ids for (t,) in trajs]

    async def twice() -> tuple[list[list[int]], list[list[int]]]:
        # the second time in the other order: other server batches
        return await sample(group), (await sample(group[::-1]))[::-1]

    group = [dict(ITEM, run_id=r) for r in range(8)]
    first, again = asyncio.run(twice())
    assert first == again
    assert len({tuple(ids) for ids in first}) > 1  # the 8 samples are not one stream
    seeds = [w.request_seed(item)["seed"] for item in group]
    assert len(set(seeds)) == 8 and all(0 <= s < 2**63 for s in seeds)
    assert w.request_seed(ITEM, 1) != w.request_seed(ITEM, 0)  # each call of an episode
    w.seed = None
    assert w.request_seed(ITEM) == {}


class Counting(InferenceClient):
    """The real client, counting the chat requests it sends (and their ``n``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[int] = []

    async def chat(self, messages: list[dict[str, Any]], **params: Any) -> Any:
        self.requests.append(int(params.get("n", 1)))
        return await super().chat(messages, **params)


class OwnRunAgent(SimpleRolloutWorker):
    async def run_agent(self, item: dict[str, Any]) -> Any:
        return await super().run_agent(item)


def test_a_group_is_asked_in_one_request_with_n(embedded_server: EmbeddedServer) -> None:
    """rollout_worker.one_request_per_group: the 8 samples of a group come from one
    request with n=8, one episode per item in item order, each choice with its
    item's own seed, so exactly the tokens of one request per item; an engine
    without per-choice seeds gets one seed and repeats itself; a worker with its
    own run_agent, the setting off, or items with different prompts send one
    request per item."""
    group = [dict(ITEM, run_id=r) for r in range(8)]

    def run(cls: type[SimpleRolloutWorker], items: list[dict[str, Any]], **attrs: Any) -> Any:
        client = Counting(embedded_server.base_url, SERVED_NAME, timeout_s=30, max_retries=1)
        w = cls(client, max_digit(), {"max_tokens": 4, "temperature": 1.0})
        w.seed = 5
        for k, v in attrs.items():
            setattr(w, k, v)
        episodes = asyncio.run(w.run_group(items))
        trajs = [t for e in episodes for t in w.score(e)]
        return client.requests, trajs

    requests, trajs = run(SimpleRolloutWorker, group)
    assert requests == [8]
    assert [(t.group_id, t.run_id) for t in trajs] == [(7, r) for r in range(8)]
    assert len({tuple(t.response_ids) for t in trajs}) > 1  # 8 streams, not one
    assert all(t.reward in (0.0, 1.0) and t.logprobs for t in trajs)
    per_item_requests, per_item = run(SimpleRolloutWorker, group, group_requests=False)
    assert per_item_requests == [1] * 8
    assert [t.response_ids for t in per_item] == [t.response_ids for t in trajs]
    for a, b in zip(per_item, trajs, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)

    one_seed = run(SimpleRolloutWorker, group, choice_seeds=False)
    assert one_seed[0] == [8]
    assert [t.response_ids for t in run(SimpleRolloutWorker, group, choice_seeds=False)[1]] == [
        t.response_ids for t in one_seed[1]
    ]
    assert len({tuple(t.response_ids) for t in one_seed[1]}) > 1

    assert run(OwnRunAgent, group)[0] == [1] * 8
    mixed = [
        dict(i, data_item={"prompt": f"max {r} 3 9", "answer": "9"}) for r, i in enumerate(group)
    ]
    assert run(SimpleRolloutWorker, mixed)[0] == [1] * 8


def test_the_user_guides_custom_worker_runs_as_written(
    embedded_server: EmbeddedServer, tmp_path: Path
) -> None:
    import re

    import yaml

    from nexrl.driver.recipe import load_recipe_checked
    from nexrl.rollout.worker.registry import ROLLOUT_WORKERS

    text = Path("docs/user-guide.md").read_text()
    (code,) = [
        b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "AnswerWithOneDigit" in b
    ]
    (lines,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if 'Digit"' in b]
    spec = yaml.safe_load(lines)["rollout_worker"]["type"]
    path, name = spec.split(":")
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_text(code)
    # The recipe check loads the class from the recipe's field (the guide's file
    # under a scratch folder) ...
    file = str(tmp_path / path)
    recipe = load_recipe_checked(
        "recipes/max_digit/max_digit_tiny.yaml", [f"rollout_worker.type={file}:{name}"]
    )
    cls = ROLLOUT_WORKERS.get(recipe.cfg.rollout_worker.type, roots=recipe.roots)
    # ... and it rolls out against the server with the guide's system prompt.
    client = InferenceClient(embedded_server.base_url, SERVED_NAME, timeout_s=30, max_retries=1)
    (traj,) = asyncio.run(
        cls(client, max_digit(), {"max_tokens": 2, "temperature": 0.0}).rollout(ITEM)
    )
    messages = [
        {"role": "system", "content": "Answer with one digit."},
        {"role": "user", "content": "max 4 3 9"},
    ]
    again = InferenceClient(embedded_server.base_url, SERVED_NAME, timeout_s=30, max_retries=1)
    (gen,) = asyncio.run(again.chat(messages, max_tokens=2, temperature=0.0))
    assert traj.prompt_ids == gen.prompt_token_ids
    assert traj.response_ids == gen.token_ids
