"""The one exception type for user mistakes in a recipe."""

from __future__ import annotations

from nexrl.errors import NexrlError


class RecipeError(NexrlError):
    """A recipe has one or more problems; each names the field or file and the fix."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(self.render())

    def __reduce__(self) -> tuple[type[RecipeError], tuple[list[str]]]:
        # Rebuilt from its problems when it travels between processes (a Dask worker's
        # plugin import that fails reaches the driver as the same error).
        return (type(self), (self.problems,))

    def render(self) -> str:
        n = len(self.problems)
        head = f"recipe has {n} problem{'s' if n != 1 else ''}:"
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])
