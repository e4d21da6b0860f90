"""Engines behind nexrl's stable interfaces (DeepSpeed training, inference servers).

Nothing here is imported by ``nexrl`` at import time: a recipe names its
backend and only that module is imported.
"""
