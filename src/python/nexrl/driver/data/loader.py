"""``DataLoader``: prompts in a reproducible per-epoch order, each repeated for a GRPO group.

Each prompt ("group") is handed out as ``group_size`` separate dicts (the recipe's
``rollout_worker.group_size``, samples per prompt)::

    {"group_id": int, "run_id": 0..n-1, "epoch": int, "index": int,
     "prompt": str | list[message], "data_item": {original row}}

``index`` is the prompt's position in the loaded data set (after filtering) and
``group_id = epoch * len(loader) + index``: unique across epochs, and the same
after a resume because it depends only on the data and the epoch, never on
how many items were handed out before. Every dict gets its own deep copy of
the row, so a rollout may mutate its prompt freely.

The position is ``(epoch, consumed prompts of that epoch)``; ``state_dict``
records exactly that, so a restored loader hands out exactly the prompts the
original had not yet handed out. A finished epoch is kept as
``(epoch, len(loader))`` until the next prompt is requested (never skipped
over on restore). The order of epoch ``e`` is a permutation seeded by
``(seed, e)``, so it is recomputed rather than stored.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nexrl.core.config.sections.data import BAD_ROWS_CHOICES, DataConfig
from nexrl.core.data.errors import DataError
from nexrl.core.data.reader import SourceRow, read_rows

logger = logging.getLogger(__name__)

Prompt = str | list[dict[str, Any]]
Item = dict[str, Any]
Group = list[Item]
STATE_VERSION = 1


@dataclass
class LoaderConfig(DataConfig):
    """What a loader runs with: the recipe's ``data`` section plus ``group_size``,
    the samples drawn per prompt (``rollout_worker.group_size``)."""

    group_size: int = 8
    #: the recipe field listing ``data_files``, named in errors (validation's differs)
    files_field: str = "data.data_files"
    #: ``(field, who reads it)``: fields every row must hold (the evaluator's
    #: ``required_fields``); a row without one is a bad row (``data.bad_rows``)
    required: tuple[tuple[str, str], ...] = ()
    #: ``(tokens, why)``: the longest prompt the model can take with room for an answer,
    #: when that is less than ``max_prompt_length`` (the run sets it from the model's
    #: context and ``rollout_worker.max_response_length``); longer prompts are dropped
    context_limit: tuple[int, str] | None = None

    @classmethod
    def from_section(
        cls, section: DataConfig, group_size: int, required: tuple[tuple[str, str], ...] = ()
    ) -> LoaderConfig:
        """From a typed ``data`` section, the recipe's group size and the required fields."""
        values = {f.name: getattr(section, f.name) for f in dataclasses.fields(DataConfig)}
        return cls(**values, group_size=int(group_size), required=tuple(required))


def render_prompt(prompt: Prompt) -> str:
    """A string prompt as is; chat messages as ``"role: content"`` lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def word_count_length(prompt: Prompt) -> int:
    """Default ``prompt_length``: whitespace-separated words of ``render_prompt(prompt)``.

    A rough stand-in for a token count (it under-counts tokens); real runs pass
    a tokenizer-based function, e.g. the length of ``apply_chat_template``.
    """
    return len(render_prompt(prompt).split())


class DataLoader:
    """Prompt groups from ``config.data_files``; see the module doc for the item format.

    The loader is its own iterator: ``next(loader)`` / ``for group in loader``
    continue from the current position (never restart), and with
    ``total_epochs=None`` never end.
    """

    def __init__(
        self, config: LoaderConfig, prompt_length: Callable[[Prompt], int] | None = None
    ) -> None:
        _check_config(config)
        self.config = config
        read = read_rows(
            list(config.data_files),
            config.prompt_key,
            config.bad_rows,
            config.files_field,
            config.required,
        )
        max_length = config.max_prompt_length
        limit = f"data.max_prompt_length={config.max_prompt_length} tokens"
        fix = "raise data.max_prompt_length"
        if config.context_limit is not None and config.context_limit[0] < max_length:
            max_length, why = config.context_limit
            limit = f"{max_length} tokens ({why})"
            fix = (
                "use a model with a longer context, or a shorter rollout_worker.max_response_length"
            )
        kept, dropped = _drop_overlong(
            read.rows, config.prompt_key, prompt_length or word_count_length, max_length
        )
        overlong = len(dropped)
        if config.max_samples is not None:
            kept = kept[: config.max_samples]
        self._rows = [r.data for r in kept]
        self._sources = [f"{r.file}, {r.position}" for r in kept]
        self._stats = {
            "rows_read": len(read.rows) + len(read.skipped),
            "bad_rows_skipped": len(read.skipped),
            "filtered_overlong": overlong,
            "num_prompts": len(self._rows),
        }
        if read.skipped:  # each bad row named, folded per file and problem
            logger.warning(
                "data: skipped %d bad rows (data.bad_rows=skip): %s",
                len(read.skipped),
                "; ".join(read.folded),
            )
        if not self._rows and dropped and len(dropped) == len(read.rows) and not read.skipped:
            raise DataError(
                f"{config.files_field}: every prompt in {list(config.data_files)} is longer "
                f"than {limit} (the shortest has {min(dropped)}); {fix}"
                + (f" to at least {min(dropped)}" if fix.startswith("raise") else "")
            )
        if not self._rows:
            raise DataError(
                f"{config.files_field}: no usable prompts in {list(config.data_files)}: "
                f"{self._stats['rows_read']} rows read, {len(read.skipped)} bad rows skipped, "
                f"{overlong} longer than {limit} dropped; check data.prompt_key and "
                "data.max_prompt_length"
            )
        if overlong * 2 > len(read.rows) or (overlong and max_length < config.max_prompt_length):
            # most of the data (rarely what the recipe meant), or the model's limit
            logger.warning(
                "data: %d of %d prompts in %s are longer than %s and are left out "
                "(the longest has %d); %s to train on them",
                overlong,
                len(read.rows),
                config.files_field,
                limit,
                max(dropped),
                fix,
            )
        logger.info(
            "data: %d prompts from %d files (%d longer than max_prompt_length=%d dropped, "
            "%d bad rows skipped)",
            len(self._rows),
            len(config.data_files),
            overlong,
            max_length,
            len(read.skipped),
        )
        self._fingerprint = _fingerprint([r[config.prompt_key] for r in self._rows])
        self._epoch = 0
        self._pos = 0  # prompts of self._epoch already handed out
        self._order: np.ndarray | None = None  # order of self._epoch, computed lazily

    # -- queries -------------------------------------------------------------
    def __len__(self) -> int:
        """Prompts (groups) per epoch, after filtering."""
        return len(self._rows)

    @property
    def epoch(self) -> int:
        """The epoch being read (still the old one right after its last prompt)."""
        return self._epoch

    @property
    def exhausted(self) -> bool:
        """True once ``total_epochs`` epochs have been handed out."""
        total = self.config.total_epochs
        return total is not None and (
            self._epoch >= total or (self._epoch == total - 1 and self._pos >= len(self))
        )

    def source(self, index: int) -> str:
        """Where prompt ``index`` (an item's ``index``) came from: ``file, line N``."""
        return self._sources[index]

    def stats(self) -> dict[str, int]:
        """``rows_read``, ``bad_rows_skipped``, ``filtered_overlong``, ``num_prompts``."""
        return dict(self._stats)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Dataset indices in the order epoch ``epoch`` hands them out."""
        if not self.config.shuffle:
            return np.arange(len(self))
        return np.random.default_rng([self.config.seed, epoch]).permutation(len(self))

    # -- iteration -----------------------------------------------------------
    def __iter__(self) -> Iterator[Group]:
        return self

    def __next__(self) -> Group:
        if not self._advance_epoch_if_done():
            raise StopIteration
        return self._take(1)[0]

    def next_batch(self, n_prompts: int) -> list[Group]:
        """Up to ``n_prompts`` groups, all from one epoch; ``[]`` once exhausted.

        A batch never spans two epochs: when fewer than ``n_prompts`` remain in
        the epoch, they are returned as a short batch, or with ``drop_last``
        skipped (counted as consumed) and the batch taken from the next epoch.
        """
        if n_prompts < 1:
            raise DataError(f"next_batch: n_prompts must be >= 1, got {n_prompts}")
        if self.config.drop_last and n_prompts > len(self):
            raise DataError(
                f"next_batch({n_prompts}) with data.drop_last=true: the data has only "
                f"{len(self)} prompts per epoch, so every batch would be dropped; "
                "ask for fewer prompts or set data.drop_last=false"
            )
        if not self._advance_epoch_if_done():
            return []
        if self.config.drop_last and len(self) - self._pos < n_prompts:
            self._pos = len(self)
            if not self._advance_epoch_if_done():
                return []
        return self._take(min(n_prompts, len(self) - self._pos))

    def _advance_epoch_if_done(self) -> bool:
        """Move past a finished epoch; False when no prompt is left at all."""
        if self._pos >= len(self):
            if self.config.total_epochs is not None and self._epoch + 1 >= self.config.total_epochs:
                return False
            self._epoch, self._pos, self._order = self._epoch + 1, 0, None
        return not self.exhausted

    def _take(self, n: int) -> list[Group]:
        if self._order is None:
            self._order = self.epoch_order(self._epoch)
        indices = [int(i) for i in self._order[self._pos : self._pos + n]]
        self._pos += n
        return [self._group(i) for i in indices]

    def _group(self, index: int) -> Group:
        row = self._rows[index]
        group_id = self._epoch * len(self) + index
        return [
            {
                "group_id": group_id,
                "run_id": run_id,
                "epoch": self._epoch,
                "index": index,
                "prompt": copy.deepcopy(row[self.config.prompt_key]),
                "data_item": copy.deepcopy(row),
            }
            for run_id in range(self.config.group_size)
        ]

    # -- checkpointing -------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The read position plus what the order depends on (JSON-serialisable)."""
        return {
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "position": self._pos,
            "num_prompts": len(self),
            "shuffle": bool(self.config.shuffle),
            "seed": int(self.config.seed),
            "fingerprint": self._fingerprint,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where the loader that produced ``state`` stopped.

        Raises ``DataError`` when the data or its order changed since, because
        the resumed sequence would then not be the one the run started.
        """
        missing = [k for k in ("epoch", "position", "num_prompts", "fingerprint") if k not in state]
        if missing or state.get("version") != STATE_VERSION:
            raise DataError(
                f"data loader state: not a version-{STATE_VERSION} state (missing {missing})"
            )
        for key, now in (("shuffle", bool(self.config.shuffle)), ("seed", int(self.config.seed))):
            if state.get(key) != now:
                raise DataError(
                    f"data.{key} is {now!r} but the checkpoint was taken with {state.get(key)!r}; "
                    f"set data.{key}={state.get(key)!r} to resume the same prompt order"
                )
        if state["num_prompts"] != len(self) or state["fingerprint"] != self._fingerprint:
            raise DataError(
                f"the prompt data changed since the checkpoint ({state['num_prompts']} prompts "
                f"then, {len(self)} now); resume with the same data.data_files, prompt_key, "
                "max_prompt_length and max_samples, or start a new run"
            )
        epoch, pos = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= pos <= len(self):
            raise DataError(f"data loader state: position ({epoch}, {pos}) out of range")
        self._epoch, self._pos, self._order = epoch, pos, None


def _drop_overlong(
    rows: list[SourceRow], prompt_key: str, measure: Callable[[Prompt], int], max_length: int
) -> tuple[list[SourceRow], list[int]]:
    """``(rows whose prompt is at most max_length long, the lengths of those dropped)``."""
    kept: list[SourceRow] = []
    dropped: list[int] = []
    for row in rows:
        try:
            n_tokens = measure(row.data[prompt_key])
        except Exception as exc:
            raise DataError(f"{row.file}, {row.position}: prompt_length failed: {exc!r}") from exc
        if n_tokens <= max_length:
            kept.append(row)
        else:
            dropped.append(n_tokens)
    return kept, dropped


def _check_config(config: LoaderConfig) -> None:
    if config.bad_rows not in BAD_ROWS_CHOICES:
        raise DataError(
            f"data.bad_rows: must be one of {BAD_ROWS_CHOICES}, got {config.bad_rows!r}"
        )
    for name in ("max_prompt_length", "total_epochs", "max_samples"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise DataError(f"data.{name}: must be >= 1, got {value}")
    if config.group_size < 1:
        raise DataError(f"rollout_worker.group_size: must be >= 1, got {config.group_size}")


def _fingerprint(prompts: list[Any]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]
