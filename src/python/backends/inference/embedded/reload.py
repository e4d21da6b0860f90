"""Atomic weight reload for the serving core: load off to the side, check, swap.

Reload loads the new snapshot fully on a thread, off to the side, validates
it, then swaps the served ``LoadedModel`` reference on the event loop. "Off to the
side" is a copy of the served model, or, for a model under 1 GiB, the model the
previous reload replaced (kept as a spare) when no batch runs on it any more: a
reload then copies the tensors in instead of copying the whole model. A batch
reads that reference once when it starts and takes in new requests only while
it is still the served one, so every batch (hence every request) runs on
exactly one set of weights and reports that version; a request sent after a
reload returned is served by the new weights (it waits for the old batch to
finish and starts the next).

``InferenceService`` (service.py) takes these methods from ``ReloadMixin``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from backends.inference.embedded.protocol import OpenAIError
from backends.inference.embedded.weights import (
    LoadedModel,
    SnapshotError,
    is_adapter_snapshot,
    load_adapter_snapshot,
    load_snapshot,
)

__all__ = ["ReloadMixin"]

log = logging.getLogger("backends.inference.embedded.service")  # the service's log lines


class ReloadMixin:
    """Mixin of ``InferenceService``'s reloads (the attributes below are the service's)."""

    _loaded: LoadedModel
    _base: Any  # LoRA snapshots are merged into this
    _spare: LoadedModel | None
    _generating: LoadedModel | None
    _reload_lock: asyncio.Lock
    device: torch.device
    dtype: torch.dtype

    async def reload(self, path: str, version: int) -> int:
        """Load ``path`` off to the side, validate, swap; returns the new version."""
        async with self._reload_lock:
            current = self._loaded
            _not_older(version, current.version)
            start = time.perf_counter()
            try:
                if is_adapter_snapshot(path):
                    model = await asyncio.to_thread(
                        load_adapter_snapshot, path, base=self._base, device=self.device
                    )
                else:
                    spare = self._take_spare(current)
                    model = await asyncio.to_thread(
                        load_snapshot,
                        path,
                        device=self.device,
                        dtype=self.dtype,
                        reference=current.model,
                        spare=spare,
                    )
            except SnapshotError as exc:
                raise OpenAIError(400, str(exc), param="model_path", code="bad_snapshot") from None
            self._spare = current if _small(current.model) else None
            self._loaded = LoadedModel(model=model, version=version, path=str(path))
            log.info(
                "serving %s as policy version %d (loaded and checked in %.3f s)",
                path,
                version,
                time.perf_counter() - start,
            )
            return version

    async def reload_in_memory(
        self, load: Callable[[Any, Any | None], Any], version: int, source: str
    ) -> int:
        """``reload``'s rules for weights that come from memory (``channel.py``):
        ``load(served model, spare or None)`` runs on a thread and returns the new model
        (or raises ``SnapshotError``: 400, the served model untouched); then the swap."""
        async with self._reload_lock:
            current = self._loaded
            _not_older(version, current.version)
            start = time.perf_counter()
            spare = self._take_spare(current)
            try:
                model = await asyncio.to_thread(load, current.model, spare)
            except SnapshotError as exc:
                raise OpenAIError(400, str(exc), param="channel", code="bad_weights") from None
            self._spare = current if _small(current.model) else None
            self._loaded = LoadedModel(model=model, version=version, path=source)
            log.info(
                "serving %s as policy version %d (copied and checked in %.3f s)",
                source,
                version,
                time.perf_counter() - start,
            )
            return version

    def _take_spare(self, current: LoadedModel) -> Any | None:
        """The spare model for a reload to load into, if no batch runs on it and it is
        neither the served model nor the LoRA base; given up either way (a failed load
        may have left it half written)."""
        spare, self._spare = self._spare, None
        if spare is None or spare.model is getattr(self._generating, "model", None):
            return None
        if spare.model is current.model or spare.model is self._base:
            return None
        return spare.model


_SPARE_MAX_BYTES = 1 << 30


def _not_older(version: int, served: int) -> None:
    """A reload may not go back: 409 ``stale_version`` for a version under ``served``."""
    if version < served:
        raise OpenAIError(
            409,
            f"version {version} is older than the served version {served}",
            param="version",
            code="stale_version",
        )


def _small(model: Any) -> bool:
    """Weights under 1 GiB: a second copy may stay resident as the next reload's spare."""
    size = sum(t.numel() * t.element_size() for t in model.parameters())
    return bool(size <= _SPARE_MAX_BYTES)
