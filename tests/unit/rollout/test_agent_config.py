"""agent_config.yaml: every mistake reported with its field; episode merging by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.core.chat import Generation
from nexrl.core.types import Trajectory
from nexrl.rollout.worker.agent import AgentConfigError, load_agent_config, merge_episode
from nexrl.rollout.worker.base import Episode
from nexrl.rollout_worker import BaseEvaluationTarget


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "custom_tools.py").write_text("def calculator(a, b):\n    return a + b\n")
    path = tmp_path / "agent_config.yaml"
    path.write_text(text)
    return path


GOOD = """
name: calc
system_prompt: "Use the calculator."
max_turns: 4
llm_config: {temperature: 0.7, max_tokens: 32}
tools:
  - name: calculator
    description: add two integers
    binding: custom_tools:calculator
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}}
"""


def test_a_good_config_binds_its_tools(tmp_path: Path) -> None:
    cfg = load_agent_config(write(tmp_path, GOOD))
    assert (cfg.name, cfg.max_turns, cfg.llm_config["max_tokens"]) == ("calc", 4, 32)
    tool = cfg.tool("calculator")
    assert tool is not None and tool.function(a=2, b=3) == 5
    assert tool.openai()["function"]["parameters"]["properties"]["a"] == {"type": "integer"}


def test_every_problem_is_reported_with_its_field(tmp_path: Path) -> None:
    bad = GOOD.replace("max_turns: 4", "max_turns: 0\nmax_tokns: 3").replace(
        "custom_tools:calculator", "custom_tools:calculater"
    )
    bad = bad.replace("temperature: 0.7", "temprature: 0.7")
    with pytest.raises(AgentConfigError) as err:
        load_agent_config(write(tmp_path, bad))
    text = str(err.value)
    assert "max_turns: must be a positive integer" in text
    assert "unknown key(s) ['max_tokns']" in text
    assert "llm_config: unknown key(s) ['temprature']" in text
    assert "tools[0] (calculator).binding" in text and "calculater" in text
    assert "calculator" in text  # the classes/functions defined there are listed or named


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(AgentConfigError, match="file not found"):
        load_agent_config(tmp_path / "nope.yaml")
    with pytest.raises(AgentConfigError, match="not valid YAML"):
        load_agent_config(write(tmp_path, "tools: [\n"))


def _traj(prompt: list[int], response: list[int], lps: list[float]) -> Trajectory:
    return Trajectory(prompt, response, [1] * len(response), lps, 1.0, group_id=2, run_id=0)


def test_episode_merge_masks_the_tokens_between_calls() -> None:
    # call 1: prompt [1,2], reply [3,4]; call 2's prompt adds a tool result [5,6]
    parts = [_traj([1, 2], [3, 4], [-0.1, -0.2]), _traj([1, 2, 3, 4, 5, 6], [7], [-0.3])]
    gen = Generation(0, "", [], [], [], "stop", 0)
    ep = Episode(item={}, target=BaseEvaluationTarget(""), calls=[gen, gen], infos=[{}, {}])
    merged = merge_episode(parts, ep)
    assert merged.prompt_ids == [1, 2]
    assert merged.response_ids == [3, 4, 5, 6, 7]
    assert merged.loss_mask == [1, 1, 0, 0, 1]
    assert merged.logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert merged.metrics["model_calls"] == 2.0
    broken = [parts[0], _traj([1, 2, 9, 4, 5], [7], [-0.3])]
    with pytest.raises(ValueError, match="call 2 does not extend call 1"):
        merge_episode(broken, ep)


def test_recipe_check_reports_agent_config_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nexrl.driver.cli.train import main

    bad = write(tmp_path, GOOD.replace("custom_tools:calculator", "custom_tools:nope"))
    recipe = "recipes/calculator/calculator_agent_tiny.yaml"
    assert main([recipe, f"rollout_worker.agent_config_path={bad}", "--check"]) == 2
    err = capsys.readouterr().err
    assert "rollout_worker.agent_config_path" in err and "custom_tools" in err
    assert "Traceback" not in err
    assert main([recipe, "--check"]) == 0


def test_a_worker_overriding_neither_episode_method_is_refused() -> None:
    from nexrl.rollout.worker.base import BaseRolloutWorker

    class Empty(BaseRolloutWorker):
        pass

    with pytest.raises(TypeError, match="Empty implements neither run_agent"):
        Empty(None, None, {})  # type: ignore[arg-type]
