"""NexRL on Dask: LLM post-training (RL) with a Dask control plane.

The package reads like the data flow: ``config`` (recipe) -> ``controller`` ->
``rollout`` -> ``pool`` -> ``trainer`` -> ``weights`` (snapshots) -> inference.
Importing ``nexrl`` never imports a training or inference backend.
"""

__version__ = "0.1.0"
