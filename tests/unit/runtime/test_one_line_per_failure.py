"""A worker's failure line on the terminal names its exception once."""

from __future__ import annotations

import io
import logging

from nexrl.runtime.task_logs import OneLinePerFailure


def _emit(handler: OneLinePerFailure, msg: str, *args: object, exc: BaseException) -> None:
    record = logging.LogRecord(
        "nexrl.rollout_worker.tasks", logging.WARNING, __file__, 1, msg, args,
        (type(exc), exc, None),
    )  # fmt: skip
    handler.emit(record)


def test_a_message_that_names_its_exception_is_not_given_it_again() -> None:
    stream = io.StringIO()
    handler = OneLinePerFailure(stream, where="logs/dask-worker-0.log")
    exc = ConnectionError("cannot reach inference server http://127.0.0.1:9: Connection error.")
    text = f"ConnectionError: {exc}"
    _emit(handler, "rollout of group %s raised (try %d of %d): %s", 7, 1, 3, text, exc=exc)
    _emit(handler, "rollout of group %s raised", 8, exc=ValueError("bad reply"))
    first, second = stream.getvalue().splitlines()
    assert first == (
        f"nexrl.rollout_worker.tasks - WARNING - rollout of group 7 raised (try 1 of 3): {text} "
        "(shown once per kind, then counted at 10, 100, ...; details and repeats: "
        "logs/dask-worker-0.log)"
    )
    # a message that does not name it gets it appended
    assert second.startswith(
        "nexrl.rollout_worker.tasks - WARNING - rollout of group 8 raised: ValueError: bad reply ("
    )
