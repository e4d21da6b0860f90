"""User classes and functions by ``path/to/file.py:Name``, and a recipe's ``plugins:``.

Every user-supplied class or function is named in one form,
``path/to/file.py:Name`` (a recipe path: looked up in the working directory,
then in the recipe's folder) or ``package.module:Name`` (importable):
``rollout_worker.evaluator``, ``rollout_worker.custom_worker``,
``trainer.custom_trainer``, ``rollout_worker.agent_entrypoint`` and the tool
bindings of an agent config. ``split_spec`` splits it, ``load_spec`` /
``load_object`` import it with errors that name the field, the file and the fix.

A recipe's ``plugins:`` are Python files or modules imported in every process of
a run. Importing a plugin runs its registrations (``@ADVANTAGE_ESTIMATORS.register("name")``
and the like), so what it adds can be named in the recipe: the driver imports the
plugins before the recipe's cross-field checks, and every Dask worker (trainer
actors included, and workers that join later) imports them through
``nexrl.core.process.worker_plugin``.

A plugin entry is a file, ``path/to/file.py``, or an importable module,
``package.module``. ``resolve_plugins`` turns the entries into what every process
imports (absolute file paths, module names); ``import_plugins`` imports them, in
order, in this process. A file is imported once per process, under the module
name ``import_file`` gives it (the one an evaluator file gets too), so importing
twice registers nothing twice.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexrl.core.config.errors import RecipeError
from nexrl.core.config.paths import did_you_mean_path, resolve_path

__all__ = [
    "import_file",
    "import_plugins",
    "load_object",
    "load_plugins",
    "load_spec",
    "resolve_plugins",
    "split_spec",
]


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


# -- user classes and functions: 'path/to/file.py:Name' or 'package.module:Name' --
def split_spec(spec: str, field: str) -> tuple[str, str]:
    """``"a/b.py:Cls"`` -> ``("a/b.py", "Cls")`` (``"pkg.mod:Cls"`` -> ``("pkg.mod", "Cls")``);
    a clear error otherwise."""
    file, sep, name = str(spec).rpartition(":")
    if not sep or not file or not name.isidentifier():
        raise RecipeError(
            [
                f"{field}: '{spec}' is not 'path/to/file.py:ClassName' (file, a colon, a class) "
                "or 'package.module:ClassName'"
            ]
        )
    return file, name


def load_spec(spec: str, roots: Sequence[Path], field: str) -> Any:
    """The object ``spec`` (``path/to/file.py:Name`` or ``package.module:Name``) names."""
    return load_object(*split_spec(spec, field), roots, field)


def load_object(file: str, name: str, roots: Sequence[Path], field: str) -> Any:
    """Import ``file`` (searched under ``roots``; or a module ``package.module``) and
    return its attribute ``name``.

    The file's folder goes on ``sys.path`` first, so it can import its
    neighbours (an agent workspace). Errors name the field, the file and the fix.
    """
    if not _is_file(file) and _is_module_name(file):
        _import_module(file, field)
        module: Any = sys.modules[file]
        where = f"module '{file}'"
    else:
        path = resolve_path(file, roots)
        if path is None or not path.is_file():
            tried = ", ".join(str(r / file) for r in roots)
            hint = did_you_mean_path(file, roots)
            raise RecipeError([f"{field}: file '{file}' not found (looked in: {tried}){hint}"])
        module = import_file(path, field)
        where = f"'{path}'"
    if not hasattr(module, name):
        found = sorted(
            n
            for n, v in vars(module).items()
            if inspect.isclass(v) and not n.startswith("_") and v.__module__ == module.__name__
        )
        hint = f"; classes defined there: {', '.join(found)}" if found else ""
        raise RecipeError([f"{field}: {where} defines no '{name}'{hint}"])
    return getattr(module, name)


def import_file(path: Path, field: str) -> Any:
    """The module of the Python file ``path`` (absolute), imported on first use.

    The module is named ``nexrl_user_<stem>_<hash of the path>`` so every field
    (and every process) naming the file gets the same module; a file that fails
    to import raises a one-line ``RecipeError`` naming ``field``, the file and the cause.
    """
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    mod_name = f"nexrl_user_{path.stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[mod_name]
        raise RecipeError([f"{field}: syntax error in {path}:{exc.lineno}: {exc.msg}"]) from None
    except Exception as exc:
        del sys.modules[mod_name]
        raise RecipeError(
            [f"{field}: importing {path} failed: {type(exc).__name__}: {_first_line(exc)}"]
        ) from None
    return module


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""
