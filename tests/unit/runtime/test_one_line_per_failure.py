"""A worker's failure line on the terminal names its exception once."""

from __future__ import annotations

import io
import logging

from nexrl.core.process.task_logs import OneLinePerFailure


def _emit(handler: OneLinePerFailure, msg: str, *args: object, exc: BaseException) -> None:
    record = logging.LogRecord(
        "nexrl.rollout.worker.tasks", logging.WARNING, __file__, 1, msg, args,
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
        f"nexrl.rollout.worker.tasks - WARNING - rollout of group 7 raised (try 1 of 3): {text} "
        "(shown once per kind, then counted at 10, 100, ...; details and repeats: "
        "logs/dask-worker-0.log)"
    )
    # a message that does not name it gets it appended
    assert second.startswith(
        "nexrl.rollout.worker.tasks - WARNING - rollout of group 8 raised: ValueError: bad reply ("
    )


def test_a_message_formatted_before_logging_is_one_kind_whatever_task_it_names() -> None:
    """Dask's state machine logs an f-string naming the task and its address: six
    cancelled evaluator tasks were six lines, each saying "shown once per kind"."""
    stream = io.StringIO()
    handler = OneLinePerFailure(stream, where="logs/dask-worker-0.log")
    for key, address in (("152+3-train-30a08cc3", "7f0e1c2d3e40"), ("9-train-5ee2a40a", "7f0e1c")):
        text = (
            f"Async instruction for <Task cancelled name=\"execute('evaluate-g{key}')\" "
            f"coro=<...> at 0x{address}> ended with CancelledError"
        )
        record = logging.LogRecord(
            "distributed.worker.state_machine", logging.WARNING, __file__, 1, text, (), None
        )
        handler.emit(record)
    (line,) = stream.getvalue().splitlines()
    assert "evaluate-g152+3-train-30a08cc3" in line and "shown once per kind" in line
