"""Named evaluators: a recipe picks one as ``rollout_worker.evaluator: <name>`` and
sets its options in ``rollout_worker.evaluator_options``.

Each evaluator is a ``NamedEvaluator`` subclass registered with
``@register("name")``; its ``Options`` dataclass lists the options (typed, each
documented once in the field's ``metadata["help"]``). ``build`` checks the
options (unknown name, wrong type: one line naming the field and what is
allowed) and returns the instance. ``required_fields`` of an instance names
the data-row fields it reads, from its options (``--check`` looks for them).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from nexrl.core.config.errors import RecipeError
from nexrl.core.plugins.registry import Registry, UnknownNameError, is_spec
from nexrl.core.types.evaluator import Evaluator

__all__ = [
    "EVALUATORS",
    "NAMED_SOURCE",
    "OPTIONS_FIELD",
    "EvaluatorContext",
    "NamedEvaluator",
    "build",
    "build_evaluator",
    "is_named",
    "parse_options",
    "register",
]

OPTIONS_FIELD = "rollout_worker.evaluator_options"
# The 'module' a named evaluator's spec carries: ("nexrl.rollout.evaluators", name).
NAMED_SOURCE = "nexrl.rollout.evaluators"


@dataclass(frozen=True)
class EvaluatorContext:
    """What a named evaluator may use of the run: the inference service (the default
    endpoint of ``llm_judge``)."""

    base_urls: tuple[str, ...] = ("http://127.0.0.1:9",)
    model: str = "policy"
    api_key: str = "EMPTY"


class NamedEvaluator(Evaluator):
    """An evaluator picked by name; ``Options`` is its options dataclass, built with
    the recipe's ``rollout_worker.evaluator_options`` and the run's context."""

    name: ClassVar[str] = ""
    Options: ClassVar[type[Any]]
    what: ClassVar[str] = ""  # one line: what it scores (the guide's table)

    def __init__(self, options: Any, context: EvaluatorContext | None = None) -> None:
        self.options = options
        self.context = context or EvaluatorContext()

    @property
    def required_fields(self) -> tuple[str, ...]:
        """The data-row fields ``evaluate`` reads (from the options)."""
        return ()


# Evaluator classes of a recipe's own ('path/to/file.py:Class') need not subclass
# Evaluator (an ``evaluate`` method is the contract), so the kind checks callables.
EVALUATORS: Registry[type[NamedEvaluator]] = Registry("evaluator", field="rollout_worker.evaluator")
E = TypeVar("E", bound=type[NamedEvaluator])


def register(name: str) -> Callable[[E], E]:
    """Register a ``NamedEvaluator`` subclass as ``name`` (a plugin may add its own)."""

    def deco(cls: E) -> E:
        cls.name = name
        return EVALUATORS.register(name)(cls)

    return deco


def is_named(spec: str) -> bool:
    """A registered name's form, an identifier (a class is 'file.py:Class' or
    'package.module:Class')."""
    return str(spec).isidentifier()


def _check_type(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_check_type(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple) or tp in (list, tuple):
        return isinstance(value, list | tuple)
    if origin is dict or tp is dict:
        return isinstance(value, Mapping)
    return True


def _type_name(tp: Any) -> str:
    return str(tp).replace("typing.", "") if not isinstance(tp, type) else tp.__name__


def parse_options(options_cls: type[Any], raw: Mapping[str, Any], field: str) -> Any:
    """``options_cls(**raw)`` with each name and type checked; a ``RecipeError`` with one
    line per problem, naming ``field.<option>`` and the allowed options."""
    hints = typing.get_type_hints(options_cls)
    fields = {f.name: f for f in dataclasses.fields(options_cls)}
    allowed = ", ".join(fields) or "none"
    problems = []
    for key, value in raw.items():
        if key not in fields:
            problems.append(f"{field}.{key}: unknown option (allowed: {allowed})")
        elif not _check_type(value, hints[key]):
            problems.append(f"{field}.{key}: expected {_type_name(hints[key])}, got {value!r}")
    if problems:
        raise RecipeError(problems)
    opts = options_cls(**dict(raw))
    check = getattr(opts, "check", None)
    if check is not None:
        problems = [f"{field}.{p}" for p in check()]
        if problems:
            raise RecipeError(problems)
    return opts


def build(
    name: str,
    options: Mapping[str, Any] | None = None,
    context: EvaluatorContext | None = None,
    field: str = OPTIONS_FIELD,
) -> NamedEvaluator:
    """The evaluator registered as ``name`` with ``options`` (checked, see module doc)."""
    import nexrl.rollout.evaluators  # noqa: F401  (registers the library)

    try:
        cls = EVALUATORS.get(name)
        assert issubclass(cls, NamedEvaluator)
    except UnknownNameError as exc:
        raise RecipeError(
            [f"rollout_worker.evaluator: {exc} (or a class 'path/to/file.py:ClassName')"]
        ) from None
    return cls(parse_options(cls.Options, dict(options or {}), field), context)


def build_evaluator(
    value: str,
    options: Mapping[str, Any] | None = None,
    context: EvaluatorContext | None = None,
    roots: Any = (),
) -> Any:
    """The recipe's evaluator (``rollout_worker.evaluator``): a registered name built
    with its options and context, or the user's class (``path/to/file.py:Class``)
    instantiated with no arguments."""
    if not is_spec(value):
        return build(value, options, context)
    cls: Any = EVALUATORS.get(value, roots=roots)
    if isinstance(cls, type) and issubclass(cls, NamedEvaluator):
        return cls(parse_options(cls.Options, dict(options or {}), OPTIONS_FIELD), context)
    return cls()
