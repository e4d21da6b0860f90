"""The environment the run's Dask worker processes start with.

Dask's nanny exports ``MALLOC_TRIM_THRESHOLD_=65536`` into every worker process it
spawns (``distributed.nanny.pre-spawn-environ``, to hand freed memory back to the
OS sooner). Setting any of glibc's ``MALLOC_*`` tunables turns off glibc's dynamic
mmap threshold, so every allocation above 128 KiB (every activation and gradient
tensor of a training step or a generation loop) becomes an ``mmap`` + page faults
+ ``munmap``. Measured on the 2-core VM (docs/benchmarks.md, "Dask's malloc
setting"): a GRPO step of the generation-heavy model took 1.9 s with it vs 1.0 s
without, and the default recipe's whole step 1.64x as long.

The trainer actor and the embedded inference server run in (or are spawned by)
nanny-spawned worker processes, so this matters to every run. A run's workers
therefore start without that variable:

* ``cluster.type: local``: ``apply_in_driver`` removes it from this process's Dask
  config before the ``LocalCluster``'s nannies read it (nannies of restarted
  workers too). The nanny of a LocalCluster also copies its ``pre-spawn-environ``
  into the driver's own environment, and the embedded server is spawned from it.
* ``slurm`` / ``kubernetes``: each job / pod gets ``job_environment()``
  (``DASK_INTERNAL_INHERIT_CONFIG``, the variable Dask reads serialized config
  from at import), so the nanny in that job leaves the variable out.
* ``address``: workers someone else started keep their own settings; start them
  with ``DASK_INTERNAL_INHERIT_CONFIG`` from ``job_environment()`` for the same.

Everything else in ``pre-spawn-environ`` (``OMP_NUM_THREADS=1`` and the like) is
kept: the trainer and the server set their own torch threads. Added:
``HF_HUB_DISABLE_PROGRESS_BARS=1``, so that a worker loading a model (the trainer)
draws no progress bar on the terminal the workers share with the driver.

Also: ``distributed.admin.low-level-log-length`` is 50 instead of 1,000, in the driver
(its scheduler and client) and in every worker: Dask's recent-message logs held the
run's old task messages, hundreds of MB on a long run.
"""

from __future__ import annotations

from typing import Any

#: Dask's developer logs kept per process (see WORKER_DASK_CONFIG).
LOW_LEVEL_LOG_LENGTH = 50

#: The Dask config the run's worker nannies get (``None`` unsets a variable); the
#: driver applies it to itself too (``apply_in_driver``).
WORKER_DASK_CONFIG: dict[str, Any] = {
    "distributed": {
        # Dask keeps the last N of several developer logs in every process (1,000 by
        # default): each comm's recently sent payloads (a rollout task's message holds
        # its groups and the rollout spec), the scheduler's transitions and events. On
        # a long run they filled the driver (scheduler + client) and the trainer's
        # worker with hundreds of MB of old messages (docs/benchmarks.md, "Long haul").
        "admin": {"low-level-log-length": LOW_LEVEL_LOG_LENGTH},
        "nanny": {
            "pre-spawn-environ": {
                "MALLOC_TRIM_THRESHOLD_": None,
                # no "Loading weights" bar from a worker on the user's terminal (the
                # trainer loading its model): Hugging Face reads it at import
                "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            }
        },
    }
}
INHERIT_VAR = "DASK_INTERNAL_INHERIT_CONFIG"


def apply_in_driver() -> None:
    """Put ``WORKER_DASK_CONFIG`` into this process's Dask config (for nannies it starts)."""
    import dask.config

    dask.config.update(dask.config.config, WORKER_DASK_CONFIG, priority="new")


def job_environment() -> dict[str, str]:
    """Environment variables for a worker job or pod that apply ``WORKER_DASK_CONFIG``."""
    import dask.config

    return {INHERIT_VAR: dask.config.serialize(WORKER_DASK_CONFIG)}
