"""The training service: the self-hosted trainer behind an HTTP API shaped like Tinker's.

* ``core``: ``TrainingCore``, the trainer split into ``forward_backward`` /
  ``optim_step`` (and the fused step, weights, checkpoints).
* ``wire``: request bodies, token data -> ``Batch``.
* ``app``: the FastAPI app; ``server``: ``TrainingService`` (uvicorn on a thread).
* ``actor``: ``start_service_on_cluster`` (a Dask actor hosting it).
* ``client``: ``TrainingClient`` (httpx); ``group``: ``ServiceTrainerGroup``, the
  controller's trainer in ``trainer.mode: training-service``.
* its command is the driver's ``nexrl training-service <recipe.yaml> [overrides]``
  (``nexrl.driver.cli.training_service``: it reads a recipe).

Importing this package imports only the client (httpx): the trainer parts
(torch, and DeepSpeed when a trainer is built) load when used. See
docs/training-service.md.
"""

from nexrl.trainer.service.client import TrainingClient, TrainingClientError

__all__ = ["TrainingClient", "TrainingClientError"]
