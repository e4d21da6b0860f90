"""Embedded OpenAI-compatible inference server (FastAPI + uvicorn + transformers).

``EmbeddedServer`` (subprocess handle) is importable without torch; the
server modules (``app``, ``service``, ``generation``, ``weights``) import
torch/transformers.
"""

from backends.inference.embedded.handle import EmbeddedServer, ServerStartError

__all__ = ["EmbeddedServer", "ServerStartError"]
