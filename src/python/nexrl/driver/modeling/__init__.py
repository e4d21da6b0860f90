"""Model helpers that need no downloads (tiny models for tests and laptop recipes).

Submodules import torch/transformers lazily, inside functions.
"""

from nexrl.driver.modeling.tiny import (
    DEFAULT_WORDS,
    build_tiny_model,
    build_tokenizer,
    build_vocab,
    save_tiny_model,
)

__all__ = ["DEFAULT_WORDS", "build_tiny_model", "build_tokenizer", "build_vocab", "save_tiny_model"]
