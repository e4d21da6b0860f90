"""The serving core: a dynamic batcher over one model.

Continuous batching: requests wait in a queue; when nothing is generating, the
worker task takes the first, gathers more while they keep arriving within
``batch_window_s`` of each other (at most ``max_wait_s`` after the first, at
most ``max_batch_size`` rows) and starts a batch on a worker thread: a
``SlotBatch`` (fixed-shape steps on a preallocated KV cache, slot_decode.py) where
the model and the KV cache's budget allow, else a ``DecodeBatch`` (the model's own
forward). Requests that arrive while it runs join it between two decoding steps
(prefilled, then generated alongside the running rows) while it has room for
their rows; a request's response goes out the moment its last row finishes, and
finished rows leave the batch.

Reloads swap the served weights between batches (reload.py): every batch runs
on one set of weights and reports that version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from backends.inference.embedded.generation import DecodeBatch
from backends.inference.embedded.prompt_cache import prompt_cache_for
from backends.inference.embedded.protocol import OpenAIError
from backends.inference.embedded.reload import ReloadMixin
from backends.inference.embedded.sampling import LogprobsMode, SamplingParams, SequenceOutput
from backends.inference.embedded.slot_batch import SlotBatch
from backends.inference.embedded.slot_decode import SlotDecoder, unsupported
from backends.inference.embedded.weights import LoadedModel

log = logging.getLogger(__name__)

Row = tuple[list[int], SamplingParams]


@dataclass
class _Pending:
    rows: list[Row]
    future: asyncio.Future[tuple[list[SequenceOutput], int]] = field(repr=False)
    states: list[Any] = field(default_factory=list, repr=False)  # its rows in the batch

    def finished(self) -> bool:
        return bool(self.states) and all(st.retired for st in self.states)


@dataclass(frozen=True)
class BatchingConfig:
    max_batch_size: int = 16
    batch_window_s: float = 0.005  # gather while requests keep coming this close together
    max_wait_s: float = 0.05  # ... but never hold the first request longer than this
    continuous: bool = True  # requests join a running batch (False: it runs to the end first)
    decoder: str = "auto"  # slots | model | auto (slot_decode.py)
    cuda_graphs: bool = True  # slots on a GPU: replay each step as a CUDA graph
    kv_cache_gib: float = 0.0  # slots' KV cache budget (0: a quarter of free GPU memory / 2 GiB)


class InferenceService(ReloadMixin):
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
        self.prompt_cache = prompt_cache_for(tokenizer)  # openai_api.chat_prompt_ids
        self.device, self.dtype = device, dtype
        self.batching = batching or BatchingConfig()
        self.logprobs_mode: LogprobsMode = logprobs_mode
        self.stop_token_ids = _stop_token_ids(loaded.model, tokenizer)
        self.pad_token_id = _pad_token_id(tokenizer)
        self.batches_run = 0
        self.requests_served = 0
        self.requests_joined = 0  # requests that joined a batch already generating
        # the previous served model, kept for the next reload to load into while no batch
        # runs on it (small models only: it stays resident)
        self._spare: LoadedModel | None = None
        self._generating: LoadedModel | None = None  # the weights of the running batch
        self._waiting: deque[_Pending] = deque()
        self._arrived = asyncio.Event()  # a request was queued (for the event loop)
        self._more = threading.Event()  # ... (for the generating thread: stop and take it)
        self._halt = threading.Event()
        self._reload_lock = asyncio.Lock()
        self._worker: asyncio.Task[None] | None = None
        self._slots: SlotDecoder | None = None  # the slots' KV cache (decoder slots)
        self.decoder = self._pick_decoder(loaded.model)

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

    @staticmethod
    def torch_threads() -> int:
        """Torch's intra-op threads (``--torch-threads``; the generation thread uses as many)."""
        return torch.get_num_threads()

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> None:
        if self._worker is None:
            self._halt.clear()
            self._worker = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._halt.set()
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
        if not rows:  # (nothing to generate: it would never finish a batch)
            return [], self._loaded.version
        loop = asyncio.get_running_loop()
        pending = _Pending(rows, loop.create_future())
        self._waiting.append(pending)
        self._arrived.set()
        self._more.set()
        return await pending.future

    async def _gather(self) -> list[_Pending]:
        """A new batch's requests: the first waiting request, then every request that
        arrives within ``batch_window_s`` of the one before it (a sliding window: a
        burst of requests sent one after the other by several clients starts
        together), until ``max_batch_size`` rows or ``max_wait_s`` after the first."""
        while not self._waiting:
            self._arrived.clear()
            await self._arrived.wait()
        batch = [self._waiting.popleft()]
        size = len(batch[0].rows)
        loop = asyncio.get_running_loop()
        cfg = self.batching
        first = loop.time()
        deadline = first + min(cfg.batch_window_s, cfg.max_wait_s)
        while size < cfg.max_batch_size:
            if not self._waiting:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    break
                continue
            item = self._waiting.popleft()
            batch.append(item)
            size += len(item.rows)
            deadline = min(loop.time() + cfg.batch_window_s, first + cfg.max_wait_s)
        return batch

    def _pick_decoder(self, model: Any) -> str:
        """``slots`` or ``model`` (BatchingConfig.decoder; auto: slots where supported)."""
        choice = self.batching.decoder
        why = unsupported(model)
        if choice == "slots" and why:
            raise ValueError(f"--decoder slots cannot serve this model: {why}")
        if choice == "auto" and why:
            log.info("decoder: the model's own forward (slots cannot serve it: %s)", why)
        return "model" if choice == "model" or why else "slots"

    def _new_batch(self, model: Any, rows: list[Row]) -> DecodeBatch | SlotBatch:
        """A batch for ``rows`` on ``model``: on the slots when they serve it and the rows
        fit the KV cache's budget, else on the model's own forward."""
        kw: dict[str, Any] = {
            "stop_token_ids": self.stop_token_ids,
            "pad_token_id": self.pad_token_id,
            "logprobs_mode": self.logprobs_mode,
        }
        if self.decoder == "slots":
            if self._slots is None:
                self._slots = SlotDecoder(
                    model,
                    slots=self.batching.max_batch_size,
                    width=64,
                    graphs=self.batching.cuda_graphs,
                    budget_bytes=self._kv_budget(),
                )
            batch = SlotBatch(model, self.tokenizer, self._slots, **kw)
            if batch.fits(rows):
                return batch
            log.warning("a batch larger than the KV cache budget runs on the model's forward")
        return DecodeBatch(model, self.tokenizer, **kw)

    def _kv_budget(self) -> int:
        if self.batching.kv_cache_gib > 0:
            return int(self.batching.kv_cache_gib * (1 << 30))
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free // 4)
        return 2 << 30

    def _joiners(self, running: int, batch: Any = None) -> list[_Pending]:
        """Waiting requests (in arrival order) whose rows fit beside ``running`` rows
        (and in ``batch``'s KV cache, for a batch on slots)."""
        out: list[_Pending] = []
        room = self.batching.max_batch_size - running
        fits = getattr(batch, "fits", None)
        while self._waiting and len(self._waiting[0].rows) <= room:
            if fits is not None and not fits(
                [r for p in out for r in p.rows] + self._waiting[0].rows
            ):
                break
            item = self._waiting.popleft()
            room -= len(item.rows)
            out.append(item)
        return out

    def _advance(self, batch: DecodeBatch | SlotBatch, joiners: list[_Pending]) -> None:
        """On the worker thread: prefill ``joiners`` into ``batch``, then decode until
        the batch is empty, a request finished or another one arrived."""
        if joiners:
            rows = [row for p in joiners for row in p.rows]
            batch.add(rows)
            start = len(batch) - len(rows)
            for p in joiners:
                p.states = batch.rows[start : start + len(p.rows)]
                for st in p.states:
                    st.owner = p
                start += len(p.rows)
        done = batch.retire()
        while len(batch) and not self._more.is_set() and not self._halt.is_set():
            if any(st.owner.finished() for st in done):
                return
            batch.step()
            done = batch.retire()

    async def _run(self) -> None:
        batch: DecodeBatch | SlotBatch | None = None
        loaded = self._loaded
        active: list[_Pending] = []
        while True:
            if batch is None or not len(batch):
                joiners = await self._gather()
                loaded = self._loaded  # one consistent set of weights for the whole batch
                self._generating = loaded
                batch = self._new_batch(loaded.model, [r for p in joiners for r in p.rows])
                self.batches_run += 1
            elif self.batching.continuous and batch.joinable and self._loaded is loaded:
                joiners = self._joiners(len(batch), batch)
                self.requests_joined += len(joiners)
            else:
                joiners = []
            self._more.clear()
            active += joiners
            try:
                await asyncio.to_thread(self._advance, batch, joiners)
            except Exception as exc:
                log.exception("generation failed")
                err = OpenAIError(500, f"generation failed: {exc}", type="server_error")
                for p in active:
                    if not p.future.done():
                        p.future.set_exception(err)
                batch, active, self._generating = None, [], None
                continue
            if not len(batch):
                self._generating = None
            still = []
            for p in active:
                if not p.finished():
                    still.append(p)
                    continue
                self.requests_served += 1
                if not p.future.done():
                    p.future.set_result(([st.out for st in p.states], loaded.version))
            active = still


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
