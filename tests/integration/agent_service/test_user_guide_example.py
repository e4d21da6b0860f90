"""The user guide's "Train an existing agent with zero code changes" examples, run as written
against a real inference server and agent service."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from backends.inference.embedded import EmbeddedServer
from nexrl.rollout.agent_service import AgentServiceError
from tests.integration.agent_service._pool import read_pool
from tests.integration.agent_service.conftest import ServiceFactory
from tests.integration.inference._helpers import BIGRAM_REPLY, SERVED_NAME

GUIDE = Path("docs/user-guide.md")


def section() -> str:
    text = GUIDE.read_text()
    start = text.index("## Train an existing agent with zero code changes")
    return text[start : text.index("\n## ", start + 1)]


def section_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section(), re.S)


def test_the_guides_agent_and_wrapper_train_through_the_service(
    bigram_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    wrapper = next(b for b in section_blocks("python") if "def run_episode" in b)
    namespace: dict[str, Any] = {}
    exec(compile(wrapper, str(GUIDE), "exec"), namespace)
    service = make_service(bigram_server.base_url)
    # the bigram model always says BIGRAM_REPLY: one attempt right, one wrong
    rewards = [
        namespace["run_episode"](service.base_url, SERVED_NAME, "What is 4+5?", answer, "sum-4-5")
        for answer in ("9", "10")
    ]
    assert rewards == [1.0, 0.0] and BIGRAM_REPLY.endswith("9")
    trajectories = read_pool(service.config.pool)
    # two sessions, each one merged episode of its two calls, in one GRPO group
    assert [t.reward for t in trajectories] == [1.0, 0.0]
    assert len({t.group_id for t in trajectories}) == 1
    assert len({t.run_id for t in trajectories}) == 2
    for t in trajectories:
        assert t.metrics["model_calls"] == 2.0
        assert 0 in t.loss_mask and t.loss_mask[0] == t.loss_mask[-1] == 1


def test_the_guides_push_example_writes_its_record(
    embedded_server: EmbeddedServer, make_service: ServiceFactory
) -> None:
    (push,) = [b for b in section_blocks("python") if "push_trajectories(" in b]
    service = make_service(embedded_server.base_url)
    assert "http://127.0.0.1:8100" in push
    exec(compile(push.replace("http://127.0.0.1:8100", service.base_url), str(GUIDE), "exec"), {})
    (t,) = read_pool(service.config.pool)
    assert (t.prompt_ids, t.response_ids, t.loss_mask) == ([5, 6, 7], [8, 9], [1, 1])
    assert t.extra_info["group"] == "task-7"
    broken = push.replace("http://127.0.0.1:8100", service.base_url).replace(
        '"loss_mask"', '"mask"'
    )
    with pytest.raises(AgentServiceError, match=r"trajectories\[0\]\.loss_mask: Field required"):
        exec(compile(broken, str(GUIDE), "exec"), {})


def test_the_guides_command_line_flags_are_the_clis() -> None:
    from nexrl.rollout.agent_service.cli import parse_args

    (command,) = section_blocks("bash")
    config, args = parse_args(command.replace("\\\n", " ").split()[3:])
    assert (config.pool, config.upstream, args.port) == (
        "runs/my_agent/pool.zarr",
        "http://127.0.0.1:8000",
        8100,
    )
    flags = set(re.findall(r"`(--[a-z-]+)", section())) - {"--help"}
    assert flags == {"--upstream", "--model", "--session-ttl", "--upstream-timeout", "--host"}
    for flag in flags:  # parse_args exits on a flag the CLI does not know
        parse_args(["--pool", "p", "--upstream", "http://x", flag, "1"])
