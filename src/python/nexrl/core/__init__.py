"""The core: what every process of a run imports.

Errors, utilities, the recipe schema (``config``), the plugin ``Registry``, the
data types, the pool's format, reader and writer, the snapshot and checkpoint
formats (``weights``), the chat client (``chat``), data files and conversations,
and how nexrl starts its processes (``process``). It imports no wing.
"""
