"""Prompt data for the driver: hand rows out as GRPO groups, in an order a resume repeats.

Reading and checking the files is ``nexrl.core.data`` (the ``--check`` dry run on a
worker reads rows too).
"""

from nexrl.driver.data.loader import DataLoader, LoaderConfig, render_prompt, word_count_length

__all__ = ["DataLoader", "LoaderConfig", "render_prompt", "word_count_length"]
