"""What ``--check`` runs of a recipe's task code before any cluster starts.

* the evaluator class is instantiated (and a custom rollout worker class, with
  a client for a service that is not started: constructors must not call it);
* the first ``HEAD_ROWS`` rows of every data file (``data.data_files`` and
  ``validate.data_files``; every row with ``--check --all-rows``, ``check_all_rows``)
  are read (an empty file is a problem) and must hold the prompt
  (``data.prompt_key``) and every field the evaluator (and a custom worker)
  lists in its ``required_fields`` class attribute (a missing field is one line
  listing its rows, not one line per row);
* a custom worker's ``format_task_query`` runs on the first training row;
* with ``rollout_worker.example_answer`` set, the evaluator scores that answer
  on the first training row and must return an ``EvaluationRunResult``
  (``example_score``: what it scored, which ``--check`` shows when the recipe is valid).

Each problem is one line naming the field, the file and the row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.paths import resolve_path
from nexrl.core.plugins import load_spec

__all__ = [
    "HEAD_ROWS",
    "check_all_rows",
    "example_score",
    "instantiate_evaluator",
    "instantiate_worker",
    "required_data_fields",
    "required_fields",
    "task_rows",
    "worker_field",
]

HEAD_ROWS = 5  # rows read from the top of each data file
SHOWN_ROWS = 10  # rows listed per file in a folded line
_rows_to_check: list[int | None] = [HEAD_ROWS]  # None: every row (``--check --all-rows``)


def check_all_rows(on: bool = True) -> None:
    """``--check --all-rows``: the data checks read every row of every data file (a bad
    row anywhere is named with its file and line), not only the first ``HEAD_ROWS``."""
    _rows_to_check[0] = None if on else HEAD_ROWS


EVALUATOR = "rollout_worker.evaluator"
WORKER = "rollout_worker.custom_worker"


#: seconds the example answer's scoring may take before the check calls it hung
EXAMPLE_TIMEOUT_S = 60.0


def within(timeout_s: float, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or ``TimeoutError`` when it has not returned within ``timeout_s``
    (it is left running in a daemon thread, which does not keep the process alive: a
    user's evaluator that hangs made ``--check`` and the run's start hang silently)."""
    done: list[tuple[bool, Any]] = []

    def call() -> None:
        try:
            done.append((True, fn(*args)))
        except BaseException as exc:  # handed to the caller
            done.append((False, exc))

    thread = threading.Thread(target=call, name="nexrl-check", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not done:
        raise TimeoutError(f"did not return within {timeout_s:g}s")
    ok, value = done[0]
    if not ok:
        raise value
    return value


def _where(obj: Any) -> str:
    import inspect

    try:
        return str(inspect.getfile(obj))
    except (TypeError, OSError):
        return getattr(obj, "__module__", "?")


def _one_line(exc: BaseException) -> str:
    text = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def instantiate_evaluator(cfg: DictConfig, roots: list[Path]) -> tuple[Any, list[str]]:
    """``(evaluator instance or None, problems)``: a named evaluator is built with its
    checked ``evaluator_options`` (``nexrl.rollout.evaluators.build``)."""
    from nexrl.rollout.evaluators.registry import OPTIONS_FIELD, build, is_named

    spec = str(cfg.rollout_worker.evaluator)
    raw = cfg.rollout_worker.get("evaluator_options")
    options: Any = OmegaConf.to_container(raw) if raw is not None else {}
    if is_named(spec):
        try:
            return build(spec, options), []
        except RecipeError as exc:
            return None, list(exc.problems)
        except Exception as exc:  # e.g. code_execution's sandbox is unavailable here
            return None, [f"{EVALUATOR}: {spec} failed: {_one_line(exc)}"]
    if options:
        return None, [
            f"{OPTIONS_FIELD}: set, but {EVALUATOR} is a class ('{spec}'); options apply to "
            "a named evaluator (a class reads its own settings)"
        ]
    try:
        cls: Any = load_spec(spec, roots, EVALUATOR)
    except RecipeError as exc:
        return None, list(exc.problems)
    name = getattr(cls, "__name__", spec)
    if not callable(getattr(cls, "evaluate", None)):
        return None, [
            f"{EVALUATOR}: {name} has no 'evaluate' method ({_where(cls)}); define "
            "evaluate(self, data, evaluation_target) -> EvaluationRunResult"
        ]
    try:
        return cls(), []
    except Exception as exc:  # the user's constructor: any failure is a recipe problem
        return None, [f"{EVALUATOR}: {name}() failed ({_where(cls)}): {_one_line(exc)}"]


def worker_field(cfg: DictConfig) -> str:
    """The recipe field that names the run's worker class, for its error lines:
    ``rollout_worker.type`` when it holds ``file.py:Class`` (and the older
    ``custom_worker`` is unset), else ``rollout_worker.custom_worker``."""
    from nexrl.core.plugins.registry import is_spec
    from nexrl.rollout.worker.registry import FIELD

    if not cfg.rollout_worker.custom_worker and is_spec(cfg.rollout_worker.type):
        return FIELD
    return WORKER


def instantiate_worker(cfg: DictConfig, roots: list[Path], evaluator: Any) -> tuple[Any, list[str]]:
    """``(custom worker instance or None, problems)``; ``(None, [])`` without one. A
    class is ``rollout_worker.type: path/to/file.py:Class`` (or the older
    ``custom_worker``); a registered type name is only looked up."""
    from nexrl.rollout.worker.registry import ROLLOUT_WORKERS

    field = worker_field(cfg)
    spec = cfg.rollout_worker.custom_worker or (
        cfg.rollout_worker.type if field != WORKER else None
    )
    if not spec:
        return None, ROLLOUT_WORKERS.problems(cfg.rollout_worker.type, roots)
    try:
        cls: Any = load_spec(str(spec), roots, field)
    except RecipeError as exc:
        return None, list(exc.problems)
    from nexrl.core.chat.client import InferenceClient
    from nexrl.rollout.worker.base import BaseRolloutWorker, missing_episode_method

    if not (isinstance(cls, type) and issubclass(cls, BaseRolloutWorker)):
        return None, [
            f"{field}: {cls!r} ({_where(cls)}) is not a subclass of BaseRolloutWorker "
            "(from nexrl.rollout.worker import SimpleRolloutWorker)"
        ]
    if problem := missing_episode_method(cls):
        return None, [f"{field}: {problem} ({_where(cls)})"]
    if evaluator is None:
        return None, []  # its problem is reported already
    rw = cfg.rollout_worker
    sampling = {"temperature": float(rw.temperature), "max_tokens": int(rw.max_response_length)}
    # A client for a service that is not running: building one opens no connection.
    client = InferenceClient(["http://127.0.0.1:9"], "check")
    try:
        return cls(client, evaluator, sampling, str(cfg.data.prompt_key)), []
    except Exception as exc:
        return None, [f"{field}: {cls.__name__}(...) failed ({_where(cls)}): {_one_line(exc)}"]


def required_fields(obj: Any) -> tuple[str, ...]:
    """The data fields ``obj`` declares it reads (its ``required_fields`` attribute)."""
    fields = getattr(obj, "required_fields", ()) or ()
    if isinstance(fields, str):
        fields = (fields,)
    return tuple(str(f) for f in fields)


def _needs(evaluator: Any, worker: Any, who: str = WORKER) -> list[tuple[str, str]]:
    """``(field, who reads it)`` of the evaluator's and the worker's required fields;
    ``who``: the recipe field naming the worker (``worker_field``)."""
    needs: list[tuple[str, str]] = [(f, EVALUATOR) for f in required_fields(evaluator)]
    needs += [(f, who) for f in required_fields(worker) if (f, EVALUATOR) not in needs]
    return needs


def example_score(cfg: DictConfig, roots: list[Path]) -> str | None:
    """What ``rollout_worker.example_answer`` scores on the first training row (``--check``
    shows it once the recipe is valid), e.g. ``reward 1.0 (metrics: exact 1.0)``; None
    without an example answer or when it cannot be scored (the check says why)."""
    from nexrl.core.data.reader import head_rows, prompt_problem
    from nexrl.rollout.worker.evaluator import BaseEvaluationTarget

    answer = cfg.rollout_worker.get("example_answer")
    files = list(cfg.data.data_files or [])
    if answer is None or not files or cfg.get("mode", "rl") == "sft":
        return None
    evaluator, _ = instantiate_evaluator(cfg, roots)
    path = resolve_path(str(files[0]), roots)
    if evaluator is None or path is None:
        return None
    try:
        usable = [
            (position, row)
            for position, row in head_rows(str(files[0]), HEAD_ROWS, path)
            if isinstance(row, dict) and prompt_problem(row, str(cfg.data.prompt_key)) is None
        ]
        if not usable:
            return None
        position, row = usable[0]
        target = BaseEvaluationTarget(final_answer=str(answer))
        result = within(EXAMPLE_TIMEOUT_S, evaluator.evaluate, row, target)
    except Exception:  # the check reports it (a timeout too)
        return None
    metrics = {k: v for k, v in result.metrics.items() if k != "evaluator_error"}
    shown = ", ".join(f"{k} {v:g}" for k, v in sorted(metrics.items()))
    return (
        f"rollout_worker.example_answer {str(answer)!r} on {files[0]}, {position}: "
        f"reward {result.reward:g}" + (f" (metrics: {shown})" if shown else "")
    )


def required_data_fields(cfg: DictConfig, roots: list[Path]) -> tuple[tuple[str, str], ...]:
    """``(field, who reads it)``: the fields every data row must hold for the run's
    evaluator (and custom worker), which the data loader checks in every row; ``()``
    in SFT mode or when they do not load (the recipe check says why)."""
    if cfg.get("mode", "rl") == "sft" or OmegaConf.is_missing(cfg.rollout_worker, "evaluator"):
        return ()
    evaluator, _ = instantiate_evaluator(cfg, roots)
    if evaluator is None:
        return ()
    worker, _ = instantiate_worker(cfg, roots, evaluator)
    return tuple(_needs(evaluator, worker, worker_field(cfg)))


def _rows_where(field: str, file: str, positions: list[str]) -> str:
    """``data.data_files: f.jsonl, line 3``, or for several rows ``...: f.jsonl: 5 rows
    (line 1, line 2, line 3, ... and 2 more)``."""
    if len(positions) == 1:
        return f"{field}: {file}, {positions[0]}"
    shown = ", ".join(positions[:SHOWN_ROWS])
    more = len(positions) - SHOWN_ROWS
    shown += f", ... and {more} more" if more > 0 else ""
    return f"{field}: {file}: {len(positions)} rows ({shown})"


def task_rows(cfg: DictConfig, roots: list[Path], evaluator: Any, worker: Any) -> list[str]:
    """The data-row checks and dry runs (module doc); one line per problem."""
    from nexrl.core.data.errors import DataError
    from nexrl.core.data.reader import head_rows, prompt_problem

    prompt_key = str(cfg.data.prompt_key)
    needs = _needs(evaluator, worker, worker_field(cfg))
    groups = [
        ("data.data_files", cfg.data.data_files),
        ("validate.data_files", cfg.validate.data_files),
    ]
    out: list[str] = []
    # a missing field: one line per field, its rows listed per file (a renamed field is
    # one line, not one per row checked)
    missing_at: dict[tuple[str, str], dict[tuple[str, str], list[str]]] = {}
    fields_seen: dict[tuple[str, str, str], list[str]] = {}
    prompt_at: dict[tuple[str, str, str], list[str]] = {}  # a mistyped data.prompt_key
    first: tuple[str, str, dict[str, Any]] | None = None
    for field, files in groups:
        for file in files or []:
            path = resolve_path(str(file), roots)
            if path is None:
                continue  # reported by the data check
            try:
                rows = head_rows(str(file), _rows_to_check[0], path, field)
            except DataError as exc:
                out.append(f"{field}: {exc}")
                continue
            if not rows:
                out.append(
                    f"{field}: {file} holds no rows (an empty file); add the prompts, one "
                    "JSON object per line, or leave the file out of the list"
                )
            for position, row in rows:
                where = f"{field}: {file}, {position}"
                if isinstance(row, str):
                    out.append(f"{where}: {row}")
                    continue
                if problem := prompt_problem(row, prompt_key):  # one line per file and problem
                    prompt_at.setdefault((field, str(file), problem), []).append(position)
                    continue
                missing = [(f, who) for f, who in needs if f not in row]
                for key in missing:
                    missing_at.setdefault(key, {}).setdefault((field, str(file)), [])
                    missing_at[key][(field, str(file))].append(position)
                    fields_seen.setdefault((*key, str(file)), sorted(row))
                if not missing and first is None and field == "data.data_files":
                    first = (str(file), position, row)
    for (field, file, problem), positions in prompt_at.items():
        out.append(f"{_rows_where(field, file, positions)}: {problem}")
    for (f, who), places in missing_at.items():  # one line per field and file
        for (field, file), positions in places.items():
            fields = str(fields_seen[(f, who, file)])
            if len(positions) > 1:
                fields = f"{fields} (in {positions[0]})"
            out.append(
                f"{_rows_where(field, file, positions)}: no '{f}' field, which {who} reads "
                f"(its required_fields); fields: {fields}"
            )
    if out or first is None or evaluator is None:
        return out
    file, position, row = first
    if worker is not None:
        try:
            messages = worker.format_task_query(row)
            if not isinstance(messages, list):
                raise TypeError(f"returned {type(messages).__name__}, not a list of messages")
        except Exception as exc:
            out.append(
                f"{worker_field(cfg)}: {type(worker).__name__}.format_task_query failed on {file}, "
                f"{position}: {_one_line(exc)}"
            )
    answer = cfg.rollout_worker.example_answer
    if answer is not None:
        from nexrl.rollout.worker.evaluator import BaseEvaluationTarget, EvaluationRunResult

        name = type(evaluator).__name__
        target = BaseEvaluationTarget(final_answer=str(answer))
        try:
            result = within(EXAMPLE_TIMEOUT_S, evaluator.evaluate, row, target)
            if not isinstance(result, EvaluationRunResult):
                raise TypeError(f"returned {type(result).__name__}, not an EvaluationRunResult")
        except TimeoutError:
            out.append(
                f"rollout_worker.example_answer: {name}.evaluate({str(answer)!r}) did not "
                f"return within {EXAMPLE_TIMEOUT_S:g}s on {file}, {position} "
                f"({_where(type(evaluator))}): an evaluator that hangs stalls every rollout; "
                "fix it, or set rollout_worker.example_answer: null to skip this check"
            )
        except Exception as exc:
            out.append(
                f"rollout_worker.example_answer: {name}.evaluate({str(answer)!r}) failed on "
                f"{file}, {position} ({_where(type(evaluator))}): {_one_line(exc)}"
            )
    return out
