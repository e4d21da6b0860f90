"""Small helpers every part of nexrl may use: atomic file writes (``files``), a free
TCP port (``net``). Modules here import nothing else from nexrl."""
