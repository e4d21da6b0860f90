"""``rollout_worker.type: openai_agent``: the agent function is loaded and checked when
the recipe is, before any cluster starts; each mistake names
``rollout_worker.agent_entrypoint`` (or the field at fault) and the fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.recipe import load_recipe_checked
from nexrl.rollout.worker.openai_agent import load_entrypoint

AGENT = """
import openai

def run(task, *, base_url, api_key, model):
    return ""

async def run_async(task, base_url, api_key, model, **extra):
    return ""

def run_kwargs(task, **kw):
    return ""

def no_model(task, *, base_url, api_key):
    return ""

def no_task(*, base_url, api_key, model):
    return ""

class Agent:
    pass

ANSWER = "9"
"""


def recipe(tmp_path: Path, rollout_worker: str) -> str:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "evaluator.py").write_text(
        textwrap.dedent(
            """
            from nexrl.rollout_worker import Evaluator, EvaluationRunResult

            class Good(Evaluator):
                def evaluate(self, data, evaluation_target):
                    return EvaluationRunResult(reward=1.0)
            """
        )
    )
    (tmp_path / "train.jsonl").write_text('{"prompt": "max 1 2 3", "answer": "3"}\n')
    body = textwrap.dedent(
        """
        defaults: [nexrl_base, _self_]
        experiment_name: t
        model: {tiny: {vocab: [a, b]}}
        data: {data_files: [train.jsonl]}
        trajectory_pool: {key_list: [group_id], batch_size: 8}
        """
    )
    rw = f'rollout_worker: {{evaluator: "evaluator.py:Good", group_size: 4, {rollout_worker}}}\n'
    path = tmp_path / "r.yaml"
    path.write_text(body + rw)
    return str(path)


def problems(tmp_path: Path, rollout_worker: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(recipe(tmp_path, rollout_worker))
    return info.value.problems


@pytest.mark.parametrize("fn", ["run", "run_async", "run_kwargs"])
def test_a_function_with_the_contracts_signature_is_accepted(tmp_path: Path, fn: str) -> None:
    cfg = load_recipe_checked(
        recipe(tmp_path, f'type: openai_agent, agent_entrypoint: "agent.py:{fn}"')
    ).cfg
    assert cfg.rollout_worker.agent_entrypoint == f"agent.py:{fn}"
    entry = load_entrypoint(f"agent.py:{fn}", [tmp_path])
    assert entry.is_async == (fn == "run_async")
    assert entry.name == f"agent.py:{fn}"


def test_the_shipped_recipe_is_valid() -> None:
    cfg = load_recipe_checked("recipes/openai_agent/openai_agent_tiny.yaml").cfg
    assert cfg.rollout_worker.type == "openai_agent"
    assert load_entrypoint(cfg.rollout_worker.agent_entrypoint, [Path.cwd()]).is_async is False


@pytest.mark.parametrize(
    ("rollout_worker", "expected"),
    [
        (
            "type: openai_agent",
            "rollout_worker.agent_entrypoint: required with rollout_worker.type: openai_agent",
        ),
        (
            'type: openai_agent, agent_entrypoint: "missing.py:run"',
            "rollout_worker.agent_entrypoint: file 'missing.py' not found",
        ),
        (
            'type: openai_agent, agent_entrypoint: "agent.py:nope"',
            "rollout_worker.agent_entrypoint: '{dir}/agent.py' defines no 'nope'",
        ),
        (
            'type: openai_agent, agent_entrypoint: "agent.py"',
            "rollout_worker.agent_entrypoint: 'agent.py' is not 'path/to/agent.py:function'",
        ),
        (
            'type: openai_agent, agent_entrypoint: "agent.py:no_model"',
            "rollout_worker.agent_entrypoint: no_model(task, *, base_url, api_key) in agent.py "
            "cannot be called as no_model(task, base_url=..., api_key=..., model=...) "
            "(got an unexpected keyword argument 'model'); the agent function's contract is "
            "run(task, *, base_url, api_key, model) -> str",
        ),
        (
            'type: openai_agent, agent_entrypoint: "agent.py:no_task"',
            "rollout_worker.agent_entrypoint: no_task(*, base_url, api_key, model) in agent.py "
            "cannot be called as no_task(task, base_url=..., api_key=..., model=...) "
            "(too many positional arguments)",
        ),
        (
            'type: openai_agent, agent_entrypoint: "agent.py:Agent"',
            "rollout_worker.agent_entrypoint: 'Agent' in agent.py is a type, not a function",
        ),
        (
            'type: openai_agent, agent_entrypoint: "agent.py:ANSWER"',
            "rollout_worker.agent_entrypoint: 'ANSWER' in agent.py is a str, not a function",
        ),
        (
            'type: simple, agent_entrypoint: "agent.py:run"',
            "rollout_worker.agent_entrypoint: set, but rollout_worker.type is 'simple'; use "
            "rollout_worker.type: openai_agent",
        ),
        (
            'type: openai_agent, agent_entrypoint: "agent.py:run", agent_timeout_s: 900',
            "rollout_worker.agent_timeout_s (900) must be below runtime_monitor.task_timeout_s "
            "(600)",
        ),
    ],
)
def test_a_broken_entrypoint_is_refused_naming_the_field(
    tmp_path: Path, rollout_worker: str, expected: str
) -> None:
    found = problems(tmp_path, rollout_worker)
    expected = expected.replace("{dir}", str(tmp_path.resolve()))
    assert any(p.startswith(expected) for p in found), found
