"""The serving core: a dynamic batcher over one model, and atomic weight reload.

Requests are queued; one worker task takes the first waiting request, gathers
more for ``batch_window_s`` (or until ``max_batch_size`` rows), and generates
them all in one padded forward loop on a worker thread. Requests that arrive
while a batch runs wait in the queue and form the next batch.

Reload loads the new snapshot fully on a thread, off to the side, validates
it, then swaps the served ``LoadedModel`` reference on the event loop. A batch
reads that reference once when it starts, so every batch (hence every
request) runs on exactly one set of weights and reports that version; a
request sent after a reload returned is served by the new weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import Any

import torch

from backends.inference.embedded.generation import (
    LogprobsMode,
    SamplingParams,
    SequenceOutput,
    generate,
)
from backends.inference.embedded.protocol import OpenAIError
from backends.inference.embedded.weights import (
    LoadedModel,
    SnapshotError,
    is_adapter_snapshot,
    load_adapter_snapshot,
    load_snapshot,
)

log = logging.getLogger(__name__)

Row = tuple[list[int], SamplingParams]


@dataclass
class _Pending:
    rows: list[Row]
    future: asyncio.Future[tuple[list[SequenceOutput], int]] = field(repr=False)


@dataclass(frozen=True)
class BatchingConfig:
    max_batch_size: int = 16
    batch_window_s: float = 0.005


class InferenceService:
    """Owns the served model, the request queue and reloads. Use from one event loop."""

    def __init__(
        self,
        loaded: LoadedModel,
        tokenizer: Any,
        *,
        device: torch.device,
        dtype: torch.dtype,
        batching: BatchingConfig | None = None,
        logprobs_mode: LogprobsMode = "raw",
        base_model: Any | None = None,
    ) -> None:
        self._loaded = loaded
        # LoRA snapshots are merged into this (default: the model the server started with)
        self._base = base_model if base_model is not None else loaded.model
        self.tokenizer = tokenizer
        self.device, self.dtype = device, dtype
        self.batching = batching or BatchingConfig()
        self.logprobs_mode: LogprobsMode = logprobs_mode
        self.stop_token_ids = _stop_token_ids(loaded.model, tokenizer)
        self.pad_token_id = _pad_token_id(tokenizer)
        self.batches_run = 0
        self.requests_served = 0
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._reload_lock = asyncio.Lock()
        self._worker: asyncio.Task[None] | None = None

    # -- properties ---------------------------------------------------------
    @property
    def version(self) -> int:
        return self._loaded.version

    @property
    def model_path(self) -> str:
        return self._loaded.path

    @property
    def vocab_size(self) -> int:
        return int(self._loaded.model.config.vocab_size)

    @property
    def max_model_len(self) -> int:
        return int(getattr(self._loaded.model.config, "max_position_embeddings", 2048))

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    # -- generation ---------------------------------------------------------
    async def generate(self, rows: list[Row]) -> tuple[list[SequenceOutput], int]:
        """Queue ``rows`` (one request); resolve with outputs and the policy version."""
        if self._worker is None:
            raise OpenAIError(503, "server is not running", type="server_error")
        loop = asyncio.get_running_loop()
        pending = _Pending(rows, loop.create_future())
        await self._queue.put(pending)
        return await pending.future

    async def _gather(self) -> list[_Pending]:
        batch = [await self._queue.get()]
        size = len(batch[0].rows)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.batching.batch_window_s
        while size < self.batching.max_batch_size:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            batch.append(item)
            size += len(item.rows)
        return batch

    async def _run(self) -> None:
        while True:
            batch = await self._gather()
            loaded = self._loaded  # one consistent set of weights for the whole batch
            rows = [row for p in batch for row in p.rows]
            try:
                outputs = await asyncio.to_thread(
                    generate,
                    loaded.model,
                    self.tokenizer,
                    rows,
                    stop_token_ids=self.stop_token_ids,
                    pad_token_id=self.pad_token_id,
                    logprobs_mode=self.logprobs_mode,
                )
            except Exception as exc:
                log.exception("generation failed")
                err = OpenAIError(500, f"generation failed: {exc}", type="server_error")
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(err)
                continue
            self.batches_run += 1
            self.requests_served += len(batch)
            start = 0
            for p in batch:
                if not p.future.done():
                    p.future.set_result((outputs[start : start + len(p.rows)], loaded.version))
                start += len(p.rows)

    # -- reload ---------------------------------------------------------------
    async def reload(self, path: str, version: int) -> int:
        """Load ``path`` off to the side, validate, swap; returns the new version."""
        async with self._reload_lock:
            current = self._loaded
            if version < current.version:
                raise OpenAIError(
                    409,
                    f"version {version} is older than the served version {current.version}",
                    param="version",
                    code="stale_version",
                )
            try:
                if is_adapter_snapshot(path):
                    model = await asyncio.to_thread(
                        load_adapter_snapshot, path, base=self._base, device=self.device
                    )
                else:
                    model = await asyncio.to_thread(
                        load_snapshot,
                        path,
                        device=self.device,
                        dtype=self.dtype,
                        reference=current.model,
                    )
            except SnapshotError as exc:
                raise OpenAIError(400, str(exc), param="model_path", code="bad_snapshot") from None
            self._loaded = LoadedModel(model=model, version=version, path=str(path))
            log.info("serving %s as policy version %d", path, version)
            return version


def _stop_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list | tuple):
            ids.update(int(e) for e in eos)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    return frozenset(ids)


def _pad_token_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id or 0)


def new_seed() -> int:
    """Seed for a row whose request gave none (server RNG, seeded by ``--seed``)."""
    return random.getrandbits(63)
