"""The training service's HTTP API (FastAPI), shaped like the Tinker training API.

=====================================  ================================================
``GET  /health``                       ``{"status": "ok"}``
``GET  /v1/info``                      counters, model, the accepted loss names
``POST /v1/forward_backward``          ``{loss, data, weight}``: loss + metrics; gradients
                                       accumulate (``nexrl.trainer.service.core``)
``POST /v1/optim_step``                apply them: ``{applied, global_step,
                                       policy_version, metrics}``
``POST /v1/save_weights_for_sampler``  publish snapshot ``vN``: ``{path, version}``
``POST /v1/save_state``                checkpoint: ``{path, global_step}``
``POST /v1/load_state``                ``{path}``: restore it
``POST /v1/train_step``                ``{batch}`` (a BatchRef) or ``{batch_path}``: the fused self-hosted step
                                       (``StepResult`` fields); the controller's mode
``GET  /v1/extra_state``               the state saved with the resumed checkpoint
=====================================  ================================================

Errors are JSON ``{"error": {"message", "field"}}`` with one line naming the
field: 400 for bad values (unknown loss, malformed data), 422 for a body of the
wrong shape, 409 for a call out of order (``optim_step`` before any
``forward_backward``), 401 for a missing bearer token when the service has one.
Handlers are plain functions: FastAPI runs them on its thread pool, and the
core's lock runs them one at a time.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from nexrl.core.util.auth import BearerAuth, bearer_key, same_token
from nexrl.trainer.service.core import TrainingCore, TrainingServiceError
from nexrl.trainer.service.wire import (
    ForwardBackwardRequest,
    LoadStateRequest,
    SaveStateRequest,
    TrainStepRequest,
    batch_from_data,
)

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def _error(status: int, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "field": field}}, status_code=status)


def _loc(loc: Any) -> str:
    out = ""
    for part in loc:
        if part == "body":
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def create_app(core: TrainingCore, token: str | None = None) -> FastAPI:
    """The API over ``core``; with ``token`` every request needs ``Bearer <token>``."""
    app = FastAPI(title="nexrl training service")
    app.state.core = core
    if token:
        app.add_middleware(
            BearerAuth,
            allowed=lambda headers: same_token(bearer_key(headers) or "", token),
            hint="send Authorization: Bearer <token> (the service's token)",
        )

    @app.exception_handler(TrainingServiceError)
    async def _service_error(_: Request, exc: TrainingServiceError) -> JSONResponse:
        return _error(exc.status, str(exc), exc.field)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid body"}
        where = _loc(first.get("loc", ()))
        return _error(422, f"{where}: {first.get('msg', 'invalid')}", where)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        log.exception("training service: internal error")
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    vocab = getattr(core.trainer.model_config, "vocab_size", None)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/info")
    def info() -> dict[str, Any]:
        return core.info()

    @app.post("/v1/forward_backward")
    def forward_backward(body: ForwardBackwardRequest) -> dict[str, Any]:
        batch = batch_from_data(body.data, vocab)
        return core.forward_backward(batch, body.loss, body.weight)

    @app.post("/v1/optim_step")
    def optim_step() -> dict[str, Any]:
        return core.optim_step()

    @app.post("/v1/save_weights_for_sampler")
    def save_weights_for_sampler() -> dict[str, Any]:
        return core.save_weights_for_sampler()

    @app.post("/v1/save_state")
    def save_state(body: SaveStateRequest) -> dict[str, Any]:
        return core.save_state(body.extra_state)

    @app.post("/v1/load_state")
    def load_state(body: LoadStateRequest) -> dict[str, Any]:
        return core.load_state(body.path)

    @app.post("/v1/train_step")
    def train_step(body: TrainStepRequest) -> dict[str, Any]:
        from nexrl.trainer.batch_io import BatchRef, load_batch

        field = "batch" if body.batch is not None else "batch_path"
        try:
            if body.batch is not None:
                batch = load_batch(BatchRef.from_json(body.batch))
            elif body.batch_path is not None:
                batch = load_batch(body.batch_path)
            else:
                raise ValueError("give the step's batch (a BatchRef's JSON) or a batch_path")
        except (ValueError, KeyError, TypeError) as exc:  # not a batch
            raise TrainingServiceError(f"{field}: {exc}", field=field) from None
        return asdict(core.step(batch))

    @app.get("/v1/extra_state")
    def extra_state() -> dict[str, Any]:
        return core.extra_state()

    return app
