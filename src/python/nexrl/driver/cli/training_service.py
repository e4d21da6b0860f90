"""``nexrl training-service <recipe.yaml> [key=value ...] [--host H] [--port P]``.

(``python -m nexrl training-service ...`` in the monorepo.) The service itself
is the trainer wing's ``nexrl.trainer.service``; this command is the driver's
side of it, because it reads a recipe.

Loads and checks the recipe (the same overrides as ``nexrl train``), prepares
the initial model the way a run does (``model.path``, or the tiny model under
``output_dir/model``), builds the recipe's trainer and serves the API until
Ctrl-C / SIGTERM. Snapshots go to ``weight.snapshot_dir``, checkpoints to
``output_dir/checkpoints`` (``resume.mode`` applies, as in a run). Binding
beyond 127.0.0.1 needs ``NEXRL_TRAINING_SERVICE_TOKEN``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nexrl.core.errors import NexrlError

if TYPE_CHECKING:
    from nexrl.driver.recipe import Recipe
    from nexrl.trainer.spec import TrainerSpec

__all__ = ["main", "spec_from_recipe"]


def spec_from_recipe(recipe: Recipe) -> TrainerSpec:
    """The ``TrainerSpec`` a run of ``recipe`` builds (model prepared on disk)."""
    from nexrl.driver.modeling.prepare import prepare_model
    from nexrl.trainer.spec import TrainerSpec

    cfg = recipe.spec
    out = recipe.output_dir
    out.mkdir(parents=True, exist_ok=True)
    model_dir, tok_dir = prepare_model(cfg, out, recipe.roots, progress=False)
    spec = TrainerSpec.from_recipe(cfg, model_path=model_dir, roots=recipe.roots)
    return replace(spec, tokenizer_path=str(tok_dir), auto_checkpoint=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="nexrl training-service",
        description="Serve a recipe's trainer over HTTP (docs/training-service.md).",
    )
    parser.add_argument("recipe", help="recipe YAML")
    parser.add_argument("overrides", nargs="*", help="key=value recipe overrides")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8300, help="port (0 = a free one)")
    args = parser.parse_args(argv)
    from nexrl.driver.recipe import load_recipe_checked
    from nexrl.trainer.service.server import TrainingService

    try:
        recipe = load_recipe_checked(args.recipe, args.overrides)
        service = TrainingService(spec_from_recipe(recipe), host=args.host, port=args.port)
        service.start()
    except NexrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def stop(_signum: int, _frame: Any) -> None:
        service.request_stop()

    signal.signal(signal.SIGTERM, stop)
    print(f"nexrl training service: {service.base_url} (Ctrl-C stops it)", flush=True)
    try:
        service.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
