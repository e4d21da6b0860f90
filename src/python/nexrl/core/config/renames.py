"""Renamed recipe keys: the table, and the migration that keeps old recipes working.

``RENAMED`` maps an old key to its new key (the same value); ``MERGED`` maps a
new ``'path/to/file.py:ClassName'`` key to the two old keys (file or module,
class name) it replaces. ``migrate`` runs on the composed recipe before the
structure check: each old key present is moved to its new key (its value
resolved first, so ``data.rollout_repeat_n: ${trajectory_pool.group_size}``
still reads the old key it points at), and one deprecation line is returned
per old key (per pair for a merge)::

    data.rollout_repeat_n is deprecated: set rollout_worker.group_size (the old key still works for now)

Two old keys (or an old and the new key) that give one new key different
values, and half of a pair, are problems, one line each; a key set on the
command line wins over the recipe files, as in Hydra. A key that is renamed
goes in one of the two tables; ``docs/config-reference.md`` (generated) lists
them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, cast

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["MERGED", "RENAMED", "SPEC", "Migration", "migrate", "new_key_of"]

SPEC = "'path/to/file.py:ClassName', file and class in one value"

# Old key -> new key, value unchanged. Only NexRL's own documented keys: keys this
# project introduced and later renamed were never released and are not kept.
RENAMED: dict[str, str] = {
    "data.rollout_repeat_n": "rollout_worker.group_size",
    "trajectory_pool.group_size": "rollout_worker.group_size",
    "rollout_worker.evaluator_module_path": "rollout_worker.evaluator",
    "rollout_worker.num_workers": "rollout_worker.max_groups_in_flight",
    "trainer.save_freq": "trainer.save_every",
    "validate.freq": "validate.every",
}

# New key ('file.py:Class') -> (old file-or-module key, old class-name key).
MERGED: dict[str, tuple[str, str]] = {
    "rollout_worker.custom_worker": (
        "rollout_worker.custom_rollout_worker_module_path",
        "rollout_worker.custom_rollout_worker_class_name",
    ),
    "trainer.custom_trainer": (
        "trainer.custom_trainer_module_path",
        "trainer.custom_trainer_class_name",
    ),
}

_STILL = "(the old key still works for now)"
_STILL_PAIR = "(the old keys still work for now)"
_UNSET = object()


def new_key_of(old: str) -> tuple[str, str] | None:
    """``(new key, how to write it)`` for an old key, or None."""
    if old in RENAMED:
        return RENAMED[old], ""
    for new, pair in MERGED.items():
        if old in pair:
            return new, SPEC
    return None


@dataclass(frozen=True)
class Migration:
    """The recipe with its old keys moved, one deprecation line per old key (or
    pair), and ``(new key, problem)`` for each old key that could not be moved."""

    cfg: DictConfig
    deprecations: tuple[str, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()


def migrate(cfg: DictConfig, overridden: Collection[str] = ()) -> Migration:
    """Move every old key of the composed ``cfg`` to its new key (see the module doc).

    ``overridden``: the keys set on the command line; as in Hydra, they win over the
    recipe files (``trainer.save_every=5`` over a file's ``save_freq: 10``, and the
    other way round), so only values from the same level can disagree. ``cfg`` is
    returned as is when it has no old key; otherwise a new config without them.
    Interpolations that name an old key (``${trainer.save_freq}``) are pointed at
    the new key."""
    data = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False))
    olds = [*RENAMED, *(k for pair in MERGED.values() for k in pair)]
    present = [old for old in olds if _has(data, old)]
    if not present:
        return Migration(cfg)
    problems: list[tuple[str, str]] = []
    # Every old value read (resolved) before any old key is removed: one old key
    # commonly interpolates another (rollout_repeat_n: ${trajectory_pool.group_size}).
    values: dict[str, Any] = {}
    for old in present:
        value = _resolved(cfg, old)
        if isinstance(value, Exception):
            problems.append((old, f"{old}: cannot resolve its value: {_first_line(value)}"))
        else:
            values[old] = value
    news = {new: _resolved(cfg, new) if _has(data, new) else _UNSET for new in _all_new()}
    for old in present:
        _pop(data, old)

    cmd = set(overridden)
    deprecations: list[str] = []

    def settle(new: str, given: dict[str, Any], from_cmd: set[str], blank: bool = False) -> None:
        """Put the value ``given`` (old key(s) -> value) means for ``new``, or a problem."""
        value, problem = _settle(new, given, from_cmd, news[new], new in cmd, blank)
        if problem:
            problems.append((new, problem))
        elif value is not _UNSET:
            _put(data, new, value)

    for new in dict.fromkeys(RENAMED.values()):
        given = {old: values[old] for old in RENAMED if RENAMED[old] == new and old in values}
        if not given:
            continue
        deprecations.extend(f"{old} is deprecated: set {new} {_STILL}" for old in given)
        settle(new, given, {old for old in given if old in cmd})
    for new, (path_key, class_key) in MERGED.items():
        if path_key not in present and class_key not in present:
            continue
        if any(k in present and k not in values for k in (path_key, class_key)):
            continue  # its value does not resolve: already a problem
        path, name = values.get(path_key), values.get(class_key)
        if _blank(path) and _blank(name):  # both null: nothing to move
            deprecations.append(
                f"{path_key} and {class_key} are deprecated: set {new} ({SPEC}) {_STILL_PAIR}"
            )
        elif _blank(path) or _blank(name):
            one, other = (class_key, path_key) if _blank(path) else (path_key, class_key)
            problems.append(
                (
                    new,
                    f"{new}: {one} is set but {other} is not; the two old keys go "
                    f"together and are replaced by one: set {new} ({SPEC})",
                )
            )
        else:
            spec = f"{path}:{name}"
            deprecations.append(
                f"{path_key} and {class_key} are deprecated: set {new}: '{spec}' {_STILL_PAIR}"
            )
            label = f"{path_key} + {class_key}"
            settle(
                new, {label: spec}, {label} if {path_key, class_key} & cmd else set(), blank=True
            )
    _repoint(data)
    return Migration(OmegaConf.create(data), tuple(deprecations), tuple(problems))


def _all_new() -> list[str]:
    return list(dict.fromkeys([*RENAMED.values(), *MERGED]))


def _settle(
    new: str,
    given: dict[str, Any],
    from_cmd: set[str],
    current: Any,
    new_from_cmd: bool,
    blank: bool,
) -> tuple[Any, str | None]:
    """``(value for new, None)``, ``(_UNSET, None)`` to keep ``new`` as it is, or
    ``(_UNSET, problem)`` when the values meant for ``new`` disagree."""
    if new_from_cmd and current is not _UNSET:
        return _UNSET, None  # the new key on the command line wins
    if from_cmd:  # old keys on the command line win over the files
        given = {k: v for k, v in given.items() if k in from_cmd}
        current = _UNSET
    named = dict(given)
    known = current is not _UNSET and not isinstance(current, Exception)
    if known and not (blank and _blank(current)):
        named[new] = current
    if len({repr(v) for v in named.values()}) > 1:
        listed = " and ".join(f"{k} ({v!r})" for k, v in named.items())
        return _UNSET, (
            f"{new}: {listed} give it different values; set {new} once, to the value "
            "you mean, and remove the old names"
        )
    return next(iter(given.values())), None


def _blank(value: Any) -> bool:
    return value is None or value == ""


def _resolved(cfg: DictConfig, key: str) -> Any:
    """The resolved value of ``key`` (plain Python), or the exception resolving it raised."""
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=True, throw_on_resolution_failure=True)
        if isinstance(value, DictConfig | ListConfig):
            return OmegaConf.to_container(value, resolve=True)
        return value
    except Exception as exc:  # interpolation to a missing key, '???', a bad resolver
        return exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _has(data: Any, key: str) -> bool:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def _pop(data: Any, key: str) -> None:
    *parents, last = key.split(".")
    for part in parents:
        data = data[part]
    data.pop(last)


def _put(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def _repoint(data: Any) -> None:
    """``${old.key}`` in any remaining value becomes ``${new.key}`` (1:1 renames)."""
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for k, v in list(items):
        if isinstance(v, dict | list):
            _repoint(v)
        elif isinstance(v, str) and "${" in v:
            for old, new in RENAMED.items():
                v = v.replace("${" + old + "}", "${" + new + "}")
            data[k] = v
