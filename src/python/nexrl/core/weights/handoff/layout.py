"""Where each served tensor lies in a weight-handoff buffer: one flat byte buffer
holding every tensor a snapshot would hold, packed one after the other.

``plan_layout(tensors)`` gives ``{name: Slot(offset, shape, dtype)}`` and the bytes
the buffer needs; ``pack`` copies tensors into a buffer at their slots (a device-side
copy when both are on one device), ``unpack`` gives the buffer's views, one per name
(no copy). The first ``HEADER_BYTES`` hold the version the buffer holds
(``write_stamp``/``read_stamp``): a reader checks it before and after its copy, so
it never takes a buffer the writer was changing for another version.

A layout travels as JSON (``layout_to_json``/``layout_from_json``): names, byte
offsets, shapes, dtype names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from nexrl.core.errors import NexrlError

__all__ = [
    "ALIGN",
    "HEADER_BYTES",
    "LayoutError",
    "Slot",
    "layout_from_json",
    "layout_to_json",
    "pack",
    "plan_layout",
    "read_stamp",
    "unpack",
    "write_stamp",
]

# Every slot starts on a 256-byte boundary: any dtype's view is aligned, and copies
# into and out of it run at full width (CUDA allocations are 256-byte aligned too).
ALIGN = 256
HEADER_BYTES = ALIGN  # the stamp (an int64 version) and room to spare


class LayoutError(ValueError, NexrlError):
    """Tensors that do not fit a layout (names, shapes, dtypes), or a malformed one."""


@dataclass(frozen=True)
class Slot:
    """One tensor's place: byte ``offset`` into the buffer, ``shape``, ``dtype``."""

    offset: int
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * _itemsize(self.dtype)


Layout = dict[str, Slot]


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_layout(tensors: Mapping[str, torch.Tensor]) -> tuple[Layout, int]:
    """Slots for ``tensors`` in their order, and the buffer's size in bytes."""
    layout: Layout = {}
    offset = HEADER_BYTES
    for name, t in tensors.items():
        slot = Slot(offset, tuple(int(d) for d in t.shape), t.dtype)
        layout[name] = slot
        offset = _aligned(offset + slot.nbytes)
    return layout, offset


def _view(buffer: torch.Tensor, slot: Slot) -> torch.Tensor:
    raw = buffer[slot.offset : slot.offset + slot.nbytes]
    return raw.view(slot.dtype).view(slot.shape)


def unpack(buffer: torch.Tensor, layout: Layout) -> dict[str, torch.Tensor]:
    """Each name's view into ``buffer`` (a flat ``uint8`` tensor); no copy."""
    need = max((s.offset + s.nbytes for s in layout.values()), default=HEADER_BYTES)
    if buffer.dtype != torch.uint8 or buffer.dim() != 1 or buffer.numel() < need:
        raise LayoutError(
            f"buffer of {buffer.numel()} {buffer.dtype} elements cannot hold the layout "
            f"({need} bytes)"
        )
    return {name: _view(buffer, slot) for name, slot in layout.items()}


def pack(tensors: Mapping[str, torch.Tensor], buffer: torch.Tensor, layout: Layout) -> None:
    """Copy ``tensors`` into their slots of ``buffer``; the names, shapes and dtypes must
    be the layout's exactly (``LayoutError`` otherwise, before anything is copied)."""
    if list(tensors) != list(layout):
        diff = sorted(set(tensors) ^ set(layout))[:5]
        raise LayoutError(f"tensor names differ from the layout's: {diff or 'order'}")
    for name, t in tensors.items():
        slot = layout[name]
        if tuple(t.shape) != slot.shape or t.dtype != slot.dtype:
            raise LayoutError(
                f"{name}: {tuple(t.shape)} {t.dtype} does not fit its slot "
                f"{slot.shape} {slot.dtype}"
            )
    views = unpack(buffer, layout)
    with torch.no_grad():
        for name, t in tensors.items():
            views[name].copy_(t.detach(), non_blocking=True)


def write_stamp(buffer: torch.Tensor, version: int) -> None:
    """Record that ``buffer`` holds ``version`` (-1: being written)."""
    stamp = torch.tensor([version], dtype=torch.int64)
    buffer[:8].view(torch.int64).copy_(stamp)


def read_stamp(buffer: torch.Tensor) -> int:
    """The version ``buffer`` holds (-1 while being written)."""
    return int(buffer[:8].view(torch.int64).item())


def layout_to_json(layout: Layout) -> list[list[Any]]:
    """``[[name, offset, shape, dtype name], ...]``, in the layout's order."""
    return [
        [n, s.offset, list(s.shape), str(s.dtype).removeprefix("torch.")] for n, s in layout.items()
    ]


def layout_from_json(raw: Any) -> Layout:
    """The layout ``layout_to_json`` wrote; ``LayoutError`` naming the bad entry."""
    if not isinstance(raw, list):
        raise LayoutError(
            f"layout must be a list of [name, offset, shape, dtype], got {type(raw).__name__}"
        )
    layout: Layout = {}
    for entry in raw:
        try:
            name, offset, shape, dtype_name = entry
            dtype = getattr(torch, str(dtype_name))
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"{dtype_name!r} is no torch dtype")
            slot = Slot(int(offset), tuple(int(d) for d in shape), dtype)
        except (TypeError, ValueError, AttributeError) as exc:
            raise LayoutError(f"bad layout entry {entry!r}: {exc}") from None
        if slot.offset < HEADER_BYTES or slot.offset % ALIGN or min(slot.shape, default=0) < 0:
            raise LayoutError(f"bad layout entry {entry!r}: offset or shape out of range")
        layout[str(name)] = slot
    return layout
