"""``NexrlShmEngine``: vLLM's worker takes the trainer's weights from memory.

The trainer's rank 0 keeps its weights in a weight channel: one flat buffer in a
file under ``/dev/shm`` (nexrl's ``core/weights/handoff``). Its descriptor says
where each tensor lies: ``{"id", "transport": "shm", "nbytes", "version",
"layout": [[name, byte offset, shape, dtype name], ...], "path"}``. The first 8
bytes hold the version the buffer holds (-1 while the trainer writes it).

The update (vLLM's RL routes, driven by nexrl's reload adapter):

* ``/start_weight_update``: nothing yet;
* ``/update_weights`` ``{"update_info": {"channel": descriptor, "version": N}}``:
  the buffer is mapped (once per channel) and its stamp must be N, else the update
  is refused with the served model untouched; then vLLM's layerwise reload is set
  up (as its ``ipc`` engine does: weights arrive in checkpoint format, names as in
  a snapshot), the tensors go through ``model.load_weights`` (a copy), and the
  stamp must still be N after (else the trainer wrote over it meanwhile: refused,
  and nexrl reloads the snapshot from disk);
* ``/finish_weight_update``: the layerwise reload is finalized.

No dependency beyond vLLM and torch: this file runs in vLLM's venv.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

SHM_DIR = "/dev/shm"
SHM_PREFIX = "nexrl-weights-"  # nexrl.core.weights.handoff.transport.SHM_PREFIX


@dataclass
class NexrlInitInfo(WeightTransferInitInfo):
    """Nothing to rendezvous: the buffer is named by each update."""

    client: str = "nexrl"


@dataclass
class NexrlUpdateInfo(WeightTransferUpdateInfo):
    channel: dict[str, Any] = field(default_factory=dict)
    version: int = -1


def _stamp(buffer: torch.Tensor) -> int:
    return int(buffer[:8].view(torch.int64).item())


class NexrlShmEngine(WeightTransferEngine[NexrlInitInfo, NexrlUpdateInfo]):
    """Weights from a nexrl weight channel in shared memory (module doc)."""

    init_info_cls = NexrlInitInfo
    update_info_cls = NexrlUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mapped: dict[str, torch.Tensor] = {}  # channel id -> its buffer
        self._reloading = False  # a layerwise reload is set up (finish finalizes it)
        self._shapes: dict[str, tuple[int, ...]] | None = None  # the checkpoint's

    def init_transfer_engine(self, init_info: NexrlInitInfo) -> None:
        if init_info.client != "nexrl":
            raise ValueError(f"nexrl_shm: unknown client {init_info.client!r}")

    def start_weight_update(self) -> None:
        # the layerwise reload starts with the first tensor (receive_weights): a
        # refused update (a stale buffer) never touches the served model
        self._reloading = False

    def finish_weight_update(self) -> None:
        if self._reloading:
            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            finalize_layerwise_reload(self.model, self.model_config)
        self._reloading = False

    def _buffer(self, channel: dict[str, Any]) -> torch.Tensor:
        cid = str(channel.get("id"))
        if cid in self._mapped:
            return self._mapped[cid]
        if channel.get("transport") != "shm":
            raise ValueError(f"nexrl_shm: transport {channel.get('transport')!r}, not shm")
        path = str(channel.get("path", ""))
        if os.path.dirname(path) != SHM_DIR or not os.path.basename(path).startswith(SHM_PREFIX):
            raise ValueError(f"nexrl_shm: {path!r} is not a nexrl weight buffer under {SHM_DIR}")
        nbytes = int(channel["nbytes"])
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            raise ValueError(f"nexrl_shm: cannot open {path} ({exc}): another host?") from None
        if size < nbytes:
            raise ValueError(f"nexrl_shm: {path} holds {size} bytes, the layout needs {nbytes}")
        for old in list(self._mapped):  # one channel at a time: a new one replaces it
            del self._mapped[old]
        buffer = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
        self._mapped[cid] = buffer
        return buffer

    def receive_weights(self, update_info: NexrlUpdateInfo) -> None:
        channel, version = update_info.channel, int(update_info.version)
        buffer = self._buffer(channel)
        if _stamp(buffer) != version:
            raise ValueError(f"nexrl_shm: the buffer holds version {_stamp(buffer)}, not {version}")
        weights = []
        for name, offset, shape, dtype_name in channel["layout"]:
            dtype = getattr(torch, str(dtype_name))
            n = 1
            for d in shape:
                n *= int(d)
            nbytes = n * torch.empty((), dtype=dtype).element_size()
            view = buffer[int(offset) : int(offset) + nbytes].view(dtype).view(tuple(shape))
            weights.append((str(name), view))
        self._check_against_checkpoint(weights)
        from vllm.model_executor.model_loader.mtp_validation import (
            disable_mtp_completeness_check,
        )
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if not self._reloading:
            initialize_layerwise_reload(self.model)
            self._reloading = True
        with disable_mtp_completeness_check():
            self.model.load_weights(weights)
        if _stamp(buffer) != version:
            raise ValueError(
                f"nexrl_shm: the trainer wrote version {_stamp(buffer)} over {version} "
                "during the copy"
            )

    def _checkpoint_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name -> shape of the tensors in the served model's folder (its safetensors
        headers, read once); empty when the model is not a local folder."""
        if self._shapes is None:
            from safetensors import safe_open

            self._shapes = {}
            folder = str(self.model_config.model)
            if os.path.isdir(folder):
                for file in sorted(os.listdir(folder)):
                    if file.endswith(".safetensors"):
                        with safe_open(os.path.join(folder, file), framework="pt") as f:
                            for key in f.keys():  # noqa: SIM118 - safe_open is no dict
                                shape = f.get_slice(key).get_shape()
                                self._shapes[key] = tuple(int(d) for d in shape)
        return self._shapes

    def _check_against_checkpoint(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Names and shapes the served checkpoint has (dtypes may differ: vLLM casts);
        a mismatch is refused before the model is touched (vLLM's own load would leave
        it half-loaded)."""
        expected = self._checkpoint_shapes()
        if not expected:
            return
        unknown = [n for n, _ in weights if n not in expected]
        shapes = [
            f"{n}: {tuple(t.shape)} != {expected[n]}"
            for n, t in weights
            if n in expected and tuple(t.shape) != expected[n]
        ]
        if unknown or shapes:
            raise ValueError(
                f"nexrl_shm: the update does not fit the served model "
                f"({self.model_config.model}): unknown tensors {unknown[:3]}, "
                f"shape mismatches {shapes[:3]}"
            )

    def shutdown(self) -> None:
        self._mapped.clear()
