"""Client side of inference, used by rollouts: OpenAI clients and token-level replies.

Rollouts talk to inference only through the OpenAI API (the embedded server,
vLLM or SGLang). ``InferenceClient`` asks for token ids and log-probs
(``return_token_ids``, ``logprobs``), spreads requests over replicas
round-robin, and turns every failure into ``InferenceError``:

* a dead server (connection refused/reset) fails after ``max_retries`` quick
  retries; a hung one fails when the call's ``timeout_s`` deadline passes,
  which covers all retries: a call never takes longer than ``timeout_s``;
* a 4xx/5xx reply carries the server's message and status;
* a malformed reply (not JSON, no choices, missing or inconsistent token
  ids/log-probs) is an ``InferenceError`` naming what is wrong.

Parsing the replies (``Generation``, ``parse_chat_completion``, ``parse_completion``)
is in ``nexrl.core.chat.replies``; they are importable from here too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from nexrl.core.chat.balance import RoundRobin, normalize_base_urls
from nexrl.core.chat.replies import (
    Generation,
    InferenceError,
    malformed,
    parse_chat_completion,
    parse_completion,
)

if TYPE_CHECKING:
    import openai


__all__ = [
    "ENGINE_EXTRA_PARAMS",
    "Generation",
    "InferenceClient",
    "InferenceError",
    "make_async_client",
    "make_client",
    "parse_chat_completion",
    "parse_completion",
]

POLICY_VERSION_HEADER = "x-policy-version"
MAX_RETRIES_LIMIT = 10
# Sampling fields of vLLM/SGLang (and the embedded server) that the OpenAI SDK
# does not know: sent in the request body via ``extra_body``.
ENGINE_EXTRA_PARAMS = frozenset(
    {
        "ignore_eos",
        "top_k",
        "min_p",
        "min_tokens",
        "repetition_penalty",
        "skip_special_tokens",
        "include_stop_str_in_output",
        "chat_template_kwargs",
        "seeds",  # embedded server: one seed per choice of an n request
    }
)


def _check_limits(timeout_s: float, max_retries: int) -> None:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if not 0 <= max_retries <= MAX_RETRIES_LIMIT:
        raise ValueError(f"max_retries must be in [0, {MAX_RETRIES_LIMIT}], got {max_retries}")


def _client_options(
    base_url: str, api_key: str, timeout_s: float, max_retries: int
) -> dict[str, Any]:
    """The OpenAI client's arguments: ``base_url`` as ``<root>/v1``, limits checked."""
    _check_limits(timeout_s, max_retries)
    root = normalize_base_urls(base_url)[0]
    return {
        "base_url": f"{root}/v1",
        "api_key": api_key,
        "timeout": timeout_s,
        "max_retries": max_retries,
    }


def make_async_client(
    base_url: str, *, api_key: str = "EMPTY", timeout_s: float = 60.0, max_retries: int = 2
) -> openai.AsyncOpenAI:
    """``AsyncOpenAI`` for ``base_url`` (with or without ``/v1``), bounded timeout/retries."""
    import openai  # (~1-2 s of CPU: a driver that checks a recipe need not pay it)

    return openai.AsyncOpenAI(**_client_options(base_url, api_key, timeout_s, max_retries))


def make_client(
    base_url: str, *, api_key: str = "EMPTY", timeout_s: float = 60.0, max_retries: int = 2
) -> openai.OpenAI:
    """Sync ``OpenAI`` client; worst case per call is ``(max_retries + 1) * timeout_s``."""
    import openai

    return openai.OpenAI(**_client_options(base_url, api_key, timeout_s, max_retries))


# -- client ------------------------------------------------------------------
_Queued = tuple[dict[str, Any], "asyncio.Future[list[Generation]]"]


def _root(client: Any) -> str:
    return str(client.base_url).rstrip("/").removesuffix("/v1")


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():  # (a caller that gave up has cancelled it)
        future.set_exception(exc)


async def _settle(future: asyncio.Future[Any], call: Any) -> None:
    """``future`` gets what awaiting ``call`` returns or raises."""
    try:
        result = await call
    except Exception as exc:
        _fail(future, exc)
        return
    if not future.done():
        future.set_result(result)


class InferenceClient:
    """Async OpenAI client over one or more replicas (round-robin per call).

    ``version_source``: for engines that do not report a policy version (vLLM,
    SGLang), a function returning the version the controller has loaded on every
    replica (None: unknown). It is read when a request *starts*; a request that
    straddles a reload is therefore tagged with the older version, the oldest
    weights that may have produced its tokens (staleness is never underestimated).
    ``version_ceiling`` (default: ``version_source``) is read when the reply
    arrives: the newest version that may have produced a token (during a weight
    sync, the version being loaded), the reply's ``policy_version_last``; a
    request with ``policy_version < policy_version_last`` straddled an update
    (a partial rollout: the engine went on with the new weights). A version the
    engine does report wins.

    ``batch_calls``: chat calls made before the event loop next runs its callbacks
    (a rollout task's groups, gathered) go to their replica in one request to the
    embedded server's ``/v1/chat/completions/batch``, each answered (or refused) as if
    sent alone; a replica without that route (vLLM, SGLang) gets them one by one from
    its first 404 on.
    """

    def __init__(
        self,
        base_urls: str | Sequence[str],
        model: str,
        *,
        api_key: str = "EMPTY",
        timeout_s: float = 60.0,
        max_retries: int = 2,
        require_token_ids: bool = True,
        version_source: Callable[[], int | None] | None = None,
        version_ceiling: Callable[[], int | None] | None = None,
        batch_calls: bool = False,
    ) -> None:
        _check_limits(timeout_s, max_retries)
        self.version_source = version_source
        self.version_ceiling = version_ceiling or version_source
        self.batch_calls = batch_calls
        self._queued: dict[int, list[_Queued]] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self._unbatched: set[int] = set()  # replicas that have no batch route
        self.model, self.timeout_s = model, timeout_s
        self.require_token_ids = require_token_ids
        self._clients = RoundRobin(
            [
                make_async_client(u, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries)
                for u in normalize_base_urls(base_urls)
            ]
        )

    @property
    def base_urls(self) -> list[str]:
        return [str(c.base_url).rstrip("/").removesuffix("/v1") for c in self._clients.items]

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        logprobs: bool = True,
        **params: Any,
    ) -> list[Generation]:
        """``/v1/chat/completions`` -> one ``Generation`` per choice.

        ``params`` are OpenAI sampling parameters (temperature, top_p,
        max_tokens, n, stop, seed, top_logprobs, ...); engine extensions such
        as ``ignore_eos`` or ``top_k`` go in the body too (``ENGINE_EXTRA_PARAMS``).
        """
        kwargs: dict[str, Any] = {"messages": messages, "logprobs": logprobs, **params}
        if tools:
            kwargs["tools"] = tools
        if self.batch_calls:
            return await self._queue_chat(kwargs)
        return await self._call(True, kwargs)

    async def complete(
        self, prompt: str | list[int], *, logprobs: int | None = 0, **params: Any
    ) -> list[Generation]:
        """``/v1/completions`` (text or token-id prompt) -> one ``Generation`` per choice."""
        return await self._call(False, {"prompt": prompt, "logprobs": logprobs, **params})

    async def _call(
        self, chat: bool, kwargs: dict[str, Any], client: Any = None
    ) -> list[Generation]:
        import openai  # (imported by the client already: a lookup)

        client = client if client is not None else self._clients.next()
        url = _root(client)
        kwargs = dict(kwargs)
        extra = {"return_token_ids": True, **kwargs.pop("extra_body", {})}
        extra.update({k: kwargs.pop(k) for k in list(kwargs) if k in ENGINE_EXTRA_PARAMS})
        api = client.chat.completions if chat else client.completions
        loaded = self.version_source() if self.version_source is not None else None
        try:
            async with asyncio.timeout(self.timeout_s):
                raw = await api.with_raw_response.create(
                    model=self.model, extra_body=extra, **kwargs
                )
                reply = raw.http_response.json()
        except (TimeoutError, openai.APIError, ValueError) as exc:
            raise self._failure(exc, url) from None
        header = raw.headers.get(POLICY_VERSION_HEADER)
        return self._generations(reply, header, chat, url, loaded)

    def _body(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A chat call's JSON body in a batch request, as the openai client would send
        it alone: the served model's name, the parameters, ``return_token_ids`` and
        ``extra_body`` merged in."""
        kwargs = dict(kwargs)
        extra = kwargs.pop("extra_body", {})
        return {"model": self.model, **kwargs, "return_token_ids": True, **extra}

    def _failure(self, exc: BaseException, url: str) -> InferenceError:
        """The ``InferenceError`` for a request to ``url`` that raised ``exc``."""
        import openai  # (imported by the client already: a lookup)

        if isinstance(exc, TimeoutError):
            return InferenceError(
                f"inference server {url} did not answer within {self.timeout_s:g}s", base_url=url
            )
        if isinstance(exc, openai.APITimeoutError):
            return InferenceError(
                f"inference server {url} timed out after {self.timeout_s:g}s", base_url=url
            )
        if isinstance(exc, openai.APIConnectionError):
            return InferenceError(f"cannot reach inference server {url}: {exc}", base_url=url)
        if isinstance(exc, openai.APIStatusError):
            detail = exc.body.get("message") if isinstance(exc.body, dict) else None
            return InferenceError(
                f"inference server {url} answered {exc.status_code}: {detail or exc.message}",
                base_url=url,
                status_code=exc.status_code,
            )
        return InferenceError(f"malformed inference reply from {url}: {exc}", base_url=url)

    def _generations(
        self, reply: Any, header: str | None, chat: bool, url: str, loaded: int | None
    ) -> list[Generation]:
        parse = parse_chat_completion if chat else parse_completion
        try:
            gens = parse(reply, header_version=header, require_token_ids=self.require_token_ids)
        except InferenceError as exc:
            exc.base_url = url
            raise
        if loaded is None:
            return gens
        ceiling = self.version_ceiling() if self.version_ceiling is not None else None
        last = loaded if ceiling is None else max(loaded, ceiling)
        return [
            g
            if g.policy_version is not None
            else replace(g, policy_version=loaded, policy_version_last=last)
            for g in gens
        ]

    # -- batched chat calls (the embedded server's /v1/chat/completions/batch) ----
    async def _queue_chat(self, kwargs: dict[str, Any]) -> list[Generation]:
        """Queue a chat call for its replica's next batch request: every call queued
        before the event loop next runs its callbacks goes in that one request."""
        client = self._clients.next()
        if id(client) in self._unbatched:
            return await self._call(True, kwargs, client)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Generation]] = loop.create_future()
        queue = self._queued.setdefault(id(client), [])
        if not queue:
            loop.call_soon(self._flush, client)
        queue.append((kwargs, future))
        return await future

    def _flush(self, client: Any) -> None:
        calls = self._queued.pop(id(client), [])
        task = asyncio.get_running_loop().create_task(self._send_queued(client, calls))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_queued(self, client: Any, calls: list[_Queued]) -> None:
        import openai  # (imported by the client already: a lookup)

        if len(calls) == 1 or id(client) in self._unbatched:
            await asyncio.gather(*(_settle(f, self._call(True, kw, client)) for kw, f in calls))
            return
        url = _root(client)
        loaded = self.version_source() if self.version_source is not None else None
        try:
            async with asyncio.timeout(self.timeout_s):
                raw = await client.post(
                    "/chat/completions/batch",
                    cast_to=httpx.Response,
                    body={"requests": [self._body(kw) for kw, _ in calls]},
                )
                reply = raw.json()
        except openai.NotFoundError:  # an engine without the route (vLLM, SGLang)
            self._unbatched.add(id(client))
            await self._send_queued(client, calls)
            return
        except (TimeoutError, openai.APIError, ValueError) as exc:
            for _, future in calls:
                _fail(future, self._failure(exc, url))
            return
        answers = reply.get("responses") if isinstance(reply, dict) else None
        if not isinstance(answers, list) or len(answers) != len(calls):
            err = malformed(
                f"a batch of {len(calls)} requests got no list of {len(calls)} responses"
            )
            err.base_url = url
            for _, future in calls:
                _fail(future, err)
            return
        header = raw.headers.get(POLICY_VERSION_HEADER)
        for (_, future), answer in zip(calls, answers, strict=True):
            try:
                gens = self._answer(answer, header, url, loaded)
            except InferenceError as exc:
                _fail(future, exc)
                continue
            if not future.done():
                future.set_result(gens)

    def _answer(
        self, answer: Any, header: str | None, url: str, loaded: int | None
    ) -> list[Generation]:
        """One request's answer in a batch reply, as ``_call`` would return or raise it."""
        if not isinstance(answer, dict):
            raise InferenceError(
                f"malformed inference reply: {answer!r} is not an object", base_url=url
            )
        status = answer.get("status")
        if status != 200:
            error = answer.get("error")
            detail = error.get("message") if isinstance(error, dict) else None
            raise InferenceError(
                f"inference server {url} answered {status}: {detail or 'no message'}",
                base_url=url,
                status_code=status if isinstance(status, int) else None,
            )
        return self._generations(answer.get("body"), header, True, url, loaded)

    async def aclose(self) -> None:
        for c in self._clients.items:
            await c.close()

    async def __aenter__(self) -> InferenceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
