"""The two ways a handoff buffer is shared between the trainer and a server on its host.

* ``shm`` (CPU): a file under ``/dev/shm`` (``SHM_DIR``), its pages reserved at
  once (``posix_fallocate``: a full tmpfs fails here, not later with a SIGBUS),
  mapped shared by both processes (``torch.from_file(shared=True)``).
* ``cuda_ipc`` (GPU): a CUDA allocation exported with
  ``torch.multiprocessing.reductions.reduce_tensor``; its IPC handle travels as JSON
  (base64 bytes, no pickle: the server never unpickles what a request carries) and
  the server rebuilds the tensor on the device with the same UUID (its own index
  for it may differ: ``CUDA_VISIBLE_DEVICES``).

``allocate`` (the trainer, once) and ``open_buffer`` (the server, once per channel)
are the only places the two differ; everything else sees a flat ``uint8`` tensor.
"""

from __future__ import annotations

import base64
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import torch

from nexrl.core.errors import NexrlError

__all__ = [
    "SHM_PREFIX",
    "TRANSPORTS",
    "TransportError",
    "allocate",
    "device_uuid",
    "host_identity",
    "local_cuda_index",
    "open_buffer",
    "release",
    "shm_dir",
    "transport_for",
]

TRANSPORTS = ("shm", "cuda_ipc")
SHM_PREFIX = "nexrl-weights-"


class TransportError(RuntimeError, NexrlError):
    """A handoff buffer could not be allocated or opened; the message says why."""


def shm_dir() -> Path:
    """Where ``shm`` buffers live: ``/dev/shm`` (memory), else the temp folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


def transport_for(device: torch.device) -> str:
    """The transport for a trainer whose weights live on ``device``."""
    return "cuda_ipc" if device.type == "cuda" else "shm"


def device_uuid(device: torch.device) -> str | None:
    """The CUDA device's UUID (the same in every process); None on the CPU."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return str(torch.cuda.get_device_properties(index).uuid)


def host_identity(device: torch.device) -> dict[str, Any]:
    """``{"host", "device_uuid"}``: what two processes compare to share a buffer."""
    return {"host": socket.gethostname(), "device_uuid": device_uuid(device)}


def local_cuda_index(uuid: str) -> int:
    """This process's index of the CUDA device ``uuid``."""
    if not torch.cuda.is_available():
        raise TransportError(f"cuda_ipc: this process has no CUDA (the buffer is on {uuid})")
    for i in range(torch.cuda.device_count()):
        if str(torch.cuda.get_device_properties(i).uuid) == uuid:
            return i
    raise TransportError(f"cuda_ipc: CUDA device {uuid} is not visible to this process")


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def _unb64(raw: str | None) -> bytes | None:
    return None if raw is None else base64.b64decode(raw)


def allocate(
    transport: str, nbytes: int, device: torch.device, channel_id: str
) -> tuple[torch.Tensor, dict[str, Any]]:
    """A zeroed flat ``uint8`` buffer of ``nbytes`` and what a server needs to open it."""
    if transport == "shm":
        path = shm_dir() / f"{SHM_PREFIX}{channel_id}"
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as exc:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise TransportError(
                f"shm: cannot reserve {nbytes / 1e6:.0f} MB under {path.parent} ({exc}); "
                "free memory there or set weight.handoff: files"
            ) from None
        os.close(fd)
        buffer = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
        return buffer, {"path": str(path)}
    if transport == "cuda_ipc":
        from torch.multiprocessing.reductions import reduce_tensor

        buffer = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        _, args = reduce_tensor(buffer)
        (_, size, stride, offset, _, _, _, handle, storage_bytes, storage_offset) = args[:10]
        ref_handle, ref_offset, event_handle, event_sync = args[11:15]
        info = {
            "device_uuid": device_uuid(device),
            "size": list(size),
            "stride": list(stride),
            "offset": int(offset),
            "handle": _b64(handle),
            "storage_bytes": int(storage_bytes),
            "storage_offset": int(storage_offset),
            "ref_counter_handle": _b64(ref_handle),
            "ref_counter_offset": int(ref_offset),
            "event_handle": _b64(event_handle),
            "event_sync_required": bool(event_sync),
        }
        return buffer, info
    raise TransportError(f"unknown handoff transport {transport!r}; choose one of {TRANSPORTS}")


def open_buffer(transport: str, nbytes: int, info: dict[str, Any]) -> torch.Tensor:
    """The server's view of a buffer ``allocate`` made (in another process)."""
    if transport == "shm":
        path = Path(str(info.get("path", "")))
        if path.parent != shm_dir() or not path.name.startswith(SHM_PREFIX):
            raise TransportError(f"shm: {str(path)!r} is not a handoff buffer under {shm_dir()}")
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise TransportError(f"shm: cannot open {path} ({exc}): another host?") from None
        if size < nbytes:
            raise TransportError(f"shm: {path} holds {size} bytes, the layout needs {nbytes}")
        return torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8)
    if transport == "cuda_ipc":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        index = local_cuda_index(str(info.get("device_uuid")))
        try:
            buffer: torch.Tensor = rebuild_cuda_tensor(
                torch.Tensor,
                torch.Size(info["size"]),
                tuple(info["stride"]),
                int(info["offset"]),
                torch.storage.TypedStorage,
                torch.uint8,
                index,
                _unb64(info["handle"]),
                int(info["storage_bytes"]),
                int(info["storage_offset"]),
                False,
                _unb64(info["ref_counter_handle"]),
                int(info["ref_counter_offset"]),
                _unb64(info.get("event_handle")),
                bool(info.get("event_sync_required", False)),
            )
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise TransportError(f"cuda_ipc: cannot open the buffer ({exc})") from None
        if buffer.numel() < nbytes:
            raise TransportError(f"cuda_ipc: buffer of {buffer.numel()} bytes, need {nbytes}")
        return buffer
    raise TransportError(f"unknown handoff transport {transport!r}; choose one of {TRANSPORTS}")


def release(transport: str, info: dict[str, Any]) -> None:
    """The trainer's side, at the end: remove an ``shm`` buffer's file (a server that
    mapped it keeps its mapping until it lets go)."""
    if transport == "shm":
        Path(str(info["path"])).unlink(missing_ok=True)
