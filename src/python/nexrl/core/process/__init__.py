"""How nexrl starts its processes: the warm parent (``forkserver``), the Dask
worker's preload (``own_session``), its environment and plugins, task logs, and
local services in a process of their own."""
