"""A package's names loaded on first use (PEP 562), so importing the package stays light.

    __getattr__ = lazy_names(__name__, {"InferenceClient": "client", ...})

``package.InferenceClient`` then imports ``package.client`` the first time it is
read and keeps the value in the package.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``homes`` comes from its
    submodule (``homes[name]``, relative to ``package``)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
