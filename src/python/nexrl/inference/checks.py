"""The inference service's checks (registered by importing this module)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from nexrl.core.config.checks import register_check

__all__ = ["inference_backend", "inference_command", "inference_token"]

FIELDS = ("model", "host", "port", "served_model_name")


@register_check
def inference_backend(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``service.inference_service.backend``: a registered reload adapter or a class."""
    from nexrl.inference.reload import RELOAD_ADAPTERS

    return RELOAD_ADAPTERS.problems(cfg.service.inference_service.backend, roots)


@register_check
def inference_command(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """``service.inference_service.command``: nexrl runs the replica, so no base_urls;
    only the fields nexrl fills in; a port to bind to."""
    svc = cfg.service.inference_service
    if not svc.command:
        return []
    field = "service.inference_service.command"
    if svc.base_urls:
        return [
            f"{field}: nexrl starts this server, so service.inference_service.base_urls must "
            "be empty (set one of the two: base_urls for servers you started yourself)"
        ]
    import string

    try:
        named = {f for _, f, _, _ in string.Formatter().parse(str(svc.command)) if f is not None}
    except ValueError as exc:
        return [f"{field}: {exc} (use {{model}}, {{host}}, {{port}}, {{served_model_name}})"]
    unknown = sorted(named - set(FIELDS))
    if unknown:
        return [
            f"{field}: unknown field(s) {', '.join('{' + u + '}' for u in unknown)}; "
            f"nexrl fills in {', '.join('{' + f + '}' for f in FIELDS)}"
        ]
    if "port" not in named:
        return [
            f"{field}: the command must take {{port}} (nexrl picks a free port and "
            "reaches the server there)"
        ]
    return []


@register_check
def inference_token(cfg: DictConfig, roots: list[Path]) -> list[str]:
    """A server nexrl starts beyond loopback (``service.inference_service.host``, or
    the inference job of a Slurm/Kubernetes run) needs a bearer token (``api_key``)."""
    from nexrl.core.util.auth import is_loopback, token_of

    svc = cfg.service.inference_service
    if svc.base_urls or token_of(str(svc.api_key)):
        return []
    kind = str(cfg.cluster.type)
    if kind in ("slurm", "kubernetes"):
        where = f"its node's address (cluster.type={kind}: the rollouts reach it from other nodes)"
    elif not is_loopback(str(svc.host)):
        where = f"service.inference_service.host={str(svc.host)!r}"
    else:
        return []
    return [
        f"service.inference_service.api_key: the inference server nexrl starts binds {where} "
        "and needs a bearer token; set api_key: ${oc.env:NEXRL_TOKEN} (the token from the "
        "environment) or bind 127.0.0.1"
    ]
