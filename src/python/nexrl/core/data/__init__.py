"""Prompt data files: read parquet/jsonl rows and check them (``DataError`` names the file and row)."""

from nexrl.core.data.errors import DataError
from nexrl.core.data.reader import ReadResult, SourceRow, read_rows

__all__ = ["DataError", "ReadResult", "SourceRow", "read_rows"]
