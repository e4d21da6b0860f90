"""Where the run executes: Dask clusters (local, existing scheduler, Slurm, Kubernetes)."""
