"""The one exception type for user mistakes in a recipe."""

from __future__ import annotations

from nexrl.core.errors import NexrlError


class RecipeError(NexrlError):
    """A recipe has one or more problems; each names the field or file and the fix.

    ``deprecations``: the recipe's renamed keys (warnings, not problems), so a caller
    can still show them when the recipe is refused."""

    def __init__(self, problems: list[str], deprecations: tuple[str, ...] = ()):
        self.problems = list(problems)
        self.deprecations = tuple(deprecations)
        super().__init__(self.render())

    def __reduce__(self) -> tuple[type[RecipeError], tuple[list[str], tuple[str, ...]]]:
        # Rebuilt from its problems when it travels between processes (a Dask worker's
        # plugin import that fails reaches the driver as the same error).
        return (type(self), (self.problems, self.deprecations))

    def render(self) -> str:
        """One problem: its line; several: a count, then one line each."""
        if len(self.problems) == 1:
            return self.problems[0]
        head = f"recipe has {len(self.problems)} problems:"
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])
