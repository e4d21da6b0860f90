"""The engines' entries in nexrl's registries, made the way a plugin makes them.

``nexrl.core.plugins.registry.load_builtin_plugins`` imports this module in every
process that looks up a part (``nexrl`` itself never imports ``backends``):

* ``trainer.backend: deepspeed`` -> ``backends.trainer.deepspeed_engine:build_engine``
* ``service.inference_service.backend``: the reload adapters ``embedded``,
  ``vllm`` and ``sglang`` (``backends.inference.adapters``)
* ``INFERENCE_SERVERS["embedded"]``: ``backends.inference.embedded:EmbeddedServer``,
  the local server process nexrl starts and restarts (its own server, or a
  recipe's ``command``)

All lazily: DeepSpeed, httpx's adapters and the server's handle are imported
only when a run uses them.
"""

from nexrl.inference.reload import INFERENCE_SERVERS, RELOAD_ADAPTERS
from nexrl.trainer.engine import TRAINING_ENGINES

TRAINING_ENGINES.register_lazy("deepspeed", "backends.trainer.deepspeed_engine:build_engine")
INFERENCE_SERVERS.register_lazy("embedded", "backends.inference.embedded.handle:EmbeddedServer")
RELOAD_ADAPTERS.register_lazy("embedded", "backends.inference.adapters:EmbeddedReloadAdapter")
RELOAD_ADAPTERS.register_lazy("vllm", "backends.inference.adapters:VLLMReloadAdapter")
RELOAD_ADAPTERS.register_lazy("sglang", "backends.inference.adapters:SGLangReloadAdapter")
