"""``Registry``: a name -> implementation mapping filled by a decorator.

Every part a recipe selects by name is one: the algorithms
(``nexrl.algorithms``), trainer types (``nexrl.trainer.registry.TRAINERS``),
metric sinks (``nexrl.metrics.METRIC_SINKS``) and evaluators
(``nexrl.evaluators.EVALUATORS``). A plugin (the recipe's
``plugins:`` files, imported in every process) adds entries with
``REGISTRY.register("name")``. An unknown name raises :class:`UnknownNameError`
with the closest valid name and the full list.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, cast

from nexrl.errors import NexrlError

T = TypeVar("T")
_Obj = TypeVar("_Obj")

__all__ = ["Registry", "UnknownNameError"]


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

    >>> colours: Registry[int] = Registry("colour")
    >>> _ = colours.register("red")(1)
    >>> colours.get("red")
    1
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[_Obj], _Obj]:
        """Decorator registering its target under ``name`` (returned unchanged).

        The target keeps its own static type (so a decorated function keeps its
        signature for type checkers). Registering a name twice raises ``ValueError``.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(obj: _Obj) -> _Obj:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = cast(T, obj)
            return obj

        return decorator

    def get(self, name: str) -> T:
        """The entry registered as ``name``; :class:`UnknownNameError` if none."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(self.kind, str(name), self.names()) from None

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"
