"""``python -m nexrl.rollout.agent_service --pool DIR --upstream URL [--port N]``: run the service.

Tokens come from the environment (never flags, which ``ps`` shows):
``NEXRL_AGENT_SERVICE_TOKEN`` is this service's bearer token (required with a
``--host`` beyond loopback), ``NEXRL_INFERENCE_TOKEN`` the inference service's
(sent upstream).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from nexrl.core.util.auth import AGENT_SERVICE_TOKEN_ENV, INFERENCE_TOKEN_ENV, token_of
from nexrl.core.util.net import SERVER_KEEP_ALIVE_S
from nexrl.rollout.agent_service.config import ServiceConfig
from nexrl.rollout.agent_service.sessions import SessionLimits

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> tuple[ServiceConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(
        prog="python -m nexrl.rollout.agent_service",
        description="OpenAI-compatible proxy that records an unmodified agent's model calls "
        "and turns rewarded sessions into trajectories in a NexRL pool.",
    )
    p.add_argument("--pool", required=True, help="trajectory pool: a folder or fsspec URL")
    p.add_argument(
        "--upstream",
        required=True,
        help="inference service base URL(s), comma-separated (http://host:port[/v1])",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--model", default=None, help="replace every request's model name by this")
    p.add_argument("--upstream-timeout", type=float, default=300.0, help="seconds per call")
    p.add_argument("--upstream-retries", type=int, default=2, help="retries of refused connections")
    p.add_argument(
        "--session-ttl", type=float, default=3600.0, help="idle seconds before a session is dropped"
    )
    p.add_argument("--max-sessions", type=int, default=4096)
    p.add_argument("--max-calls-per-session", type=int, default=256)
    p.add_argument("--max-tokens-per-session", type=int, default=1_000_000)
    p.add_argument("--fsync", action="store_true", help="fsync pool commits (survive power loss)")
    args = p.parse_args(argv)
    try:
        limits = SessionLimits(
            ttl_s=args.session_ttl,
            max_sessions=args.max_sessions,
            max_calls=args.max_calls_per_session,
            max_tokens=args.max_tokens_per_session,
        )
    except ValueError as exc:
        p.error(str(exc))
    config = ServiceConfig(
        upstream=args.upstream,
        pool=args.pool,
        model=args.model,
        upstream_timeout_s=args.upstream_timeout,
        upstream_max_retries=args.upstream_retries,
        fsync=args.fsync,
        limits=limits,
        token=token_of(os.environ.get(AGENT_SERVICE_TOKEN_ENV)),
        upstream_api_key=token_of(os.environ.get(INFERENCE_TOKEN_ENV)),
    )
    return config, args


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    from nexrl.core.chat.balance import normalize_base_urls
    from nexrl.rollout.agent_service.app import create_app
    from nexrl.rollout.agent_service.server import refusal

    config, args = parse_args(argv)
    why = refusal(args.host, config.token)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        normalize_base_urls(config.upstream)
    except ValueError as exc:
        print(f"--upstream: {exc}", file=sys.stderr)
        return 2
    print(
        f"nexrl agent service on http://{args.host}:{args.port}/v1 -> {config.upstream}, "
        f"pool {config.pool}",
        flush=True,
    )
    uvicorn.run(
        create_app(config),
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_keep_alive=SERVER_KEEP_ALIVE_S,
    )
    return 0
