"""Check a composed recipe against the schema and report every problem at once.

Checks, per field: unknown keys (with "did you mean"), missing required
values, unresolvable interpolations, wrong types, ``choices``, ``minimum`` and
``path`` metadata (see ``nexrl.core.config.fields``), and keys that were renamed
(one line naming the new key; the table is in ``nexrl.core.config.renames``, and
``load_recipe_checked`` moves old keys to their new ones before this check, so
only a config checked directly still has them). Cross-field checks live with
their components (``nexrl.core.config.checks``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from nexrl.core.config.paths import did_you_mean_path, is_pattern, resolve_path
from nexrl.core.config.renames import new_key_of

_MISSING_MARK = object()


def renamed(path: str) -> str | None:
    """The one-line problem for a renamed key still in the recipe, or None. A recipe
    loaded with ``load_recipe_checked`` has its old keys moved first
    (``nexrl.core.config.renames.migrate``), so this names the ones a caller that checks a
    config directly still has."""
    found = new_key_of(path)
    if found is None:
        return None
    new, how = found
    return f"{path} was renamed: set {new}" + (f" ({how})" if how else "")


def schema_leaves(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """Every (dotted path, field) of a schema dataclass, depth first."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield path, f
            yield from schema_leaves(typing.cast(type, tp), f"{path}.")
        else:
            yield path, f


def structure_problems(cls: type, node: DictConfig, roots: list[Path]) -> list[tuple[str, str]]:
    """``(dotted path, problem)`` for every structure problem of ``node``."""
    all_paths = [p for p, _ in schema_leaves(cls)]
    problems: list[tuple[str, str]] = []
    mode = node.get("mode", "rl") if isinstance(node, DictConfig) else "rl"
    _walk(cls, node, "", roots, problems, all_paths, str(mode))
    return problems


def _depth(path: str) -> int:
    return path.count(".")


def _suggest(key: str, prefix: str, siblings: list[str], all_paths: list[str]) -> str:
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{prefix}{close[0]}'?"
    # The same name in another section ("lr" written under algorithm).
    # The shallowest first: 'trainer.lr' before 'model.tiny.warm_start.lr'.
    elsewhere = sorted((p for p in all_paths if p.rsplit(".", 1)[-1] == key), key=_depth)
    if elsewhere:
        more = "".join(f" (or '{p}')" for p in elsewhere[1:3])
        return f"; did you mean '{elsewhere[0]}'{more}?"
    return f"; valid keys here: {', '.join(siblings)}"


def _walk(
    cls: type,
    node: DictConfig,
    prefix: str,
    roots: list[Path],
    out: list[tuple[str, str]],
    all_paths: list[str],
    mode: str = "rl",
) -> None:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in map(str, node):
        if key not in fields:
            where = prefix.rstrip(".") or "the recipe"
            path = f"{prefix}{key}"
            problem = renamed(path) or (
                f"{path}: unknown key in {where}" + _suggest(key, prefix, list(fields), all_paths)
            )
            out.append((path, problem))
    for name, f in fields.items():
        path = f"{prefix}{name}"
        value = _get(node, name, path, out)
        if value is _MISSING_MARK:
            if _is_required(f) and not (mode != "rl" and f.metadata.get("rl_only")):
                out.append(
                    (path, f"{path}: required field is missing ({f.metadata.get('help', '')})")
                )
            continue
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            if isinstance(value, DictConfig):
                _walk(typing.cast(type, tp), value, f"{path}.", roots, out, all_paths, mode)
            else:
                out.append((path, f"{path}: expected a mapping of settings, got {value!r}"))
            continue
        err = _type_error(tp, value)
        if err:
            out.append((path, f"{path}: {err}"))
            continue
        out.extend((path, p) for p in _metadata_problems(path, f, value, roots))


def _get(node: DictConfig, name: str, path: str, out: list[tuple[str, str]]) -> Any:
    if name not in node or OmegaConf.is_missing(node, name):
        return _MISSING_MARK
    try:
        value = node[name]
        if isinstance(value, ListConfig):
            return OmegaConf.to_container(value, resolve=True)
        return value
    except Exception as exc:  # interpolation to a missing key, bad resolver, ...
        msg = str(exc).splitlines()[0]
        out.append((path, f"{path}: cannot resolve its value: {msg}"))
        return _MISSING_MARK


def _is_required(f: dataclasses.Field[Any]) -> bool:
    return f.default == "???" and f.default_factory is dataclasses.MISSING


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


_SCALAR_CHECKS: dict[type, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: (isinstance(v, int | float) and not isinstance(v, bool)) or _is_num_str(v),
    str: lambda v: isinstance(v, str | int | float) and not isinstance(v, bool),
}


def _is_num_str(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        float(v)
    except ValueError:
        return False
    return True


def _type_error(tp: Any, value: Any) -> str | None:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _type_error(args[0], value) if len(args) == 1 else None
    if value is None:
        return f"expected {_type_name(tp)}, got null"
    if origin is list:
        if not isinstance(value, list):
            return f"expected a list, got {value!r}"
        (item_tp,) = typing.get_args(tp)
        for i, item in enumerate(value):
            err = _type_error(item_tp, item)
            if err:
                return f"item {i}: {err}"
        return None
    if origin is dict or tp is dict:
        return (
            None if isinstance(value, DictConfig | dict) else f"expected a mapping, got {value!r}"
        )
    check = _SCALAR_CHECKS.get(tp)
    if check is not None and not check(value):
        return f"expected {_type_name(tp)}, got {value!r} ({type(value).__name__})"
    if tp is float and not math.isfinite(float(value)):  # nan and inf pass every minimum
        return f"expected a finite number, got {value}"
    return None


def _metadata_problems(
    path: str, f: dataclasses.Field[Any], value: Any, roots: list[Path]
) -> list[str]:
    out: list[str] = []
    choices = f.metadata.get("choices")
    if choices and value is not None and value not in choices:
        close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        out.append(f"{path}: '{value}' is not one of {', '.join(choices)}{hint}")
    minimum = f.metadata.get("minimum")
    if minimum is not None and _is_number(value) and float(value) < minimum:
        out.append(f"{path}: must be >= {minimum}, got {value}")
    if f.metadata.get("path") and value:
        for item in value if isinstance(value, list) else [value]:
            if resolve_path(str(item), roots) is None:
                tried = " or ".join(str(r) for r in roots)
                if is_pattern(str(item)):  # (the loader expanded the ones that match)
                    out.append(f"{path}: '{item}' matches no file (looked up in {tried})")
                    continue
                out.append(
                    f"{path}: '{item}' does not exist (relative paths are looked up in "
                    f"{tried})"
                    + (did_you_mean_path(str(item), roots) or "; fix the path or create the file")
                )
    return out


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and (isinstance(v, int | float) or _is_num_str(v))
