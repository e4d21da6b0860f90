"""The embedded server's side of the in-memory weight handoff (``weight.handoff``).

Routes (``add_channel_routes``; the embedded API only):

* ``GET /weight_channel``: ``{"host", "device_uuid", "transports"}``, what the
  controller compares with trainer rank 0's to choose the handoff;
* ``POST /update_weights_from_channel`` ``{"channel": descriptor, "version": N}``:
  copy version N from the trainer's buffer into the served model. The descriptor
  (``nexrl.core.weights.handoff.channel``) is sent in full once; the server maps the
  buffer then (``open_channel``) and keeps it, so later requests may send
  ``{"id": ...}`` alone (an unknown id gets 409 ``channel_unknown``: send it in full).

The copy follows the file reload's rules (``service.reload``): version N must not be
older than the served one (409); the tensors must be the served model's parameters
by name and shape (tied ones may be left out) and all finite (``all_finite``), else
400 and the served model is untouched; they are copied into the spare model (or a
copy of the served one), then the served reference is swapped. The buffer must
hold version N before and after the copy (its stamp): else 409 ``channel_moved``.
The reply comes after the copy, so the trainer may write the buffer again.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from backends.inference.embedded.protocol import POLICY_VERSION_HEADER, OpenAIError
from backends.inference.embedded.service import InferenceService
from backends.inference.embedded.weights import SnapshotError, all_finite
from nexrl.core.weights.handoff import (
    TRANSPORTS,
    LayoutError,
    OpenedChannel,
    TransportError,
    host_identity,
    open_channel,
)

__all__ = ["UpdateFromChannelRequest", "add_channel_routes", "copy_from_channel"]

log = logging.getLogger(__name__)


class UpdateFromChannelRequest(BaseModel):
    """``POST /update_weights_from_channel``."""

    model_config = ConfigDict(extra="ignore")

    channel: dict[str, Any]
    version: int = Field(ge=0)


def _check_names(opened: OpenedChannel, reference: Any) -> None:
    expected = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    tied = set(getattr(reference, "_tied_weights_keys", None) or ())
    if not getattr(reference.config, "tie_word_embeddings", False):
        tied = set()
    extra = sorted(set(opened.layout) - set(expected))
    missing = sorted(set(expected) - set(opened.layout) - tied)
    if extra or missing:
        raise SnapshotError(
            f"channel {opened.id}: tensors differ from the served model's "
            f"(unexpected {extra[:5]}, missing {missing[:5]})"
        )
    bad = [
        f"{k}: {s.shape} != {expected[k]}"
        for k, s in opened.layout.items()
        if s.shape != expected[k]
    ]
    if bad:
        raise SnapshotError(f"channel {opened.id}: shape mismatch: {bad[:5]}")


def _check_stamp(opened: OpenedChannel, version: int, when: str) -> None:
    stamp = opened.stamp()
    if stamp != version:
        raise OpenAIError(
            409,
            f"channel {opened.id} holds version {stamp} {when} the copy, not {version} "
            "(-1: being written)",
            param="version",
            code="channel_moved",
        )


@torch.no_grad()
def copy_from_channel(
    opened: OpenedChannel, version: int, *, reference: Any, spare: Any | None
) -> Any:
    """A model with the channel's tensors: ``spare`` when given (no batch uses it), else a
    copy of ``reference`` (the served model). Raises ``SnapshotError`` (module doc)."""
    _check_stamp(opened, version, "before")
    _check_names(opened, reference)
    if not all_finite(opened.views.values()):
        raise SnapshotError(f"channel {opened.id}: version {version} holds NaN or inf")
    model = spare if spare is not None and spare is not reference else copy.deepcopy(reference)
    params = model.state_dict()
    for name, src in opened.views.items():
        params[name].copy_(src, non_blocking=True)
    device = next(model.parameters()).device
    if device.type == "cuda" or opened.buffer.is_cuda:
        torch.cuda.synchronize(device if device.type == "cuda" else opened.buffer.device)
    _check_stamp(opened, version, "after")
    return model.eval()


def add_channel_routes(app: FastAPI, service: InferenceService) -> None:
    """The routes in the module doc, on ``app``; the server's open channels live here."""
    channels: dict[str, OpenedChannel] = {}

    def opened(desc: dict[str, Any]) -> OpenedChannel:
        cid = str(desc.get("id", ""))
        if cid in channels:
            return channels[cid]
        if "layout" not in desc:
            raise OpenAIError(
                409,
                f"channel {cid!r} is not open here: send its full descriptor",
                param="channel",
                code="channel_unknown",
            )
        try:
            ch = open_channel(desc)
        except (TransportError, LayoutError, ValueError, TypeError) as exc:
            raise OpenAIError(
                400, f"cannot open the weight channel: {exc}", param="channel", code="bad_channel"
            ) from None
        channels.clear()  # one trainer feeds a server: a new channel replaces the old one
        channels[cid] = ch
        log.info("weight channel %s (%s, %d bytes) opened", cid, ch.transport, ch.buffer.numel())
        return ch

    @app.get("/weight_channel")
    async def weight_channel() -> dict[str, Any]:
        return {**host_identity(service.device), "transports": list(TRANSPORTS)}

    @app.post("/update_weights_from_channel")
    async def update_from_channel(req: UpdateFromChannelRequest) -> JSONResponse:
        try:
            ch = opened(req.channel)
            version = await service.reload_in_memory(
                lambda ref, spare: copy_from_channel(ch, req.version, reference=ref, spare=spare),
                req.version,
                f"channel:{ch.transport}:{ch.id}",
            )
        except OpenAIError as exc:
            body = {**exc.body(), "success": False, "message": exc.message}
            return JSONResponse(
                body, exc.status, headers={POLICY_VERSION_HEADER: str(service.version)}
            )
        body = {
            "success": True,
            "message": f"serving channel {ch.id} as policy version {version}",
            "policy_version": version,
        }
        return JSONResponse(body, headers={POLICY_VERSION_HEADER: str(version)})
