"""One local replica started for the supervisor: the embedded server, or the user's
engine command (vLLM, SGLang) with the environment its reloads need. A start that
fails or runs past ``startup_timeout_s`` is one ``ServiceError`` line."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nexrl.core.config.sections.runtime import InferenceServiceConfig
from nexrl.core.errors import NexrlError
from nexrl.core.util.adapters import adapter_base_model, is_adapter_snapshot
from nexrl.core.util.logfile import DETAILS_LOGGER
from nexrl.inference.start_failure import log_since, start_failure

__all__ = ["ServiceError", "cpu_threads_args", "launch", "what_runs"]


class ServiceError(RuntimeError, NexrlError):
    """The inference service could not be started, reached or reloaded."""


def cpu_threads_args(configured: int) -> list[str]:
    """On a machine without CUDA the server gets ``configured`` threads, or by default
    the cores the trainer leaves it (``nexrl.core.util.cpu.cpu_threads``: half of them)."""
    import torch

    from nexrl.core.util.cpu import cpu_threads

    if torch.cuda.is_available():
        return []
    return ["--torch-threads", str(cpu_threads(1, configured))]


def what_runs(cfg: InferenceServiceConfig) -> str:
    """How the messages name the replica: the user's command or the embedded server."""
    return f"'{cfg.command}'" if cfg.command else "the embedded inference server"


def _command(cfg: InferenceServiceConfig, lora_name: str | None) -> dict[str, Any]:
    """The factory's ``command``/``env`` for the user's engine: its own flags only."""
    command: dict[str, Any] = {"command": cfg.command, "extra_args": []}
    env: dict[str, str] = {}
    if cfg.backend == "vllm":  # the /collective_rpc, /pause, /resume reloads use
        env["VLLM_SERVER_DEV_MODE"] = os.environ.get("VLLM_SERVER_DEV_MODE", "1")
    if lora_name:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if env:
        command["env"] = env
    return command


def launch(
    factory: Callable[..., Any],
    cfg: InferenceServiceConfig,
    model_path: str,
    *,
    embedded_args: list[str],
    token: str | None,
    snapshot_root: Path | None,
    log_dir: Path,
    lora_name: str | None,
) -> tuple[Any, bool]:
    """Start one replica on ``model_path``; ``(server handle, started on an adapter's
    base model)``. A user's engine that loads adapters by name starts on the adapter
    snapshot's base; the caller then loads the adapter. ``embedded_args``: the
    embedded server's flags (unused with ``cfg.command``)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    model = model_path
    on_base = bool(cfg.command and model) and is_adapter_snapshot(model)
    if cfg.command:
        command = _command(cfg, lora_name)
        if on_base:
            try:
                model = adapter_base_model(model)
            except ValueError as exc:
                raise ServiceError(f"cannot start on the adapter snapshot: {exc}") from None
    else:
        command = {"extra_args": embedded_args}
    log = log_dir / "inference.log"
    server = factory(
        model,
        host=cfg.host,
        api_key=token,
        snapshot_root=None if snapshot_root is None else str(snapshot_root.resolve()),
        served_model_name=cfg.served_model_name,
        startup_timeout_s=cfg.startup_timeout_s,
        log_path=log,
        **command,
    )
    what = what_runs(cfg)
    written = log.stat().st_size if log.exists() else 0  # earlier servers' lines
    try:
        server.start()
    except Exception as exc:
        if getattr(exc, "timed_out", False):  # still starting: slow, not broken
            lines = [line for line in log_since(log, written).splitlines() if line.strip()]
            last = lines[-1].strip() if lines else ""
            raise ServiceError(
                f"{what} was still starting after {cfg.startup_timeout_s:g}s "
                "(service.inference_service.startup_timeout_s): it was stopped; raise the "
                f"setting if the engine is only slow to start (log: {log}"
                + (f", last line: {last[:300]!r})" if last else ")")
            ) from exc
        # the log's tail for logs/driver.log; the terminal gets one line
        logging.getLogger(DETAILS_LOGGER).error("inference: %s did not start: %s", what, exc)
        raise ServiceError(
            f"{what} did not start: {start_failure(exc, log, written)} (log: {log})"
        ) from exc
    return server, on_base
