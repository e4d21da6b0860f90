"""Inference engines: the embedded OpenAI-compatible server and reload adapters
for vLLM and SGLang servers (``backends.inference.adapters``)."""
