"""FastAPI application: OpenAI routes, health, models and weight reload.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /v1/models``, ``GET /health``, ``POST /update_weights_from_disk``,
``POST /update_weights_from_channel`` and ``GET /weight_channel`` (the weight
handoff in memory: ``channel.py``), and an
extension of the embedded server (not of the vLLM stand-in: vLLM has no such
route), ``POST /v1/chat/completions/batch``: ``{"requests": [chat request, ...]}``
answered ``{"responses": [{"status": 200, "body": chat reply} | {"status": 4xx/5xx,
"error": {...}}, ...]}`` in request order. Its requests join one generation batch,
and each is validated and answered on its own, as if sent alone (one bad request
fails alone); ``InferenceClient`` sends the chat calls a rollout task makes at
once this way (``rollout_worker.batch_requests``).
Generation and reload responses carry the policy version in the body
(``policy_version``) and in the ``X-Policy-Version`` header. Every error is
``{"error": {"message", "type", "param", "code"}}`` with a 4xx/5xx status.

``api="vllm"`` (``--api vllm``) makes the server a stand-in for vLLM in tests,
where vLLM cannot run: replies carry no policy version (as vLLM's), and the
weights reload through the routes ``VLLMReloadAdapter`` drives
(``POST /collective_rpc`` ``reload_weights`` with ``kwargs.weights_path``,
``POST /reset_prefix_cache``, the label routes ``POST /update_weight_version`` and
``GET /weight_info``, as vLLM 0.32 has them); each reload serves the next version. With
``max_lora_rank`` (``--enable-lora --max-lora-rank R``) it also loads LoRA snapshots
as vLLM does, ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path",
"load_inplace"}``: 400 for a name already loaded without ``load_inplace``, for an
adapter of a rank above R or with ``modules_to_save`` (as vLLM refuses them), and
without ``--enable-lora``. Unlike vLLM, which serves the base model and each adapter side by
side, the stand-in serves one set of weights: once an adapter is loaded, requests
must name it, and the base name gets 404 (a rollout asking for the wrong model
fails loudly instead of silently sampling the base).

``token``: every request (``/health`` too) must send ``Authorization: Bearer
<token>`` or gets 401 (``nexrl.core.util.auth``). ``snapshot_root``: a reload
accepts only a directory under it (after resolving ``..`` and symlinks),
anything else gets 403 and the served weights stay as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from backends.inference.embedded.channel import add_channel_routes
from backends.inference.embedded.openai_api import chat_completion, completion
from backends.inference.embedded.protocol import (
    POLICY_VERSION_HEADER,
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    UpdateWeightsRequest,
)
from backends.inference.embedded.service import InferenceService
from nexrl.core.util.adapters import ADAPTER_CONFIG, is_adapter_snapshot
from nexrl.core.util.auth import BearerAuth, bearer_key, same_token

log = logging.getLogger(__name__)
MAX_BATCH_REQUESTS = 1024


class ChatBatchRequest(BaseModel):
    """``POST /v1/chat/completions/batch``: chat requests answered together."""

    requests: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_BATCH_REQUESTS)


def _versioned(body: dict[str, Any], version: int, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={POLICY_VERSION_HEADER: str(version)})


def _unversioned(body: dict[str, Any], _version: int, status: int = 200) -> JSONResponse:
    body.pop("policy_version", None)
    return JSONResponse(body, status_code=status)


def _validation_error(exc: RequestValidationError) -> OpenAIError:
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    msg = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        return OpenAIError(400, f"request body is not valid JSON: {msg}", code="invalid_json")
    param = ".".join(loc) or None
    where = f"{param}: " if param else ""
    return OpenAIError(400, f"{where}{msg}", param=param, code="invalid_value")


def check_snapshot_path(model_path: str, root: str | Path | None) -> str:
    """``model_path`` resolved (``..``, symlinks; a relative path from the server's
    working directory) and checked to lie under ``root``; 403 ``OpenAIError`` otherwise.
    ``root=None``: any path (a server started without ``--snapshot-root``)."""
    if root is None:
        return model_path
    base = Path(root).resolve()
    path = Path(model_path).resolve()
    if path == base or not path.is_relative_to(base):
        raise OpenAIError(
            403,
            f"model_path {model_path!r} resolves to {str(path)!r}, outside the snapshot "
            f"root {str(base)!r} (the server's --snapshot-root): only snapshots published "
            "there can be loaded",
            param="model_path",
            code="outside_snapshot_root",
        )
    return str(path)


def create_app(
    service: InferenceService,
    served_model_name: str,
    api: str = "embedded",
    *,
    token: str | None = None,
    snapshot_root: str | Path | None = None,
    max_lora_rank: int | None = None,
) -> FastAPI:
    """The HTTP app around ``service``; its lifespan starts and stops the batcher.
    ``api="vllm"``: the vLLM stand-in; ``token``, ``snapshot_root``, ``max_lora_rank``: see
    the module doc."""
    reply = _unversioned if api == "vllm" else _versioned
    served = {"model": served_model_name}  # the vLLM stand-in renames it to an adapter
    counts = {"chat_batches": 0}  # batch requests answered (/health)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="nexrl embedded inference", lifespan=lifespan)
    created = int(time.time())
    if token:
        secret: str = token

        def allowed(headers: Any) -> bool:
            key = bearer_key(headers)
            return key is not None and same_token(key, secret)

        app.add_middleware(
            BearerAuth,
            allowed=allowed,
            hint="send Authorization: Bearer <service.inference_service.api_key> "
            "(OpenAI(api_key=...))",
        )

    @app.exception_handler(OpenAIError)
    async def _openai_error(_: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = _validation_error(exc)
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        err = OpenAIError(exc.status_code, str(exc.detail), type=kind)
        return JSONResponse(err.body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        err = OpenAIError(500, f"internal error: {exc!r}", type="server_error")
        return JSONResponse(err.body(), status_code=500)

    @app.get("/health")
    async def health() -> JSONResponse:
        body = {
            "status": "ok",
            "model": served["model"],
            "policy_version": service.version,
            "batches_run": service.batches_run,
            "requests_served": service.requests_served,
            "requests_joined": service.requests_joined,
            "chat_batches": counts["chat_batches"],
            "torch_threads": service.torch_threads(),
        }
        return _versioned(body, service.version)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": served["model"],
            "object": "model",
            "created": created,
            "owned_by": "nexrl",
            "root": service.model_path,
            "max_model_len": service.max_model_len,
            "policy_version": service.version,
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest) -> JSONResponse:
        body, version = await chat_completion(service, served["model"], req)
        return reply(body, version)

    if api == "embedded":

        @app.post("/v1/chat/completions/batch")
        async def chat_batch(req: ChatBatchRequest) -> JSONResponse:
            async def one(raw: dict[str, Any]) -> dict[str, Any]:
                try:
                    body, _ = await chat_completion(
                        service, served["model"], ChatCompletionRequest.model_validate(raw)
                    )
                    return {"status": 200, "body": body}
                except ValidationError as exc:
                    err = _validation_error(RequestValidationError(exc.errors()))
                except OpenAIError as exc:
                    err = exc
                except Exception as exc:  # (answered for this request alone, as _crash would)
                    log.exception("a batched chat request failed")
                    err = OpenAIError(500, f"internal error: {exc!r}", type="server_error")
                return {"status": err.status, **err.body()}

            counts["chat_batches"] += 1
            items = await asyncio.gather(*(one(r) for r in req.requests))
            return _versioned(
                {"object": "chat.completion.batch", "responses": list(items)}, service.version
            )

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> JSONResponse:
        body, version = await completion(service, served["model"], req)
        return reply(body, version)

    @app.post("/update_weights_from_disk")
    async def update_weights(req: UpdateWeightsRequest) -> JSONResponse:
        try:
            path = check_snapshot_path(req.model_path, snapshot_root)
            version = await service.reload(path, req.target_version(service.version))
        except OpenAIError as exc:
            body = {**exc.body(), "success": False, "message": exc.message}
            return _versioned(body, service.version, exc.status)
        body = {
            "success": True,
            "message": f"serving {req.model_path} as policy version {version}",
            "policy_version": version,
            "num_paused_requests": 0,
        }
        return _versioned(body, version)

    if api == "vllm":
        _vllm_routes(app, service, snapshot_root, served, max_lora_rank)
    else:  # weight.handoff in memory (channel.py)
        add_channel_routes(app, service)
    return app


def _vllm_routes(
    app: FastAPI,
    service: InferenceService,
    root: str | Path | None,
    served: dict[str, str],
    max_lora_rank: int | None,
) -> None:
    """vLLM's dev-mode reload routes and its LoRA loading route, as
    ``VLLMReloadAdapter`` calls them."""

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> PlainTextResponse:
        if max_lora_rank is None:
            raise OpenAIError(400, "LoRA is not enabled; start the server with --enable-lora")
        body = await request.json()
        name, path = str(body.get("lora_name") or ""), str(body.get("lora_path") or "")
        if not name or not path:
            raise OpenAIError(400, "lora_name and lora_path are required")
        if served["model"] == name and not body.get("load_inplace"):
            raise OpenAIError(400, f"The lora adapter '{name}' has already been loaded.")
        checked = check_snapshot_path(path, root)
        if not is_adapter_snapshot(checked):
            raise OpenAIError(400, f"{path} is not a LoRA adapter (no adapter_config.json)")
        config = json.loads((Path(checked) / ADAPTER_CONFIG).read_text())
        if config.get("modules_to_save"):
            raise OpenAIError(400, "vLLM only supports modules_to_save being None.")
        rank = int(config.get("r", 0))
        if rank > max_lora_rank:
            raise OpenAIError(
                400, f"LoRA rank {rank} is greater than max_lora_rank {max_lora_rank}."
            )
        await service.reload(checked, service.version + 1)
        served["model"] = name
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> JSONResponse:
        body = await request.json()
        method = body.get("method")
        if method != "reload_weights":
            raise OpenAIError(400, f"unsupported collective_rpc method {method!r}")
        path = (body.get("kwargs") or {}).get("weights_path")
        if not path:
            raise OpenAIError(400, "reload_weights needs kwargs.weights_path")
        await service.reload(check_snapshot_path(str(path), root), service.version + 1)
        return JSONResponse({"results": [None]})

    label = {"weight_version": "default"}

    @app.post("/update_weight_version")
    async def update_weight_version(request: Request) -> JSONResponse:
        label["weight_version"] = str((await request.json())["new_version"])
        return JSONResponse({"success": True, "new_version": label["weight_version"]})

    @app.get("/weight_info")
    async def weight_info() -> JSONResponse:
        return JSONResponse(dict(label))

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> JSONResponse:
        return JSONResponse({})
