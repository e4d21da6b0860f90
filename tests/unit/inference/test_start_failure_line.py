"""The one line a failed inference-server start stops the run with: the engine's own
error, found in its log (``nexrl.inference.start_failure.start_failure``). The logs
below are the shapes vLLM 0.32 writes (its engine process's root cause, then the API
server's "see root cause above"; a pydantic validation error whose reason is on the
next line); ``tests/e2e/test_vllm_faults.py`` checks the same against the real engine."""

from __future__ import annotations

from pathlib import Path

from nexrl.inference.start_failure import start_failure

ENGINE_CORE_DIED = """\
(EngineCore pid=5043) ERROR 11-28 13:20:11 [core.py:1100] Traceback (most recent call last):
(EngineCore pid=5043) ERROR 11-28 13:20:11 [core.py:1100]     raise RuntimeError(
(EngineCore pid=5043) ERROR 11-28 13:20:11 [core.py:1100] safetensors._safetensors_rust.SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered
(APIServer pid=4932) Traceback (most recent call last):
(APIServer pid=4932)   File "vllm/v1/engine/utils.py", line 1431, in wait_for_engine_startup
(APIServer pid=4932)     raise RuntimeError(
(APIServer pid=4932) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

BAD_FLAG = """\
Traceback (most recent call last):
  File "vllm/engine/arg_utils.py", line 1955, in create_model_config
    return ModelConfig(
           ^^^^^^^^^^^^
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, User-specified max_model_len (100000) is greater than the derived max_model_len
    For further information visit https://errors.pydantic.dev/2.14/v/value_error
"""


def test_the_root_cause_not_the_line_that_points_above_it(tmp_path: Path) -> None:
    log = tmp_path / "inference.log"
    log.write_text("INFO starting\n" + ENGINE_CORE_DIED)
    line = start_failure(RuntimeError("server exited with 1:\n<tail>"), log)
    assert line == (
        "server exited with 1; its last error: safetensors._safetensors_rust.SafetensorError: "
        "Error while deserializing header: incomplete metadata, file not fully covered"
    )


def test_an_error_whose_reason_is_on_the_next_line_gets_it(tmp_path: Path) -> None:
    log = tmp_path / "inference.log"
    log.write_text(BAD_FLAG)
    line = start_failure(RuntimeError("server exited with 1:\n<tail>"), log)
    assert line == (
        "server exited with 1; its last error: pydantic_core._pydantic_core.ValidationError: "
        "1 validation error for ModelConfig: Value error, User-specified max_model_len (100000) "
        "is greater than the derived max_model_len"
    )


def test_only_the_end_of_a_long_log_is_read_and_no_error_leaves_the_first_line(
    tmp_path: Path,
) -> None:
    log = tmp_path / "inference.log"
    old = "ValueError: an error of an earlier start\n"
    log.write_text(old + "INFO loading\n" * (70 * 1024 // 13))  # > the 64 KiB scanned
    line = start_failure(RuntimeError("server exited with -9:\n<tail>"), log)
    assert line == "server exited with -9"
    assert start_failure(RuntimeError("server exited with 1:"), tmp_path / "none") == (
        "server exited with 1"
    )


def test_an_earlier_servers_error_in_the_same_log_is_not_this_starts(tmp_path: Path) -> None:
    """``inference.log`` is appended to by every server of a run: only what this start
    wrote (past ``since``) is searched."""
    log = tmp_path / "inference.log"
    log.write_text("RuntimeError: the previous server's crash\n")
    since = log.stat().st_size
    with log.open("a") as f:
        f.write("INFO starting\nKilled\n")
    line = start_failure(RuntimeError("server exited with -9:\n<tail>"), log, since)
    assert line == "server exited with -9"
    assert "previous server" in start_failure(RuntimeError("exited:"), log)
