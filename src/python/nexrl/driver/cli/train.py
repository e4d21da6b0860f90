"""``nexrl train``: the training entry point (``./pants run src/python/nexrl:train``).

    train RECIPE.yaml [key=value ...] [--print-config] [--check [--all-rows]]
    train --new-task recipes/NAME      # scaffold a task (nexrl.driver.cli.new_task)

The recipe is composed with the overrides and validated against the typed
schema before any cluster starts; user mistakes are reported as a list of
problems (exit 2), never as a traceback. A run that fails later exits 1 with
a message naming the failing component (the traceback is in
``<output_dir>/logs/driver.log``); any other ``NexrlError`` (e.g. a
``trainer.world_size`` the cluster cannot place) is one ``error:`` line, exit 1.
A recipe that still uses a renamed key works, with one ``warning:`` line per
old key naming the new one (``nexrl.core.config.renames``); an override that also
moves something else (``trainer.total_train_steps`` moving the LR schedule's end)
gets a ``warning:`` line too (``nexrl.driver.recipe.notes``).
Ctrl-C checkpoints and exits 130 (also through ``./pants run``: the ``./pants``
script returns 130 when Pants was interrupted); the same command resumes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nexrl.core.config.errors import RecipeError
from nexrl.core.errors import NexrlError
from nexrl.driver.cli import shutdown

if TYPE_CHECKING:
    from nexrl.driver.recipe import Recipe

# Nothing heavy at import time: a LocalCluster's worker processes are spawned, and a
# spawned process imports the parent's main module again (``python -m nexrl.driver.cli.train``);
# torch and the recipe machinery at the top here cost each worker ~5 s before it joined.


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nexrl train",
        description="Run an RL post-training recipe (Hydra YAML) on Dask.",
    )
    p.add_argument("recipe", nargs="?", help="path to the recipe .yaml file")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.lr=1e-5")
    # NexRL's own CLI flags, so its users' habits carry over (nexrl.driver.cli.flags)
    p.add_argument(
        "-c", "--train-config", metavar="RECIPE", help="the recipe .yaml (instead of RECIPE)"
    )
    p.add_argument(
        "-m",
        "--mode",
        choices=("self-hosted", "training-service"),
        help="where the trainer runs: the same as trainer.mode=MODE",
    )
    p.add_argument(
        "-t",
        "--tag",
        help="a suffix for the run's name: experiment_name becomes NAME-TAG, so the run "
        "folder (runs/NAME-TAG unless output_dir is set) and Slurm job names get it",
    )
    p.add_argument(
        "--inference-url",
        metavar="URL",
        action="append",
        help="use a running OpenAI-compatible engine at URL instead of starting one (the "
        "same as service.inference_service.base_urls=[URL]); repeat it for replicas",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved recipe and exit")
    p.add_argument("--check", action="store_true", help="validate the recipe and exit")
    p.add_argument(
        "--all-rows",
        action="store_true",
        help="with --check: check every row of every data file (by default the first "
        "5 of each), naming each bad row's file and line",
    )
    p.add_argument(
        "--sbatch",
        action="store_true",
        help="submit this run's driver as a Slurm batch job (cluster.slurm settings) and exit",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="with --sbatch: print the job script; with cluster.type=kubernetes: print the "
        "run's Dask operator resources (checked against its CRD schemas); create nothing",
    )
    p.add_argument(
        "--new-task",
        metavar="FOLDER",
        help="write a data script, an evaluator and a recipe for a new task into FOLDER "
        "(e.g. recipes/my_task) and exit; existing files are never overwritten",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    # multiprocessing's resource tracker, a process this one starts (with its -W flags),
    # warns of "leaked semaphore objects" when the driver was ended at once (a Ctrl-C
    # while the run closed); it removes them itself: the line tells a user nothing
    if _TRACKER_WARNING not in sys.warnoptions:
        sys.warnoptions.append(_TRACKER_WARNING)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C while the recipe is checked (run() handles later ones)
        stop_warm_parent()
        print(
            "nexrl: stopped by Ctrl-C before the run started; nothing was written", file=sys.stderr
        )
        return 130


_TRACKER_WARNING = "ignore:resource_tracker:UserWarning"
#: their WARNING lines (a group's rollout failed, its retry) are folded on the terminal
ROLLOUT_FAILURE_LOGGERS = (
    "nexrl.driver.controller.dispatch",
    "nexrl.driver.controller.failures",
    "nexrl.driver.controller.scheduler",
)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)  # flags anywhere
    if args.new_task:
        return scaffold(args.new_task)
    from nexrl.driver.cli.flags import FlagError, apply_flags

    try:
        args.recipe, args.overrides = apply_flags(args)
    except FlagError as exc:
        parser.error(str(exc))
    if args.recipe is None:
        parser.error("the recipe path is required (RECIPE or -c RECIPE; or --new-task FOLDER)")
    # The recipe's deprecation lines are printed below as "warning:" lines; without a
    # handler of its own, the logger would also print them bare (logging.lastResort).
    quiet = logging.getLogger("nexrl.driver.recipe")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    if not (args.print_config or args.check or args.sbatch or args.dry_run):
        # On a local cluster the trainer's worker and the embedded server fork from a
        # parent that imports torch and transformers now, while this process checks
        # the recipe (nexrl.core.process.forkserver). Dask's INFO chatter stays off the
        # screen in every worker (set before the warm parent, whose environment
        # forked workers get).
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
        warm_parent_for(args.recipe, args.overrides)
    from nexrl.driver.recipe import load_recipe_checked

    if args.all_rows:
        if not args.check:
            parser.error("--all-rows goes with --check")
        from nexrl.rollout.worker.dry_run import check_all_rows

        check_all_rows()
    try:
        recipe = load_recipe_checked(args.recipe, args.overrides)
    except RecipeError as exc:
        stop_warm_parent()
        warn(args.recipe, exc.deprecations)
        print(recipe_error_line(args.recipe, exc), file=sys.stderr)
        return 2
    except NexrlError as exc:
        stop_warm_parent()
        logging.getLogger(__name__).debug("recipe check failed", exc_info=True)
        print(f"error: {args.recipe}: {one_line(exc)}", file=sys.stderr)
        return 2
    warn(args.recipe, recipe.deprecations)
    if not args.print_config:
        from nexrl.driver.recipe.notes import override_notes

        warn(args.recipe, tuple(override_notes(recipe, args.overrides)))
    if args.print_config:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(recipe.cfg, resolve=True), end="")
    if args.check:
        print(f"{args.recipe}: recipe is valid")
        from nexrl.rollout.worker.dry_run import example_score

        score = example_score(recipe.cfg, list(recipe.roots))
        if score:
            print(score)
    if args.print_config or args.check:
        return 0
    if args.dry_run and not args.sbatch and str(recipe.cfg.cluster.type) == "kubernetes":
        from nexrl.driver.cli.submit import kubernetes_manifests

        return kubernetes_manifests(recipe)
    if args.dry_run and not args.sbatch and str(recipe.cfg.cluster.type) == "local":
        print(
            f"error: {args.recipe}: --dry-run prints what a cluster would be given: the job "
            "script with --sbatch (cluster.type=slurm), or the Dask resources with "
            "cluster.type=kubernetes; a local run has none (to check the recipe: --check)",
            file=sys.stderr,
        )
        return 2
    if args.sbatch or args.dry_run:
        from nexrl.driver.cli.submit import sbatch

        return sbatch(recipe, args.overrides, dry_run=args.dry_run)
    try:
        return run(recipe)
    finally:
        stop_warm_parent()  # its processes are closed by now (main may run in-process)


def scaffold(folder: str) -> int:
    """``--new-task``: write the task template into ``folder``; exit code. The next-step
    line names ``nexrl train`` where nexrl is installed (pip), else ``./pants run``."""
    from nexrl.driver.cli.new_task import NewTaskError, new_task

    try:
        written = new_task(folder)
    except (NewTaskError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    recipe = written[-1]
    command = "nexrl train" if _installed() else "./pants run src/python/nexrl:train --"
    print(f"next: python {folder}/make_data.py, then {command} {recipe} --check")
    return 0


def _installed() -> bool:
    """Whether this nexrl is an installed distribution (pip) rather than the monorepo."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("nexrl")
    except PackageNotFoundError:
        return False
    return True


def warm_parent_for(recipe: str, overrides: list[str]) -> bool:
    """Start the warm parent (``nexrl.core.process.forkserver``) when the recipe, composed
    but not yet checked (the checks import torch, which the warm parent should be
    doing meanwhile), runs on a local cluster with ``cluster.warm_parent`` on. A
    recipe that does not compose starts nothing: its check says why."""
    try:
        from omegaconf import OmegaConf

        from nexrl.driver.recipe.compose import load_recipe

        # a recipe without a cluster section runs on the schema's defaults: local, warm
        composed = load_recipe(recipe, list(overrides))
        wanted = str(OmegaConf.select(composed, "cluster.type", default="local")) == "local"
        wanted = wanted and bool(OmegaConf.select(composed, "cluster.warm_parent", default=True))
    except Exception:
        return False
    if not wanted:
        return False
    from nexrl.core.process.forkserver import start_warm_parent

    return start_warm_parent(fork=True)


def stop_warm_parent() -> None:
    """Stop the warm parent if ``main`` started one (the recipe failed, or the run is over)."""
    from nexrl.core.process.forkserver import stop_warm_parent as stop

    stop()


def warn(recipe: str, lines: tuple[str, ...]) -> None:
    """One ``warning:`` line on stderr per line (a renamed key the recipe still uses, an
    override's side effect)."""
    for line in lines:
        print(f"warning: {recipe}: {line}", file=sys.stderr)


def recipe_error_line(recipe: str, exc: RecipeError) -> str:
    """``error: <recipe>: <problem>`` (the recipe named once, also where the problem
    names it first: a file or override the recipe could not be composed with)."""
    return f"error: {recipe}: {exc.render().removeprefix(f'{recipe}: ')}"


def one_line(exc: BaseException) -> str:
    """``str(exc)`` on one line (a message that spans lines has them joined with " | ")."""
    from nexrl.core.util.logfile import joined_lines

    return joined_lines(str(exc)) or type(exc).__name__


def _interrupts_to_the_log(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """An ``unraisablehook``: a second Ctrl-C raises ``KeyboardInterrupt`` wherever the
    driver is, also inside a garbage-collector or finalizer callback (Dask's GC
    diagnostics), where Python cannot raise it and prints "Exception ignored in ..."
    with a traceback; those go to the log, anything else to ``previous``."""

    def hook(unraisable: Any) -> None:
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            logging.getLogger(__name__).debug(
                "Ctrl-C inside %r", unraisable.object, exc_info=unraisable.exc_value
            )
            return
        previous(unraisable)

    return hook


def resume_hint(recipe: Recipe) -> str:
    """How to continue a stopped run: the same command (``resume.mode=auto``, the
    default), or the override a run that does not resume by itself needs."""
    mode = str(recipe.cfg.resume.mode)
    if mode == "auto":
        return "run the same command to resume"
    return (
        f"to resume, run the same command with resume.mode=auto (this run has resume.mode={mode})"
    )


def run(recipe: Recipe) -> int:
    """Train; the exit code (0 done, 1 failed, 130 interrupted). A Ctrl-C once the run's
    own handler is gone (its processes closing, Python's teardown) ends the process at
    once (``nexrl.driver.cli.shutdown``)."""
    shutdown.arm(_stopped_at_once(recipe))
    return shutdown.ended(_run(recipe))


def _stopped_at_once(recipe: Recipe) -> str:
    return (
        "nexrl: stopped at once (before the first step, or a second Ctrl-C: a step in "
        f"progress is not checkpointed; the newest checkpoint is kept): {resume_hint(recipe)}"
    )


def _run(recipe: Recipe) -> int:
    from nexrl.core.data import DataError
    from nexrl.core.process.forkserver import warm_parent_lost
    from nexrl.core.util.logfile import FoldRepeats, TerminalFormatter
    from nexrl.driver.controller import Controller, ControllerError
    from nexrl.driver.controller.rundir import RunDirError
    from nexrl.driver.modeling.prepare import ModelSetupError

    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.WARNING, format=fmt)
    # a library's record with a traceback (Dask's "Exception in callback") is one line
    # here; the traceback goes to logs/driver.log. A failed rollout and its retry: one
    # line per kind of failure, then counts (a worker bug fails every group)
    where = f"{recipe.cfg.output_dir}/logs/driver.log"
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:
            handler.setFormatter(TerminalFormatter(fmt, where=where))
            for old in [f for f in handler.filters if isinstance(f, FoldRepeats)]:
                handler.removeFilter(old)  # (main run again in one process)
            handler.addFilter(FoldRepeats(ROLLOUT_FAILURE_LOGGERS, where))
    logging.getLogger("nexrl").setLevel(logging.INFO)
    # Dask's own INFO chatter (workers starting/closing) goes to the log file, not the
    # screen (main() also sets DASK_LOGGING__DISTRIBUTED for the workers).
    logging.getLogger("distributed").setLevel(logging.WARNING)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _interrupts_to_the_log(previous_hook)
    try:
        result = Controller(recipe).run()
    except (RunDirError, ModelSetupError, DataError) as exc:
        print(f"error: {recipe.path}: {exc}", file=sys.stderr)
        return 2
    except RecipeError as exc:  # e.g. a Dask worker that cannot import the recipe's plugins
        print(recipe_error_line(str(recipe.path), exc), file=sys.stderr)
        return 2
    except ControllerError as exc:
        logging.getLogger(__name__).debug("run failed", exc_info=True)
        print(f"error: the run stopped: {exc}{warm_parent_lost()}", file=sys.stderr)
        print(f"(details: {recipe.cfg.output_dir}/logs/driver.log)", file=sys.stderr)
        return 1
    except NexrlError as exc:  # e.g. TrainerGroupError: trainer.world_size > GPU workers
        logging.getLogger(__name__).debug("run failed", exc_info=True)
        print(f"error: {one_line(exc)}{warm_parent_lost()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the run's loop started
        print(_stopped_at_once(recipe), file=sys.stderr)
        return 130
    finally:
        sys.unraisablehook = previous_hook
    if result.stopped_by and result.steps == 0:  # nothing trained, so no checkpoint
        print(
            f"nexrl: stopped by {result.stopped_by} before the first step; the same "
            "command starts the run over",
            file=sys.stderr,
        )
        return 130
    if result.stopped_by:
        print(
            f"nexrl: stopped by {result.stopped_by} at step {result.steps} (checkpointed); "
            f"{resume_hint(recipe)}",
            file=sys.stderr,
        )
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
