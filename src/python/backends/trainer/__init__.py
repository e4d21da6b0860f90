"""Training engines, each imported by name (``trainer.backend``): ``deepspeed_engine``.

This package imports nothing heavy: ``import backends.trainer`` does not import
DeepSpeed; ``backends.trainer.deepspeed_engine`` does, when a recipe selects it.
"""
