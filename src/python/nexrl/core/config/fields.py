"""``cfg_field``: a dataclass field documented once, in code.

Every recipe field is declared with ``cfg_field(default, help=...)`` in a
section dataclass under ``nexrl.core.config.sections``. The help text is the single
source of the configuration reference (``docs/config-reference.md`` is
generated from it) and of validation messages.

Extra checks the validator applies, from the field metadata:
* ``choices``: the value must be one of these (a "did you mean" is offered);
* ``path``: the value (or each list item) names a file or folder that must
  exist, resolved against the recipe's workspace root;
* ``minimum``: numbers must be >= this;
* ``rl_only``: a required field that ``mode: sft`` (no rollouts) does not need;
* ``registry``: the kind of part the field selects (``nexrl.core.plugins.Registry``): a
  registered name or ``path/to/file.py:Name``, checked by the component's check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from omegaconf import MISSING

__all__ = ["MISSING", "cfg_field"]


def cfg_field(
    default: Any = MISSING,
    *,
    help: str,
    default_factory: Callable[[], Any] | None = None,
    choices: Sequence[str] | None = None,
    path: bool = False,
    minimum: float | None = None,
    rl_only: bool = False,
    registry: str | None = None,
) -> Any:
    """A documented dataclass field; ``default=MISSING`` makes it required."""
    metadata = {
        "help": help,
        "choices": tuple(choices) if choices else None,
        "path": path,
        "minimum": minimum,
        "rl_only": rl_only,
        "registry": registry,
    }
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)
