"""A weight channel: the persistent buffer trainer rank 0 hands weights over in, and
the server's cached view of it.

Trainer (``WeightChannel``): allocated on the first ``write`` (sized by the tensors it
is given, the snapshot's), then every ``write`` copies the new tensors in (on the
device), waits for the copy, stamps the version and returns the *descriptor*: a
JSON-able dict ``{"id", "transport", "nbytes", "version", "layout", ...transport
fields}`` (``nexrl.core.weights.handoff.transport``). The server opens a descriptor once
per channel id (``open_channel``) and keeps the ``OpenedChannel``; later requests
only need the id and the version.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from nexrl.core.weights.handoff.layout import (
    Layout,
    LayoutError,
    layout_from_json,
    layout_to_json,
    pack,
    plan_layout,
    read_stamp,
    unpack,
    write_stamp,
)
from nexrl.core.weights.handoff.transport import (
    TRANSPORTS,
    TransportError,
    allocate,
    open_buffer,
    release,
)

__all__ = ["OpenedChannel", "WeightChannel", "open_channel"]

_TRANSPORT_FIELDS = ("id", "transport", "nbytes", "version", "layout")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class WeightChannel:
    """The trainer's side (module doc). ``transport``: ``shm`` or ``cuda_ipc``."""

    def __init__(self, transport: str, device: torch.device) -> None:
        if transport not in TRANSPORTS:
            raise TransportError(f"unknown handoff transport {transport!r}; choose {TRANSPORTS}")
        self.transport, self.device = transport, device
        self.id = uuid.uuid4().hex[:16]
        self.buffer: torch.Tensor | None = None
        self.layout: Layout = {}
        self.nbytes = 0
        self._info: dict[str, Any] = {}
        self.version: int | None = None

    def write(self, tensors: Mapping[str, torch.Tensor], version: int) -> dict[str, Any]:
        """Copy ``tensors`` in as ``version`` (back once the copy is done); the descriptor."""
        if self.buffer is None:
            self.layout, self.nbytes = plan_layout(tensors)
            device = self.device if self.transport == "cuda_ipc" else torch.device("cpu")
            self.buffer, self._info = allocate(self.transport, self.nbytes, device, self.id)
        write_stamp(self.buffer, -1)
        pack(tensors, self.buffer, self.layout)
        _sync(self.device)  # the copies (and the GPU's work behind them) are done
        write_stamp(self.buffer, version)
        _sync(self.device)
        self.version = version
        return self.descriptor()

    def descriptor(self) -> dict[str, Any]:
        if self.buffer is None or self.version is None:
            raise TransportError("the weight channel holds no weights yet")
        return {
            "id": self.id,
            "transport": self.transport,
            "nbytes": self.nbytes,
            "version": self.version,
            "layout": layout_to_json(self.layout),
            **self._info,
        }

    def views(self) -> dict[str, torch.Tensor]:
        """The buffer's tensors (views: valid until the next ``write``)."""
        if self.buffer is None:
            return {}
        return unpack(self.buffer, self.layout)

    def close(self) -> None:
        if self.buffer is not None:
            release(self.transport, self._info)
            self.buffer = None


@dataclass
class OpenedChannel:
    """The server's side of one channel: the buffer, its layout and views."""

    id: str
    transport: str
    buffer: torch.Tensor
    layout: Layout
    views: dict[str, torch.Tensor]

    def stamp(self) -> int:
        """The version the buffer holds now (-1 while the trainer writes it)."""
        return read_stamp(self.buffer)


def open_channel(descriptor: Mapping[str, Any]) -> OpenedChannel:
    """Map the buffer a descriptor names (``TransportError``/``LayoutError`` say why not)."""
    missing = [k for k in _TRANSPORT_FIELDS if k not in descriptor]
    if missing:
        raise LayoutError(f"channel descriptor lacks {missing}")
    layout = layout_from_json(descriptor["layout"])
    nbytes = int(descriptor["nbytes"])
    if any(s.offset + s.nbytes > nbytes for s in layout.values()):
        raise LayoutError(f"channel layout reaches past its {nbytes} bytes")
    transport = str(descriptor["transport"])
    buffer = open_buffer(transport, nbytes, dict(descriptor))
    return OpenedChannel(str(descriptor["id"]), transport, buffer, layout, unpack(buffer, layout))
