"""End-to-end: ``nexrl train`` trains an unmodified OpenAI-API agent function
(``rollout_worker.type: openai_agent``) on a real LocalCluster: the agent runs in
the rollout futures against each worker's recording agent service, the evaluator
futures score and commit the episodes, the trainer steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nexrl.core.chat import Generation, parse_chat_completion
from nexrl.core.pool import TrajectoryPool
from nexrl.core.pool.config import PoolConfig
from nexrl.core.types import Trajectory
from nexrl.driver.controller import Controller
from nexrl.driver.recipe import load_recipe_checked
from tests import _launch
from tests.e2e._recipe import overrides, subprocess_env, train_rows

RECIPE = "recipes/openai_agent/openai_agent_tiny.yaml"
RECORDING_AGENT = "tests/e2e/_recording_agent.py:run"


def pool_trajectories(out: Path) -> list[Trajectory]:
    pool = TrajectoryPool(
        PoolConfig(
            store=str(out / "pool.zarr"),
            batch_readiness="loaded_batch_finished",
            consumer="test",
        )
    )
    found: list[Trajectory] = []
    while (batch := pool.get_batch(loaded_batch_finished=True)) is not None:
        found.extend(batch.trajectories())
    return found


def agent_saw(log: Path) -> dict[str, list[Generation]]:
    """Per session: the replies the agent got, as the inference service sampled them."""
    out = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        out[rec["session"]] = [parse_chat_completion(body)[0] for body in rec["replies"]]
    return out


def test_an_unmodified_agent_trains_on_exactly_what_the_server_sampled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "agent.jsonl"
    monkeypatch.setenv("NEXRL_TEST_AGENT_LOG", str(log))  # inherited by the cluster's workers
    out = tmp_path / "run"
    recipe = load_recipe_checked(
        RECIPE, overrides(out, f"rollout_worker.agent_entrypoint={RECORDING_AGENT}", steps=3)
    )
    result = Controller(recipe, progress=False).run()
    assert (result.steps, result.stopped_by) == (3, None)
    rows = train_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    # 4 prompts x 8 episodes x 2 model calls per step, GRPO grouped by episode
    assert all(r["batch/size"] == 64 and r["batch/num_groups"] == 4 for r in rows)

    saw = agent_saw(log)
    trajectories = pool_trajectories(out)
    assert len(trajectories) == 3 * 64
    by_session: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        by_session.setdefault(t.extra_info["session"], []).append(t)
    assert len(by_session) == 3 * 32
    versions = set()
    for session, (t1, t2) in by_session.items():
        # agent_trajectory: per_call: each model call as the agent got it, in call order
        calls = saw[session]
        for t, call in zip((t1, t2), calls, strict=True):
            assert (t.prompt_ids, t.response_ids) == (call.prompt_token_ids, call.token_ids)
            assert t.logprobs == pytest.approx([min(0.0, x) for x in call.logprobs or []])
            assert t.loss_mask == [1] * len(call.token_ids)
            assert t.policy_version == call.policy_version
            right = (calls[-1].text or "").split()[:1] == [t.data_item["answer"]]
            assert t.reward == (1.0 if right else 0.0)  # the episode's final answer
        assert (t1.group_id, t1.run_id) == (t2.group_id, t2.run_id)
        versions.add(t1.policy_version)
    assert versions == {0, 1, 2}  # each step sampled from the weights of the step before


def test_a_failed_group_is_retried_while_the_pool_holds_the_rest_of_its_batch(
    tmp_path: Path,
) -> None:
    """Per-call trajectories (two per episode) and whole loaded batches: one group of the
    first batch fails its tries while the batch's other groups reach the pool. The retry
    must go out: held back while the pool looked full (two trajectories an episode count
    a group twice), the step waited for good with nothing in flight."""
    out, fails = tmp_path / "run", tmp_path / "fails"
    fails.mkdir()
    env = {**subprocess_env(), "NEXRL_TEST_FAIL_DIR": str(fails), "NEXRL_TEST_FAIL_S": "2"}
    args = [
        *overrides(out, "rollout_worker.agent_entrypoint=tests/e2e/_flaky_agent.py:run", steps=2),
        "weight.sync_mode=sync",
    ]
    proc = _launch.run(
        [sys.executable, "-m", "nexrl.driver.cli.train", RECIPE, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # the hang: a TimeoutExpired
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "failed (attempt 1 of" in proc.stderr, proc.stderr[-3000:]  # the case
    assert [r["step"] for r in train_rows(out)] == [1, 2]
