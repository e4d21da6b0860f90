"""Resolve recipe paths and load user classes named as ``path/to/file.py:ClassName``.

A user file is imported once per process, under a module name derived from its
absolute path (``import_file``), however many fields name it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexrl.config.errors import RecipeError


def resolve_path(value: str, roots: Sequence[Path]) -> Path | None:
    """The first existing ``roots[i] / value`` (or ``value`` itself when absolute)."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return p if p.exists() else None
    for root in roots:
        if (root / p).exists():
            return (root / p).resolve()
    return None


def split_spec(spec: str, field: str) -> tuple[str, str]:
    """``"a/b.py:Cls"`` -> ``("a/b.py", "Cls")``; a clear error otherwise."""
    file, sep, name = spec.rpartition(":")
    if not sep or not file or not name.isidentifier():
        raise RecipeError(
            [f"{field}: '{spec}' is not 'path/to/file.py:ClassName' (file, a colon, a class)"]
        )
    return file, name


def load_object(file: str, name: str, roots: Sequence[Path], field: str) -> Any:
    """Import ``file`` (searched under ``roots``) and return its attribute ``name``.

    The file's folder goes on ``sys.path`` first, so it can import its
    neighbours (an agent workspace). Errors name the field, the file and the fix.
    """
    path = resolve_path(file, roots)
    if path is None or not path.is_file():
        tried = ", ".join(str(r / file) for r in roots)
        raise RecipeError([f"{field}: file '{file}' not found (looked in: {tried})"])
    module = import_file(path, field)
    if not hasattr(module, name):
        found = sorted(
            n
            for n, v in vars(module).items()
            if inspect.isclass(v) and not n.startswith("_") and v.__module__ == module.__name__
        )
        hint = f"; classes defined there: {', '.join(found)}" if found else ""
        raise RecipeError([f"{field}: '{path}' defines no '{name}'{hint}"])
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
