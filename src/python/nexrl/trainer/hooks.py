"""The trainer hooks' old names: a subclass written against them keeps working.

The hooks a trainer subclass overrides were private once (``_prepare_batch``,
``_forward``, ``_compute_loss``); they are public now (``RENAMED_HOOKS``). For
every subclass of ``SelfHostedTrainer`` (``adopt_old_hook_names`` runs from its
``__init_subclass__``):

* a class that overrides an old name and not the new one has the new name point
  at its override (the step calls the new names), with one ``FutureWarning`` per
  class naming the class and the new names;
* a class that defines a new name has the old name point at it too, so an old
  subclass's ``super()._prepare_batch(batch)`` reaches its parent's hook, and
  callers of the old name (``trainer._compute_loss(...)``) still reach the most
  derived one.
"""

from __future__ import annotations

import warnings

__all__ = ["RENAMED_HOOKS", "adopt_old_hook_names"]

#: old hook name -> its public name
RENAMED_HOOKS = {
    "_prepare_batch": "prepare_batch",
    "_forward": "forward",
    "_compute_loss": "compute_loss",
}


def adopt_old_hook_names(cls: type) -> None:
    """Pair each renamed hook ``cls`` defines with its other name (module doc)."""
    own = cls.__dict__
    adopted = []
    for old, new in RENAMED_HOOKS.items():
        if old in own and new not in own:
            setattr(cls, new, own[old])
            adopted.append((old, new))
        elif new in own and old not in own:
            setattr(cls, old, own[new])
    if adopted:
        names = ", ".join(f"{old} is deprecated: override {new}" for old, new in adopted)
        warnings.warn(
            f"{cls.__module__}.{cls.__qualname__}: {names} (the old name still works for now)",
            FutureWarning,
            stacklevel=3,  # the class statement
        )
