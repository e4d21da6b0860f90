"""``Registry``: the one way in for every part a recipe selects.

Each kind of part (rollout-worker type, evaluator, trainer, training engine,
inference server and reload adapter, cluster type, metric sink, algorithm
piece) has one ``Registry``. A recipe field of that kind takes either

* a **registered name** (``simple``, ``deepspeed``, ``grpo``): built-ins and
  plugins register themselves with ``@REGISTRY.register("name")``, or, for a
  heavy implementation imported only when a recipe picks it,
  ``REGISTRY.register_lazy("name", "package.module:Name")``; or
* a **class or function of the user's**, ``path/to/file.py:Name`` or
  ``package.module:Name`` (``nexrl.core.plugins.specs.load_spec``), checked against
  the kind's base class.

Engines in ``backends`` (and pip-installed plugins) fill these registries;
``nexrl`` never imports them. ``load_builtin_plugins`` imports every module of
the ``nexrl.core.plugins`` entry-point group and the repository's own
``backends.register`` (when importable) once per process; a lookup of a name not yet known
does it first, so any process (driver, Dask worker, trainer actor, the training
service) sees the same entries. An unknown name raises
:class:`UnknownNameError` with the closest valid name and the full list.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, cast

from nexrl.core.config.errors import RecipeError
from nexrl.core.errors import NexrlError

T = TypeVar("T")
_Obj = TypeVar("_Obj")

__all__ = [
    "ENTRY_POINT_GROUP",
    "Registry",
    "UnknownNameError",
    "is_spec",
    "load_builtin_plugins",
]

# Plugins a pip-installed package declares: ``[project.entry-points."nexrl.plugins"]``.
ENTRY_POINT_GROUP = "nexrl.plugins"
# Modules imported as plugins when present: the repository's engines register
# themselves there (``backends/register.py``), as an installed plugin would.
DEFAULT_PLUGIN_PACKAGES: tuple[str, ...] = ("backends.register",)

_BUILTINS_LOCK = threading.Lock()
_BUILTINS_LOADED = False


def load_builtin_plugins() -> None:
    """Import the ``nexrl.core.plugins`` entry points and ``DEFAULT_PLUGIN_PACKAGES`` once
    per process (a package that is not installed is skipped)."""
    global _BUILTINS_LOADED
    with _BUILTINS_LOCK:
        if _BUILTINS_LOADED:
            return
        _BUILTINS_LOADED = True
        for name in DEFAULT_PLUGIN_PACKAGES:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is None or not name.startswith(exc.name):
                    raise
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            ep.load()


def is_spec(value: object) -> bool:
    """True for ``path/to/file.py:Name`` / ``package.module:Name`` (a colon), False
    for a registered name."""
    return isinstance(value, str) and ":" in value


class UnknownNameError(KeyError, ValueError, NexrlError):
    """A name that is not registered; both a ``KeyError`` and a ``ValueError``."""

    def __init__(self, kind: str, name: str, valid: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = valid
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f" did you mean {close[0]!r}?" if close else ""
        choices = ", ".join(repr(v) for v in valid) or "(none registered)"
        self.message = f"unknown {kind} {name!r};{hint} valid names: {choices}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError.__str__ would repr() the message
        return self.message


class Registry(Generic[T]):
    """A named mapping ``name -> T`` filled with the :meth:`register` decorator.

    ``base``: the class every entry of a class kind derives from (a user's
    ``file.py:Name`` is checked against it); None for a kind of functions.
    ``field``: the recipe field the kind is picked by (in error messages).

    >>> colours: Registry[int] = Registry("colour")
    >>> _ = colours.register("red")(1)
    >>> colours.get("red")
    1
    """

    # every registry, by kind: the developer guide's list and ``nexrl train --list``
    ALL: ClassVar[dict[str, Registry[Any]]] = {}

    def __init__(self, kind: str, *, base: type | None = None, field: str | None = None) -> None:
        self.kind = kind
        self.base = base
        self.field = field or kind
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        Registry.ALL[kind] = self

    def register(self, name: str) -> Callable[[_Obj], _Obj]:
        """Decorator registering its target under ``name`` (returned unchanged).

        The target keeps its own static type (so a decorated function keeps its
        signature for type checkers). Registering a name twice raises ``ValueError``.
        """
        self._check_new(name)

        def decorator(obj: _Obj) -> _Obj:
            self._check_new(name)
            self._entries[name] = cast(T, obj)
            return obj

        return decorator

    def register_lazy(self, name: str, target: str) -> None:
        """Register ``target`` (``package.module:Name``) as ``name``, imported on first
        :meth:`get`: a heavy engine costs nothing until a recipe picks it."""
        self._check_new(name)
        if not is_spec(target) or "/" in target:
            raise ValueError(f"{self.kind} {name!r}: lazy target must be 'package.module:Name'")
        self._lazy[name] = target

    def _check_new(self, name: str) -> None:
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(
                f"{self.kind} name must be a non-empty string without ':', got {name!r}"
            )
        if name in self._entries or name in self._lazy:
            raise ValueError(f"{self.kind} {name!r} is already registered")

    def get(self, name: str, *, roots: Sequence[str | Path] = (), field: str | None = None) -> T:
        """The entry registered as ``name``, or the user's ``file.py:Name`` /
        ``package.module:Name`` (files looked up under ``roots``, else the working
        directory); :class:`UnknownNameError` for an unknown name, ``RecipeError``
        naming ``field`` for a spec that cannot be loaded or is not of this kind."""
        key = str(name)
        if key in self._entries:
            return self._entries[key]
        if key in self._lazy:
            return self._import_lazy(key, field)
        if is_spec(key):
            return self._load_spec(key, roots, field or self.field)
        load_builtin_plugins()
        if key in self._entries or key in self._lazy:
            return self.get(key, field=field)
        raise UnknownNameError(self.kind, key, self.names())

    def _import_lazy(self, name: str, field: str | None) -> T:
        module_name, _, attr = self._lazy[name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RecipeError(
                [
                    f"{field or self.field}: {self.kind} '{name}' cannot be imported "
                    f"({module_name}: {exc}); install its packages or pick another"
                ]
            ) from None
        obj = cast(T, getattr(module, attr))
        self._entries[name] = obj
        return obj

    def _load_spec(self, spec: str, roots: Sequence[str | Path], field: str) -> T:
        from nexrl.core.plugins.specs import load_spec

        search = [Path(r) for r in roots] or [Path.cwd()]
        obj = load_spec(spec, search, field)
        problem = self.problem(obj)
        if problem:
            raise RecipeError([f"{field}: '{spec}' {problem}"])
        return cast(T, obj)

    def problems(
        self, value: Any, roots: Sequence[str | Path], field: str | None = None
    ) -> list[str]:
        """The recipe check of a field of this kind: a registered name (not imported:
        a lazy engine stays unimported) or a loadable spec of the right kind; else one
        line naming the field, the closest name and the valid ones."""
        where = field or self.field
        if value not in self:
            load_builtin_plugins()
        if value in self:
            return []
        try:
            self.get(str(value), roots=roots, field=where)
        except UnknownNameError as exc:
            return [f"{where}: {exc} (or 'path/to/file.py:Name')"]
        except RecipeError as exc:
            return list(exc.problems)
        return []

    def problem(self, obj: Any) -> str | None:
        """Why ``obj`` cannot be an entry of this kind, or None."""
        if self.base is not None:
            if not (inspect.isclass(obj) and issubclass(obj, self.base)):
                what = "class" if inspect.isclass(obj) else type(obj).__name__
                return (
                    f"is a {what} that does not subclass "
                    f"{self.base.__module__}.{self.base.__qualname__}"
                )
        elif not callable(obj):
            return f"is a {type(obj).__name__}, not a function or class"
        return None

    def names(self) -> list[str]:
        """The names registered so far (lazy ones included), sorted. Built-in plugins
        are loaded by a lookup that misses (``get``, ``problems``), never here: a module
        may list a registry's names while it is being imported."""
        return sorted({*self._entries, *self._lazy})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._lazy)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"
