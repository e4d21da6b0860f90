"""The controller: drives the RL loop of a recipe on a Dask cluster.

    from nexrl.driver.recipe import load_recipe_checked
    from nexrl.driver.controller import Controller

    result = Controller(load_recipe_checked("recipes/max_digit/max_digit_tiny.yaml")).run()

Everything here runs in the driver process. Modules, in data-flow order:
``setup`` / ``rundir`` / ``build`` (recipe → running pieces, started in order) /
``components`` (those pieces, ``cluster.json``, plots, shutdown) / ``driver_log``
(``logs/driver.log``), ``dispatch`` (rollout and evaluator futures; the functions
they run on Dask workers are in ``nexrl.rollout.worker.tasks``), ``scheduler``
(which groups go out: top-up, retry, skip, dedup), ``harvest`` (what comes back:
groups done, failures counted), ``sampling`` (dynamic sampling's filtered groups),
``counters`` (``RunCounters``: what the run counted), ``report`` (the step's
metrics row), ``sync`` (weight-sync modes) / ``reload``
(inference reloads a step's snapshot), ``validation``, ``checkpoints`` / ``state``
(checkpoint) / ``resume``, ``watch`` (workers lost, the scheduler gone, inference
restarts), ``signals`` (Ctrl-C, SIGTERM), ``diagnostics`` (the one line that stops
a run, with how to resume), ``errors`` (``ControllerError``, ``RunResult``),
``loop`` (the step, composing the above); ``sft`` (``mode: sft``). The inference
supervisor is ``nexrl.inference.supervisor``; the initial model,
``nexrl.driver.modeling.prepare``.
"""

from nexrl.driver.controller.errors import ControllerError, RunResult
from nexrl.driver.controller.loop import Controller

__all__ = ["Controller", "ControllerError", "RunResult"]
