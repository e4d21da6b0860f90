"""A stand-in inference engine: a real OpenAI-compatible HTTP server with no model.

What it is for: measuring nexrl's control plane (scheduler, driver, Dask futures,
the zarr pool) with many rollout workers and many groups in flight, which a GPU
engine cannot serve on a 2-core machine. It is a stand-in, named so wherever it is
used: its answers are random tokens, never a model's.

It answers ``POST /v1/chat/completions`` as vLLM does when asked for token ids
(``return_token_ids``): ``prompt_token_ids`` at the top level, per choice
``token_ids`` and ``logprobs.content``, ``n`` choices, no policy version (a
replica given by ``service.inference_service.base_urls``: the controller's record
tags the versions). Each choice's text is one random digit (the default recipe's
evaluator then scores some right, some wrong), followed by ``response_tokens - 1``
filler tokens. ``GET /health`` and ``GET /v1/models`` answer as the engines do.

Latency, chosen and stated per run: every request waits ``latency_ms`` before its
reply (0: at once), or a draw from a log-normal distribution with that median and
``latency_sigma`` (the spread of a real engine's answer times); the ``n`` choices of
a request come together, as a GPU engine samples them in one batch. The wait is an
``asyncio.sleep``: the server holds any number of requests at once.

Start it with ``start_standin_engine`` (a subprocess through the embedded server's
handle, health-checked, dying with its parent) or ``python -m tests._standin_engine``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
import zlib
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

__all__ = ["Latency", "StandinSettings", "create_app", "main", "start_standin_engine"]

VOCAB = 32000  # token ids drawn below this (a 7B model's vocabulary size)
DIGIT_TOKEN = 15  # token id of "0" in the stand-in's made-up vocabulary; "9" is 24


@dataclass(frozen=True)
class Latency:
    """A request's answer time: ``median_ms`` fixed (``sigma`` 0) or log-normal."""

    median_ms: float = 0.0
    sigma: float = 0.0

    def draw(self, rng: random.Random) -> float:
        """Seconds to wait before answering one request."""
        if self.median_ms <= 0:
            return 0.0
        if self.sigma <= 0:
            return self.median_ms / 1000.0
        return rng.lognormvariate(0.0, self.sigma) * self.median_ms / 1000.0

    def describe(self) -> str:
        if self.median_ms <= 0:
            return "0 ms"
        if self.sigma <= 0:
            return f"{self.median_ms:g} ms fixed"
        return f"log-normal, median {self.median_ms:g} ms, sigma {self.sigma:g}"


@dataclass(frozen=True)
class StandinSettings:
    """What the stand-in answers: its served name, latency and answer length."""

    served_model_name: str
    latency: Latency = Latency()
    response_tokens: int = 1
    seed: int = 0


def _prompt_ids(messages: Any) -> list[int]:
    """Made-up prompt token ids: one per word of the messages' text (cheap, stable)."""
    words = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict)).split()
    return [zlib.crc32(w.encode()) % VOCAB for w in words] or [0]


def _choice(index: int, tokens: int, rng: random.Random) -> dict[str, Any]:
    digit = rng.randrange(10)
    ids = [DIGIT_TOKEN + digit] + [rng.randrange(VOCAB) for _ in range(tokens - 1)]
    entries = [{"token": f"t{t}", "logprob": -rng.random(), "top_logprobs": []} for t in ids]
    return {
        "index": index,
        "message": {"role": "assistant", "content": str(digit) + " ~" * (tokens - 1)},
        "finish_reason": "length",
        "token_ids": ids,
        "logprobs": {"content": entries},
    }


def create_app(settings: StandinSettings) -> FastAPI:
    """The stand-in's FastAPI app (see the module doc)."""
    app = FastAPI(title="nexrl stand-in engine (no model)")
    rng = random.Random(settings.seed)
    name = settings.served_model_name
    counts = {"requests": 0}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "standin": True, "requests": counts["requests"]}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "standin"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        counts["requests"] += 1
        if body.get("model") != name:
            message = (
                f"The model `{body.get('model')}` does not exist; this server serves `{name}`."
            )
            return JSONResponse({"error": {"message": message, "code": 404}}, status_code=404)
        n = int(body.get("n") or 1)
        tokens = min(
            int(body.get("max_tokens") or settings.response_tokens), settings.response_tokens
        )
        wait = settings.latency.draw(rng)
        if wait:
            await asyncio.sleep(wait)
        prompt = _prompt_ids(body.get("messages") or [])
        return JSONResponse(
            {
                "id": f"chatcmpl-standin-{counts['requests']}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": name,
                "prompt_token_ids": prompt,
                "choices": [_choice(i, tokens, rng) for i in range(n)],
                "usage": {
                    "prompt_tokens": len(prompt),
                    "completion_tokens": n * tokens,
                    "total_tokens": len(prompt) + n * tokens,
                },
            }
        )

    return app


def main(argv: list[str] | None = None) -> None:
    """``python -m tests._standin_engine --port P --served-model-name NAME [...]``."""
    import uvicorn

    p = argparse.ArgumentParser(description="stand-in OpenAI engine (no model) for nexrl tests")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--latency-ms", type=float, default=0.0, help="median answer time")
    p.add_argument("--latency-sigma", type=float, default=0.0, help="0: fixed; else log-normal")
    p.add_argument("--response-tokens", type=int, default=1, help="tokens per choice")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.response_tokens < 1:
        p.error(f"--response-tokens must be >= 1, got {a.response_tokens}")
    settings = StandinSettings(
        a.served_model_name, Latency(a.latency_ms, a.latency_sigma), a.response_tokens, a.seed
    )
    uvicorn.run(
        create_app(settings), host=a.host, port=a.port, log_level="warning", access_log=False
    )


def start_standin_engine(settings: StandinSettings, startup_timeout_s: float = 60.0) -> Any:
    """Start the stand-in in a subprocess (``EmbeddedServer``'s handle: a free port,
    healthy on return, killed with this process); stop it with ``.stop()``."""
    from backends.inference.embedded import EmbeddedServer

    command = (
        f"{sys.executable} -m tests._standin_engine --host {{host}} --port {{port}} "
        f"--served-model-name {{served_model_name}} --latency-ms {settings.latency.median_ms} "
        f"--latency-sigma {settings.latency.sigma} --response-tokens {settings.response_tokens} "
        f"--seed {settings.seed}"
    )
    server = EmbeddedServer(
        "standin",
        served_model_name=settings.served_model_name,
        command=command,
        startup_timeout_s=startup_timeout_s,
        env={"PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return server.start()


if __name__ == "__main__":
    main()
