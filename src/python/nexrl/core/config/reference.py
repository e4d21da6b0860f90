"""Render the configuration reference (``docs/config-reference.md``) from the schema.

    ./pants run src/python/nexrl/core/config/reference.py > docs/config-reference.md

A test checks the committed file equals this output, so the doc cannot drift.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from nexrl.core.config.renames import MERGED, RENAMED
from nexrl.core.config.schema import RecipeConfig
from nexrl.core.config.structure import schema_leaves

HEADER = """# Configuration reference

Generated from the typed schema in `src/python/nexrl/core/config/` (each field's
help text is written once, next to the field). Regenerate with

    ./pants run src/python/nexrl/core/config/reference.py > docs/config-reference.md

`required` fields have no default. Relative paths are looked up in the working
directory first, then in the recipe's folder.
"""


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return ""
        return f"`{value}`"
    if f.default == "???":
        return "required"
    return "`null`" if f.default is None else f"`{f.default}`"


def _type(tp: Any) -> str:
    if typing.get_origin(tp) is None:
        return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in typing.get_args(tp))
    return str(tp).replace("typing.", "")


def render() -> str:
    lines = [HEADER]
    top: list[str] = []
    for path, f in schema_leaves(RecipeConfig):
        hints = typing.get_type_hints(_owner(path))
        tp = hints[path.rsplit(".", 1)[-1]]
        if dataclasses.is_dataclass(tp):
            if "." not in path:
                lines.append(f"\n## `{path}`\n\n{f.metadata['help']}\n")
                lines.append("| field | type | default | meaning |\n| --- | --- | --- | --- |")
            else:
                lines.append(f"| **`{path}`** | | | {f.metadata['help']} |")
            continue
        extra = ""
        if f.metadata.get("choices"):
            extra = " One of: " + ", ".join(f"`{c}`" for c in f.metadata["choices"]) + "."
        if f.metadata.get("registry"):
            extra = (
                f" Takes a registered {f.metadata['registry']} name or `path/to/file.py:Name` "
                "(developer guide, 'One way in')."
            )
        row = f"| `{path}` | {_type(tp)} | {_default(f)} | {f.metadata['help']}{extra} |"
        if "." not in path:
            top.append(row)
        else:
            lines.append(row)
    head = ["\n## Top level\n", "| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    return "\n".join([lines[0], *head, *top, *lines[1:], *_renamed()]) + "\n"


def _renamed() -> list[str]:
    """The renamed keys: they still work, with a deprecation warning."""
    rows = [
        "\n## Renamed keys\n",
        "An old key still works for now: its value goes to the new key, with one",
        "deprecation warning per old key (`nexrl.core.config.renames`).\n",
        "| old key | new key |",
        "| --- | --- |",
    ]
    rows += [f"| `{old}` | `{new}` |" for old, new in RENAMED.items()]
    rows += [
        f"| `{a}` + `{b}` | `{new}`, one value: `<{a.rsplit('.', 1)[1]}>:<{b.rsplit('.', 1)[1]}>` |"
        for new, (a, b) in MERGED.items()
    ]
    return rows


def _owner(path: str) -> type:
    cls: type = RecipeConfig
    for part in path.split(".")[:-1]:
        cls = typing.get_type_hints(cls)[part]
    return cls


if __name__ == "__main__":
    print(render(), end="")
