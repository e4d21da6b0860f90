"""Prompt data: read parquet/jsonl rows and hand them out as GRPO groups."""

from nexrl.data.errors import DataError
from nexrl.data.loader import DataLoader, LoaderConfig, render_prompt, word_count_length
from nexrl.data.reader import ReadResult, SourceRow, read_rows

__all__ = [
    "DataError",
    "DataLoader",
    "LoaderConfig",
    "ReadResult",
    "SourceRow",
    "read_rows",
    "render_prompt",
    "word_count_length",
]
