"""The controller: drives the RL loop of a recipe on a Dask cluster.

    from nexrl.recipe import load_recipe_checked
    from nexrl.controller import Controller

    result = Controller(load_recipe_checked("recipes/max_digit/max_digit_tiny.yaml")).run()

Modules, in data-flow order: ``setup`` / ``rundir`` / ``components`` (recipe →
running pieces), ``tasks`` and ``dispatch`` (rollout and evaluator futures),
``service`` (the inference service), ``sync`` (weight-sync modes), ``state``
(checkpoint and resume), ``loop`` (the step).
"""

from nexrl.controller.loop import Controller, ControllerError, RunResult

__all__ = ["Controller", "ControllerError", "RunResult"]
