"""A recipe's ``plugins:``: Python files or modules imported in every process of a run.

Importing a plugin runs its registrations (``@ADVANTAGE_ESTIMATORS.register("name")``
and the like), so what it adds can be named in the recipe: the driver imports the
plugins before the recipe's cross-field checks, and every Dask worker (trainer
actors included, and workers that join later) imports them through
``nexrl.runtime.worker_plugin``.

An entry is a file, ``path/to/file.py`` (a recipe path: looked up in the working
directory, then in the recipe's folder), or an importable module,
``package.module``. ``resolve_plugins`` turns the entries into what every process
imports (absolute file paths, module names); ``import_plugins`` imports them, in
order, in this process. A file is imported once per process, under the module
name ``nexrl.config.modules.import_file`` gives it (the one an evaluator file
gets too), so importing twice registers nothing twice.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from nexrl.config.errors import RecipeError
from nexrl.config.modules import import_file, resolve_path

__all__ = ["import_plugins", "load_plugins", "resolve_plugins"]


def _field(i: int) -> str:
    return f"plugins[{i}]"


def _is_file(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry or "\\" in entry


def _is_module_name(entry: str) -> bool:
    return bool(entry) and all(part.isidentifier() for part in entry.split("."))


def resolve_plugins(entries: Sequence[str], roots: Sequence[Path]) -> tuple[str, ...]:
    """Each entry as an absolute file path or a module name; a ``RecipeError``
    listing every entry that is neither an existing file nor a module name."""
    out: list[str] = []
    problems: list[str] = []
    for i, entry in enumerate(map(str, entries)):
        if _is_file(entry):
            path = resolve_path(entry, roots)
            if path is None or not path.is_file():
                tried = " or ".join(str(r) for r in roots)
                problems.append(
                    f"{_field(i)}: file '{entry}' not found (relative paths are looked up in "
                    f"{tried})"
                )
            else:
                out.append(str(path.resolve()))
        elif _is_module_name(entry):
            out.append(entry)
        else:
            problems.append(
                f"{_field(i)}: '{entry}' is neither a file 'path/to/file.py' "
                "nor a module 'package.module'"
            )
    if problems:
        raise RecipeError(problems)
    return tuple(out)


def import_plugins(resolved: Sequence[str]) -> None:
    """Import ``resolved`` (from ``resolve_plugins``) in order, in this process.

    The first that fails raises a one-line ``RecipeError`` naming ``plugins[i]``,
    the file or module and the cause.
    """
    for i, spec in enumerate(resolved):
        if _is_file(spec):
            import_file(Path(spec), _field(i))
        else:
            _import_module(spec, _field(i))


def load_plugins(entries: Sequence[str], roots: Sequence[Path]) -> tuple[str, ...]:
    """Resolve and import a recipe's plugins here; what the workers must import."""
    resolved = resolve_plugins(entries, roots)
    import_plugins(resolved)
    return resolved


def _import_module(name: str, field: str) -> None:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise RecipeError(
                [
                    f"{field}: no module named '{exc.name}' (a module must be importable "
                    "from the Python path; name a file as 'path/to/file.py')"
                ]
            ) from None
        raise RecipeError(
            [f"{field}: importing module '{name}' failed: {_one_line(exc)}"]
        ) from None
    except Exception as exc:
        raise RecipeError(
            [f"{field}: importing module '{name}' failed: {_one_line(exc)}"]
        ) from None


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
