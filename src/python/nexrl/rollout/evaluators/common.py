"""Options and helpers the reference-comparing evaluators share."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from nexrl.rollout.evaluators.registry import NamedEvaluator
from nexrl.rollout.evaluators.text import normalise

__all__ = ["Normalise", "ReferenceEvaluator", "opt", "references"]


def opt(default: Any, help: str) -> Any:
    """An option documented once (the guide's table and errors read ``help``)."""
    return field(default=default, metadata={"help": help})


class Normalise:
    """Mixin of the normalisation options (dataclass fields declared by each Options)."""

    ignore_case: bool
    ignore_whitespace: bool
    ignore_punctuation: bool

    def norm(self, text: str) -> str:
        return normalise(
            text,
            case=self.ignore_case,
            whitespace=self.ignore_whitespace,
            punctuation=self.ignore_punctuation,
        )


def references(data: dict[str, Any], key: str) -> list[str]:
    """The accepted answers in ``data[key]``: a value, or a list of them."""
    value = data[key]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


class ReferenceEvaluator(NamedEvaluator):
    """An evaluator that compares the answer with the row's ``options.reference_key``
    field (a value or a list of accepted ones)."""

    @property
    def required_fields(self) -> tuple[str, ...]:
        return (self.options.reference_key,)

    def references(self, data: dict[str, Any]) -> list[str]:
        """The accepted answers of the row ``data``."""
        return references(data, self.options.reference_key)
