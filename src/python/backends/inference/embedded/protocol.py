"""Request bodies of the embedded server and its OpenAI-style errors.

Unknown request fields are ignored (as vLLM does); fields that would change
the result but are not implemented (``stream``, ``echo``, penalties, forced
tool choice) are rejected with a 400 rather than silently ignored.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_N = 64
MAX_TOP_LOGPROBS = 20
POLICY_VERSION_HEADER = "X-Policy-Version"


class OpenAIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type,
            param,
            code,
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code if self.code is not None else self.status,
            }
        }


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code or "invalid_value")


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    return_token_ids: bool = True
    ignore_eos: bool = False  # vLLM extension: generate max_tokens whatever the model says
    # nexrl extension: one sampling seed per choice (len n), as if each choice were its
    # own request with that seed (a group's samples in one request, the same tokens)
    seeds: list[int] | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        items = [v] if isinstance(v, str) else (v or [])
        if len(items) > 16 or any(not s for s in items):
            raise ValueError("stop must be up to 16 non-empty strings")
        return v

    @model_validator(mode="after")
    def _unsupported(self) -> _Sampling:
        if self.stream:
            raise ValueError("stream=true is not supported by the embedded server")
        if self.frequency_penalty or self.presence_penalty:
            raise ValueError("frequency_penalty/presence_penalty are not supported")
        if self.seeds is not None and len(self.seeds) != self.n:
            raise ValueError(
                f"seeds must hold one seed per choice (n={self.n}), got {len(self.seeds)}"
            )
        return self

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(_Sampling):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _checks(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs=true")
        if self.tool_choice not in (None, "auto", "none"):
            raise ValueError('only tool_choice "auto" and "none" are supported')
        for i, msg in enumerate(self.messages):
            if msg.get("role") not in ("system", "user", "assistant", "tool"):
                raise ValueError(f"messages[{i}].role must be system, user, assistant or tool")
        for i, tool in enumerate(self.tools or []):
            fn = tool.get("function")
            if tool.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError(
                    f"tools[{i}] must be {{'type': 'function', 'function': {{'name'}}}}"
                )
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False

    @model_validator(mode="after")
    def _checks(self) -> CompletionRequest:
        if self.echo:
            raise ValueError("echo=true is not supported by the embedded server")
        p = self.prompt
        if (isinstance(p, str) and not p) or (isinstance(p, list) and not p):
            raise ValueError("prompt must not be empty")
        if isinstance(p, list) and any(isinstance(x, list | str) and not x for x in p):
            raise ValueError("prompt must not contain empty prompts")
        return self


class UpdateWeightsRequest(BaseModel):
    """SGLang-style reload: ``{"model_path": dir, "version": int}``.

    ``weight_version`` (SGLang's name, a string holding an int) is accepted as
    an alias; without either the version advances by one.
    """

    model_config = ConfigDict(extra="ignore")

    model_path: str = Field(min_length=1)
    version: int | None = Field(default=None, ge=0)
    weight_version: str | int | None = None

    def target_version(self, current: int) -> int:
        if self.version is not None:
            return self.version
        if self.weight_version is not None:
            try:
                return int(self.weight_version)
            except ValueError:
                raise invalid("weight_version must be an integer", "weight_version") from None
        return current + 1
