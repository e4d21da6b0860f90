"""The controller: drives the RL loop of a recipe on a Dask cluster.

    from nexrl.recipe import load_recipe_checked
    from nexrl.controller import Controller

    result = Controller(load_recipe_checked("recipes/max_digit/max_digit_tiny.yaml")).run()

Everything here runs in the driver process. Modules, in data-flow order:
``setup`` / ``rundir`` / ``components`` (recipe → running pieces), ``dispatch``
(rollout and evaluator futures; the functions they run on Dask workers are in
``nexrl.rollout_worker.tasks``), ``scheduler`` (which groups go out: top-up,
retry, skip, dedup), ``sync`` (weight-sync modes), ``state`` (checkpoint and
resume), ``loop`` (the step). The inference supervisor is
``nexrl.inference.supervisor``; the initial model, ``nexrl.modeling.prepare``.
"""

from nexrl.controller.errors import ControllerError, RunResult
from nexrl.controller.loop import Controller

__all__ = ["Controller", "ControllerError", "RunResult"]
