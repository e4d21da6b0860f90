"""The extension points: one way in for every part a recipe selects.

* ``nexrl.core.plugins.registry``: ``Registry``, one per kind of part; a recipe field
  takes a registered name or the user's ``path/to/file.py:Name`` /
  ``package.module:Name``.
* ``nexrl.core.plugins.specs``: loading ``path/to/file.py:Name`` and the recipe's
  ``plugins:`` files and modules (imported in every process of a run, so what
  they register is known everywhere).
"""

from nexrl.core.config.paths import resolve_path
from nexrl.core.plugins.registry import (
    ENTRY_POINT_GROUP,
    Registry,
    UnknownNameError,
    is_spec,
    load_builtin_plugins,
)
from nexrl.core.plugins.specs import (
    import_file,
    import_plugins,
    load_object,
    load_plugins,
    load_spec,
    resolve_plugins,
    split_spec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Registry",
    "UnknownNameError",
    "import_file",
    "import_plugins",
    "is_spec",
    "load_builtin_plugins",
    "load_object",
    "load_plugins",
    "load_spec",
    "resolve_path",
    "resolve_plugins",
    "split_spec",
]
