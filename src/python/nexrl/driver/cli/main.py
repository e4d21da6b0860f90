"""``nexrl``: the console script of the installed package (``pip install nexrl-*.whl``).

    nexrl train RECIPE.yaml [key=value ...]    # = ./pants run src/python/nexrl:train --
    nexrl train -c RECIPE.yaml -m training-service -t try2 --inference-url URL
    nexrl -c RECIPE.yaml [...]                 # NexRL's own form: train is implied
    nexrl dashboard RUN_FOLDER [--port N]      # = ./pants run src/python/nexrl:dashboard --
    nexrl new-task FOLDER                      # = train --new-task FOLDER
    nexrl training-service RECIPE.yaml [--port N]   # serve the recipe's trainer over HTTP
    nexrl --version

Each command is the module the monorepo runs (``nexrl.driver.cli.train``,
``nexrl.driver.cli.dashboard``), so a recipe, its overrides and its exit codes are the
same both ways; ``python -m nexrl`` is this command too.
"""

from __future__ import annotations

import sys

COMMANDS = ("train", "dashboard", "new-task", "training-service")
YAML = (".yaml", ".yml")
USAGE = (
    "usage: nexrl {train,dashboard,new-task,training-service} ... | nexrl -c RECIPE.yaml [...] | nexrl --version\n"
    "  train RECIPE.yaml [key=value ...]  train (options: nexrl train --help)\n"
    "  dashboard RUN_FOLDER               serve a run folder's /nexrl page\n"
    "  new-task FOLDER                    scaffold a task: data script, evaluator, recipe\n"
    "  training-service RECIPE.yaml       serve the recipe's trainer over HTTP\n"
)


def version() -> str:
    """The installed distribution's version, else the source tree's ``__version__``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("nexrl")
    except PackageNotFoundError:
        from nexrl import __version__

        return __version__


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="", file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"nexrl {version()}")
        return 0
    command, rest = (args[0], args[1:]) if args[0] in COMMANDS else ("train", args)
    implied = command == "train" and args[0] != "train"
    word = args[0]  # `nexrl trian x.yaml`: neither a flag, an override nor a recipe
    if implied and not word.startswith("-") and "=" not in word and not word.endswith(YAML):
        print(
            f"error: {word!r} is neither a command ({', '.join(COMMANDS)}) nor a "
            f"recipe (.yaml)\n{USAGE}",
            end="",
            file=sys.stderr,
        )
        return 2
    if command == "training-service":
        from nexrl.driver.cli.training_service import main as training_service

        return training_service(rest)
    if command == "dashboard":
        from nexrl.driver.cli.dashboard import main as dashboard

        return dashboard(rest)
    from nexrl.driver.cli.train import main as train

    if command == "new-task":
        if len(rest) != 1 or rest[0].startswith("-"):
            print("usage: nexrl new-task FOLDER   (e.g. nexrl new-task my_task)", file=sys.stderr)
            return 2
        return train(["--new-task", rest[0]])
    return train(rest)


if __name__ == "__main__":
    sys.exit(main())
