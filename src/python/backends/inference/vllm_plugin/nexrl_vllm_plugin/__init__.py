"""nexrl's vLLM plugin: registers the ``nexrl_shm`` weight-transfer engine.

vLLM calls ``register`` in every process it starts (``vllm.general_plugins``), so
``--weight-transfer-config '{"backend": "nexrl_shm"}'`` finds the engine in the
API server and in the engine core's workers. Loading twice is harmless.
"""

from __future__ import annotations

ENGINE = "nexrl_shm"


def register() -> None:
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if ENGINE not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(
            ENGINE, "nexrl_vllm_plugin.engine", "NexrlShmEngine"
        )
