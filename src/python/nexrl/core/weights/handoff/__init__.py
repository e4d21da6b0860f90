"""Weight handoff in memory: trainer rank 0 and a server on its host share one
buffer holding every served tensor (``layout``), over ``shm`` or ``cuda_ipc``
(``transport``), written by the trainer and read by the server (``channel``).
How a run uses it (``weight.handoff``): docs/trainer.md, "Weight handoff".

Only torch is imported here; no backend.
"""

from nexrl.core.weights.handoff.channel import OpenedChannel, WeightChannel, open_channel
from nexrl.core.weights.handoff.layout import LayoutError, Slot, pack, plan_layout, unpack
from nexrl.core.weights.handoff.transport import (
    TRANSPORTS,
    TransportError,
    host_identity,
    transport_for,
)

__all__ = [
    "TRANSPORTS",
    "LayoutError",
    "OpenedChannel",
    "Slot",
    "TransportError",
    "WeightChannel",
    "host_identity",
    "open_channel",
    "pack",
    "plan_layout",
    "transport_for",
    "unpack",
]
