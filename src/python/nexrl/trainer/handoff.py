"""Trainer rank 0's side of the in-memory weight handoff (``weight.handoff``;
docs/trainer.md, "Weight handoff").

When the controller turns it on (``enable``, after it found the server on this
host), a step that publishes copies the served tensors (the snapshot's: full weights,
tied embeddings once) into the channel's buffer (``WeightChannel.write``: a copy on
the device, waited for) and hands the controller the channel's descriptor; the
server copies from the buffer before the controller starts the next step.

The snapshot ``vN`` is still written, for resume and for a restarted server, by a
background thread straight from the buffer's views while the next step runs. The
buffer is not written again before that thread finished (``TrainerHandoff.publish``
joins it first), so the snapshot always holds the version it is named after; a
failed background write is raised by the next publish, checkpoint or close
(``TrainerError``: the run stops as it would on a failed publish). ``disable``
(the controller's fallback to files) waits for the last snapshot and frees the
buffer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from nexrl.core.weights.handoff import WeightChannel, host_identity, transport_for
from nexrl.core.weights.snapshot import SnapshotPublisher
from nexrl.trainer.errors import TrainerError

__all__ = ["TrainerHandoff", "disable", "enable"]

logger = logging.getLogger("nexrl.trainer.base")


class TrainerHandoff:
    """Rank 0's channel and its background snapshot writer (module doc)."""

    def __init__(self, transport: str, device: torch.device) -> None:
        self.channel = WeightChannel(transport, device)
        self._writer: threading.Thread | None = None
        self._failure: str | None = None
        self.last_write_s: float | None = None  # the last background snapshot's seconds

    def publish(
        self,
        publisher: SnapshotPublisher,
        tensors: Mapping[str, torch.Tensor],
        config: Any,
        version: int,
    ) -> tuple[Path, dict[str, Any], float]:
        """Hand ``version`` over; ``(the snapshot's path once written, descriptor, seconds
        the copy into the buffer took)``. Snapshot ``v{version}`` is written behind."""
        self.wait()  # the previous snapshot reads the buffer: it must be done first
        start = time.perf_counter()
        descriptor = self.channel.write(tensors, version)
        copy_s = time.perf_counter() - start
        views = self.channel.views()
        self._writer = threading.Thread(
            target=self._write,
            args=(publisher, views, config, version),
            name="nexrl-snapshot-writer",
            daemon=True,
        )
        self._writer.start()
        return publisher.root / f"v{version}", descriptor, copy_s

    def _write(
        self,
        publisher: SnapshotPublisher,
        views: dict[str, torch.Tensor],
        config: Any,
        version: int,
    ) -> None:
        try:
            self.last_write_s = publisher.publish(views, config, version).seconds
        except BaseException as exc:  # raised by the next wait()
            self._failure = f"snapshot v{version}: {type(exc).__name__}: {exc}"

    def wait(self) -> None:
        """Wait for the snapshot being written; ``TrainerError`` if it failed."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise TrainerError(
                f"publishing {failure} (written in the background) failed; 'latest' still "
                "names the previous snapshot"
            )

    def close(self) -> None:
        """Wait for the last snapshot (a failure is logged) and free the buffer."""
        try:
            self.wait()
        except TrainerError as exc:
            logger.error("%s", exc)
        finally:
            self.channel.close()


def enable(t: Any) -> dict[str, Any]:
    """Turn the handoff on for trainer ``t`` (rank 0 keeps the channel, allocated at the
    first publish); ``{"transport", "host", "device_uuid"}``. ``TrainerError`` where it
    cannot be: a LoRA run (its snapshots are adapters: files), no snapshot folder."""
    if t.lora:
        raise TrainerError("weight handoff in memory: LoRA runs publish adapter snapshots (files)")
    if t.spec.snapshot_dir is None:
        raise TrainerError("weight handoff in memory: no snapshot_dir configured")
    transport = transport_for(t.device)
    if t.rank == 0 and t.handoff is None:
        t.handoff = TrainerHandoff(transport, t.device)
    return {"transport": transport, **host_identity(t.device)}


def disable(t: Any) -> None:
    """Back to files: wait for the snapshot being written, free the buffer."""
    handoff, t.handoff = t.handoff, None
    if handoff is not None:
        try:
            handoff.wait()
        finally:
            handoff.channel.close()
