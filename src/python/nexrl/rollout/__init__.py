"""The rollout wing: what runs in the Dask workers that roll out and score.

``worker`` (rollout workers and their Dask task functions), ``evaluators``
(the built-in scorers) and ``agent_service`` (the recording proxy for
unmodified agents). Recipe files import the evaluator API from
``nexrl.rollout_worker``, NexRL's documented path.
"""
