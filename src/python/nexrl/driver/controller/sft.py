"""``SftRun``: ``mode: sft``, supervised fine-tuning from a dataset, no rollouts.

One step::

    batch     the next data.sft_batch_size conversations (seeded per-epoch order),
              padded or packed (nexrl.trainer.sft_data) -> batches/step_N.pt
    train     the same trainer actors (DeepSpeed) as RL: step -> StepResult,
              snapshot vN published every weight.sync_every updates
    validate  every validate.every steps (and before step 1 with
              validate.validate_before_train, and after the last step):
              val/loss = NLL of the held-out assistant tokens, no update
    checkpoint every trainer.save_every steps and at the end, with the data position

Nothing rollout-side starts: no inference service, no pool, no rollout futures.
The dataset is read, checked and tokenized before the cluster starts. Resume
(``resume.mode``) continues from the newest checkpoint at the exact data
position. Rows go to ``metrics.jsonl`` like an RL run's (``actor/sft_loss``,
``val/loss``, ``sft/epoch``, ...).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nexrl.driver.controller.errors import ControllerError
from nexrl.driver.controller.rundir import RunDir
from nexrl.driver.controller.setup import load_tokenizer, pad_token_id
from nexrl.driver.modeling.folder import (
    chat_template_needed,
    require_chat_template,
    tokenizer_field,
)
from nexrl.driver.modeling.prepare import prepare_model
from nexrl.driver.recipe import Recipe
from nexrl.trainer.rank_calls import RankCall

__all__ = ["SftRun"]

logger = logging.getLogger(__name__)
POLL_S = 0.05
STATE_KEY = "sft_data"


def _stop_ids(model_dir: Path, tok: Any) -> list[int]:
    import json

    config = model_dir / "generation_config.json"
    eos: Any = None
    if config.is_file():
        eos = json.loads(config.read_text()).get("eos_token_id")
    ids = eos if isinstance(eos, list) else [eos]
    out = [int(i) for i in ids if i is not None]
    return out or [int(tok.eos_token_id)]


class SftRun:
    """Drives one ``mode: sft`` run (see the module doc)."""

    def __init__(
        self,
        recipe: Recipe,
        *,
        progress: bool | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.recipe = recipe
        self.cfg = recipe.spec  # the checked recipe, typed
        self.show_progress = progress
        self.should_stop = should_stop or (lambda: False)
        self.step = 0
        self._closers: list[Any] = []
        self._resumed_line = ""

    def run(self) -> tuple[int, Path, str]:
        """Train; ``(steps done, run folder, summary text)``."""
        try:
            self._build()
            return self._loop()
        finally:
            for close in reversed(self._closers):
                with contextlib.suppress(Exception):
                    close()

    # -- setup --------------------------------------------------------------------
    def _build(self) -> None:
        from nexrl.core.util.logfile import LogRotation
        from nexrl.driver.cluster.cluster import start_cluster
        from nexrl.driver.controller.driver_log import DETAILS_LOGGER, log_to_file
        from nexrl.driver.metrics import MetricsTracker, ProgressDisplay
        from nexrl.trainer import TrainerGroup, TrainerSpec
        from nexrl.trainer.sft_data import SftDataset, encode_files

        cfg, recipe = self.cfg, self.recipe
        out = Path(cfg.output_dir)
        self.run_dir = RunDir(out)
        self._closers.append(self.run_dir.lock())  # one run per folder
        self.run_dir.prepare(recipe, str(out / "pool.zarr"))
        self.run_dir.batches.mkdir(exist_ok=True)
        self._closers.append(
            log_to_file(self.run_dir, cfg.logger.level, LogRotation.from_config(cfg.logger))
        )

        # model and data first: a bad row stops the run before any cluster starts
        model_dir, tok_dir = prepare_model(
            cfg, out, recipe.roots, self.show_progress, self.should_stop
        )
        tok = self.tok = load_tokenizer(tok_dir, tokenizer_field(cfg))
        why = chat_template_needed(cfg)
        if why:
            require_chat_template(tok, tok_dir, why, tokenizer_field(cfg))
        self.pad_id = pad_token_id(tok)
        stops = self.stop_ids = _stop_ids(model_dir, tok)
        d = cfg.data
        self.packing, self.max_length = d.sft_packing, d.sft_max_length
        files = [str(recipe.resolve(f)) for f in d.data_files]
        train = encode_files(tok, files, "data.data_files", self.max_length, stops)
        if d.max_samples:
            train = train[: d.max_samples]
        self.data = SftDataset(train, d.sft_batch_size, d.seed, d.shuffle)
        self.val: list[Any] = []
        if cfg.validate.data_files:
            vfiles = [str(recipe.resolve(f)) for f in cfg.validate.data_files]
            self.val = encode_files(tok, vfiles, "validate.data_files", self.max_length, stops)
        logger.info("sft: %d training, %d validation conversations", len(train), len(self.val))

        self.cluster = start_cluster(
            cfg.cluster,
            cfg.experiment_name,
            max(1, cfg.resource.trainer_gpus),
            plugins=recipe.plugins,
            roots=recipe.roots,
            should_stop=self.should_stop,
        )
        self._closers.append(self.cluster.close)
        spec = TrainerSpec.from_recipe(cfg, model_path=model_dir, roots=recipe.roots)
        spec = replace(spec, tokenizer_path=str(tok_dir), auto_checkpoint=False)
        self.trainer = TrainerGroup.create(
            self.cluster.client,
            spec,
            gpus_per_rank=cfg.resource.trainer_gpus,
            timeout_s=cfg.runtime_monitor.task_timeout_s + 600.0,
            silent_s=cfg.runtime_monitor.trainer_silent_s,
        )
        self._closers.append(self.trainer.close)
        info = self.trainer.setup_info()[0]
        self.step = int(info["global_step"] or 0)
        resumed = info.get("resumed_from") is not None
        if resumed:
            state = self.trainer.call(RankCall.EXTRA_STATE)[0].get(STATE_KEY)
            if state is None:
                raise ControllerError(
                    f"checkpoint {info['resumed_from']} has no SFT data position (written by "
                    "an RL run?); use another output_dir or resume.mode=disable"
                )
            self.data.load_state_dict(state)
            logger.info("resumed from %s at step %d", info["resumed_from"], self.step)
            self._resumed_line = f"nexrl: resumed at step {self.step} from {info['resumed_from']}"
            if info.get("resume_note"):  # a corrupted checkpoint or snapshot was passed over
                logger.warning("%s", info["resume_note"])
            for change in self.run_dir.record_config(recipe):
                logger.warning("setting changed on resume: %s", change)
        else:
            self.run_dir.record_config(recipe)
        self._last_ckpt = self.step
        self.version = self._published = int(info["policy_version"] or 0)
        self.tracker = MetricsTracker(
            list(cfg.logger.backends),
            out,
            run_name=cfg.experiment_name,
            config=recipe.record(),  # ${oc.env:...} kept: no secret goes to a tracker
            resume_step=self.step if resumed else None,
            roots=self.recipe.roots,
        )
        self._closers.append(self.tracker.close)
        self.progress = ProgressDisplay(
            cfg.trainer.total_train_steps,
            self.step,
            enabled=self.show_progress,
            log=logging.getLogger(DETAILS_LOGGER),  # each step's line in logs/driver.log too
        )
        self._closers.append(self.progress.close)

    # -- the loop -------------------------------------------------------------------
    def _loop(self) -> tuple[int, Path, str]:
        from nexrl.driver.metrics import read_metrics, write_summary
        from nexrl.driver.metrics.plots import plot_sft_curve

        cfg = self.cfg
        total = cfg.trainer.total_train_steps
        every = cfg.validate.every
        self.progress.write(f"nexrl: run folder {self.run_dir.root}")
        if self._resumed_line:
            self.progress.write(self._resumed_line)
        self.progress.write(f"nexrl: Dask dashboard {self.cluster.dashboard_link}")
        if self.step == 0 and cfg.validate.validate_before_train and self.val:
            self.tracker.log(0, self._validate())
        while self.step < total and not self.should_stop():
            row = self._train_one_step()
            if self.val and every and self.step % every == 0:
                row.update(self._validate())
            self.tracker.log(self.step, row)  # before the checkpoint: a resume keeps it
            save_every = cfg.trainer.save_every
            if save_every and self.step % save_every == 0:
                self._checkpoint()
            self.progress.update(self.step, row)
        if self.val and every and self.step > 0 and self.step % every and not self.should_stop():
            self.tracker.log(self.step, self._validate())  # the final weights are validated
        if self.version > self._published:  # the final weights are always a snapshot
            try:
                self.trainer.call(RankCall.PUBLISH_SNAPSHOT)
            except Exception as exc:
                raise ControllerError(f"trainer: final snapshot: {exc}") from exc
            self._published = self.version
        if self.step > self._last_ckpt:
            self._checkpoint()
        self.tracker.close()
        rows = read_metrics(self.run_dir.metrics)
        try:  # a plot must never fail the run
            plot_sft_curve(rows, self.run_dir.plots / "sft_curve.png", title=self._title())
        except Exception as exc:
            logger.warning("SFT plot failed: %s", exc)
        summary = str(write_summary(self.run_dir.root, rows))
        self.progress.write(summary)
        return self.step, self.run_dir.root, summary

    def _title(self) -> str:
        return f"{self.cfg.experiment_name}: SFT"

    def _wait(self, method: RankCall, path: Path, what: str) -> Any:
        pending = self.trainer.start(method, str(path))
        try:
            while not pending.done():
                if time.monotonic() > pending.deadline:
                    raise ControllerError(
                        f"trainer: {what} still running after {self.trainer.timeout_s:g}s "
                        "(a hung rank?); see logs/driver.log"
                    )
                pending.wait(POLL_S)  # TrainerSilentError: a rank's worker went silent
            return pending.result()[0]
        except ControllerError:
            raise
        except Exception as exc:
            raise ControllerError(f"trainer: {what}: {exc}") from exc
        finally:
            path.unlink(missing_ok=True)

    def _train_one_step(self) -> dict[str, Any]:
        from nexrl.trainer.batch_io import save_batch
        from nexrl.trainer.sft_data import sft_batch

        t0 = time.perf_counter()
        examples = self.data.next_examples()
        batch = sft_batch(examples, self.pad_id, packing=self.packing, max_length=self.max_length)
        path = save_batch(batch, self.run_dir.batches / f"step_{self.step + 1}.pt")
        result = self._wait(RankCall.STEP, path, f"train_step {self.step + 1}")
        self.step, self.version = int(result.global_step), int(result.policy_version)
        if result.published_version is not None:
            self._published = int(result.published_version)
        row: dict[str, Any] = dict(result.row())
        tokens = int(batch["attention_mask"].sum())
        row.update(
            {
                "sft/epoch": float(self.data.epoch),
                "sft/conversations": float(len(examples)),
                "sft/rows": float(len(batch)),
                "sft/label_tokens": float(batch["response_mask"].sum()),
                "sft/padding_fraction": 1.0 - tokens / max(batch["input_ids"].numel(), 1),
                "version/trainer": float(result.policy_version),
                "timing/step": time.perf_counter() - t0,
            }
        )
        return row

    def _validate(self) -> dict[str, float]:
        from nexrl.trainer.batch_io import save_batch
        from nexrl.trainer.sft_data import sft_batch

        t = time.perf_counter()
        nll, tokens = 0.0, 0.0
        size = self.cfg.data.sft_batch_size
        for k in range(0, len(self.val), size):
            batch = sft_batch(
                self.val[k : k + size],
                self.pad_id,
                packing=self.packing,
                max_length=self.max_length,
            )
            path = save_batch(batch, self.run_dir.batches / f"val_{k}.pt")
            out = self._wait(RankCall.VALIDATION_LOSS, path, f"validation at step {self.step}")
            nll, tokens = nll + out["nll_sum"], tokens + out["tokens"]
        loss = nll / tokens if tokens else math.nan
        row = {"val/loss": loss, "val/tokens": tokens}
        line = f"validation at step {self.step}: loss {loss:.4f}"
        if self.cfg.validate.sft_exact_match:
            exact = self._exact_match()
            row["val/exact_match"] = exact
            line += f", exact match {exact:.3f} ({round(exact * len(self.val))} of {len(self.val)})"
        self.progress.write(line)
        return {**row, "val/time_s": time.perf_counter() - t}

    def _exact_match(self) -> float:
        """The share of held-out conversations whose last assistant turn the policy
        generates greedily, token for token with its stop token (``val/exact_match``)."""
        from nexrl.trainer.sft_data import last_turn

        turns = [last_turn(e) for e in self.val]
        prompts = [p for p, _ in turns]
        answers = [a for _, a in turns]
        longest = max(len(a) for a in answers)
        try:
            out = self.trainer.call(
                RankCall.GREEDY_ANSWERS, prompts, longest, self.stop_ids, self.pad_id
            )[0]
        except Exception as exc:
            raise ControllerError(
                f"trainer: validation answers at step {self.step}: {exc}"
            ) from exc
        hits = [got == want for got, want in zip(out, answers, strict=True)]
        misses = [(p, w, g) for (p, w), g, h in zip(turns, out, hits, strict=True) if not h]
        for prompt, want, got in misses[:3]:  # what it answered instead, in logs/driver.log
            logger.info(
                "validation at step %d: %r answered %r, wanted %r",
                self.step,
                self.tok.decode(prompt),
                self.tok.decode(got),
                self.tok.decode(want),
            )
        return sum(hits) / len(hits)

    def _checkpoint(self) -> None:
        state = {STATE_KEY: self.data.state_dict(), "step": self.step}
        try:
            self.trainer.save_checkpoint(state)
        except Exception as exc:
            raise ControllerError(f"trainer checkpoint at step {self.step}: {exc}") from exc
        self._last_ckpt = self.step
