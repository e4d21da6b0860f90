"""``agent_config.yaml``: a multi-turn tool-calling agent described by configuration.

::

    name: calculator_agent
    system_prompt: "You can use tools."        # a string, or a list of strings joined by newlines
    system_prompt_type: string                 # 'string' (inline) or 'file' (path relative to this file)
    max_context_tokens: 2048                   # prompt + max_tokens of a call may not exceed this
    max_turns: 4                               # model calls per episode
    tool_timeout_s: 10                         # per tool call
    tool_call_mode: openai                     # tools sent as OpenAI `tools`, calls read from `tool_calls`
    llm_config: {temperature: 1.0, max_tokens: 64}
    tools:
      - name: calculator
        description: "Add two integers."
        binding: custom_tools:calculator       # function `calculator` in custom_tools.py next to this file
        parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}},
                     required: [a, b]}

``load_agent_config`` reads and checks it and reports *every* problem with the
field it is about; tool bindings are resolved in the agent's workspace (the
folder of the YAML file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexrl.core.errors import NexrlError

__all__ = ["AgentConfig", "AgentConfigError", "ToolSpec", "load_agent_config"]

SAMPLING_KEYS = {"temperature", "top_p", "max_tokens", "stop", "seed", "top_k", "min_p"}
TOP_KEYS = {
    "name",
    "system_prompt",
    "system_prompt_type",
    "max_context_tokens",
    "max_turns",
    "tool_timeout_s",
    "tool_call_mode",
    "llm_config",
    "tools",
}


class AgentConfigError(ValueError, NexrlError):
    """The agent config is wrong; ``problems`` lists each mistake with its field."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path, self.problems = path, problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{path}: agent config has {len(problems)} problem(s):\n{lines}")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]

    def openai(self) -> dict[str, Any]:
        """The tool as sent in an OpenAI ``tools`` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class AgentConfig:
    name: str
    system_prompt: str
    max_context_tokens: int
    max_turns: int
    tool_timeout_s: float
    llm_config: dict[str, Any]
    tools: tuple[ToolSpec, ...] = field(default_factory=tuple)

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


def _int(raw: dict[str, Any], key: str, default: int, problems: list[str]) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{key}: must be a positive integer, got {value!r}")
        return default
    return value


def _system_prompt(raw: dict[str, Any], base: Path, problems: list[str]) -> str:
    value = raw.get("system_prompt", "")
    kind = raw.get("system_prompt_type", "string")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "\n".join(value)
    if not isinstance(value, str):
        problems.append("system_prompt: must be a string or a list of strings")
        return ""
    if kind == "file":
        path = base / value
        if not path.is_file():
            problems.append(f"system_prompt: file {path} not found (system_prompt_type: file)")
            return ""
        return path.read_text()
    if kind != "string":
        problems.append(f"system_prompt_type: {kind!r} is not 'string' or 'file'")
    return value


def _tools(raw: Any, base: Path, problems: list[str]) -> tuple[ToolSpec, ...]:
    from nexrl.core.config.errors import RecipeError
    from nexrl.core.plugins import load_object

    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append("tools: must be a list of tool entries")
        return ()
    out: list[ToolSpec] = []
    for i, entry in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a mapping with name, description, binding")
            continue
        name = entry.get("name")
        where = f"tools[{i}] ({name})" if name else where
        unknown = set(entry) - {"name", "description", "binding", "parameters"}
        if unknown:
            problems.append(f"{where}: unknown key(s) {sorted(unknown)}")
        if not isinstance(name, str) or not name.isidentifier():
            problems.append(f"{where}.name: must be an identifier, got {name!r}")
            continue
        params = entry.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type") != "object":
            problems.append(f"{where}.parameters: must be a JSON schema with type: object")
            continue
        binding = entry.get("binding")
        module, sep, func = str(binding or "").partition(":")
        if not sep or not module or not func.isidentifier():
            problems.append(
                f"{where}.binding: {binding!r} is not 'module:function' (a .py file in {base})"
            )
            continue
        try:
            fn = load_object(f"{module.replace('.', '/')}.py", func, [base], f"{where}.binding")
        except RecipeError as exc:
            problems.extend(exc.problems)
            continue
        if not callable(fn):
            problems.append(f"{where}.binding: {binding} is not callable")
            continue
        if any(t.name == name for t in out):
            problems.append(f"{where}.name: tool {name!r} is defined twice")
            continue
        out.append(ToolSpec(name, str(entry.get("description", "")), dict(params), fn))
    return tuple(out)


def load_agent_config(path: str | Path) -> AgentConfig:
    """Read and check ``agent_config.yaml`` (raises ``AgentConfigError`` listing problems)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise AgentConfigError(path, ["file not found (rollout_worker.agent_config_path)"])
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise AgentConfigError(path, [f"not valid YAML: {exc}"]) from None
    if not isinstance(raw, dict):
        raise AgentConfigError(path, ["must be a mapping of settings"])
    problems: list[str] = []
    unknown = set(raw) - TOP_KEYS
    if unknown:
        problems.append(f"unknown key(s) {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    if raw.get("tool_call_mode", "openai") != "openai":
        problems.append(f"tool_call_mode: {raw['tool_call_mode']!r}; only 'openai' is supported")
    llm = raw.get("llm_config", {}) or {}
    if not isinstance(llm, dict):
        problems.append("llm_config: must be a mapping of sampling settings")
        llm = {}
    bad = set(llm) - SAMPLING_KEYS
    if bad:
        problems.append(f"llm_config: unknown key(s) {sorted(bad)}; known: {sorted(SAMPLING_KEYS)}")
    timeout = raw.get("tool_timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        problems.append(f"tool_timeout_s: must be a positive number, got {timeout!r}")
        timeout = 10.0
    config = AgentConfig(
        name=str(raw.get("name", path.stem)),
        system_prompt=_system_prompt(raw, path.parent, problems),
        max_context_tokens=_int(raw, "max_context_tokens", 4096, problems),
        max_turns=_int(raw, "max_turns", 8, problems),
        tool_timeout_s=float(timeout),
        llm_config=dict(llm),
        tools=_tools(raw.get("tools"), path.parent.resolve(), problems),
    )
    if problems:
        raise AgentConfigError(path, problems)
    return config
