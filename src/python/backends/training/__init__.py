"""Training engines, each imported by name (``trainer.backend``): ``deepspeed_engine``.

This package imports nothing heavy: ``import backends.training`` does not import
DeepSpeed; ``backends.training.deepspeed_engine`` does, when a recipe selects it.
"""
