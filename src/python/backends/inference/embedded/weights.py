"""Load and validate an HF-format weight snapshot, off to the side of the served model.

A snapshot is accepted only if it is complete and matches the served model:
``config.json`` and safetensors weights present (all shards of an index), same
``model_type`` and vocabulary size, every parameter present with the same
shape, nothing unexpected, and one forward pass gives finite logits. Anything
else raises ``SnapshotError`` (the server answers 400) and the served model is
untouched.

A reload of the served architecture (the usual case: the trainer publishing
new weights of the same model) takes a fast path: a copy of the served model
gets the snapshot's tensors (``load_state_dict``), after the same checks done on
the tensors themselves (every name and shape, all finite), instead of building
a new model through ``from_pretrained`` and running a forward pass: ~5 ms instead
of ~80 ms for the default recipe's model. Whatever the fast path does not accept
goes the full way, which names the problem.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nexrl.core.errors import NexrlError
from nexrl.core.util.adapters import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    adapter_base_model,
    is_adapter_snapshot,
)


class SnapshotError(ValueError, NexrlError):
    """The snapshot directory is missing, incomplete or does not fit the served model."""


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to serve and the policy version its weights are."""

    model: Any
    version: int
    path: str


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    try:
        dtype = getattr(torch, name)
    except AttributeError:
        dtype = None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def check_snapshot_files(path: Path) -> None:
    """Raise ``SnapshotError`` unless ``path`` holds a config and complete safetensors."""
    if not path.is_dir():
        raise SnapshotError(f"model_path {str(path)!r} is not a directory")
    config = path / "config.json"
    if not config.is_file():
        raise SnapshotError(f"snapshot {str(path)!r} has no config.json")
    try:
        json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"snapshot {str(path)!r}: config.json is unreadable: {exc}") from None
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            raise SnapshotError(f"snapshot {str(path)!r}: bad safetensors index: {exc}") from None
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            raise SnapshotError(f"snapshot {str(path)!r}: missing weight shards {missing}")
    elif not (path / "model.safetensors").is_file():
        raise SnapshotError(
            f"snapshot {str(path)!r} has no model.safetensors (or model.safetensors.index.json)"
        )


def _loading_problems(info: dict[str, Any]) -> list[str]:
    problems = []
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        values = info.get(key) or []
        if values:
            problems.append(f"{key}: {sorted(map(str, values))[:5]}")
    if info.get("conversion_errors"):
        problems.append(f"conversion_errors: {info['conversion_errors']}")
    return problems


def load_snapshot(
    path: str | Path,
    *,
    device: torch.device,
    dtype: torch.dtype,
    reference: Any | None = None,
    spare: Any | None = None,
) -> Any:
    """Load ``path`` as a causal LM on ``device``; validate against ``reference``.
    ``spare``: a model no batch uses (an earlier reload's result) that a snapshot of
    the same architecture may be loaded into instead of a copy of ``reference``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    snap = Path(path)
    check_snapshot_files(snap)
    if reference is not None:
        fast = _load_into_copy(snap, reference, spare)
        if fast is not None:
            return fast
    try:
        config = AutoConfig.from_pretrained(snap, local_files_only=True)
    except Exception as exc:
        raise SnapshotError(f"snapshot {str(snap)!r}: bad config.json: {exc}") from None
    if reference is not None:
        ref = reference.config
        for attr in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers"):
            if getattr(config, attr, None) != getattr(ref, attr, None):
                raise SnapshotError(
                    f"snapshot {str(snap)!r}: {attr}={getattr(config, attr, None)!r} but the "
                    f"served model has {getattr(ref, attr, None)!r}"
                )
    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            snap, dtype=dtype, local_files_only=True, output_loading_info=True
        )
        model, info = loaded
    except Exception as exc:  # truncated safetensors, shape errors, ...
        raise SnapshotError(f"snapshot {str(snap)!r} failed to load: {exc}") from None
    problems = _loading_problems(info)
    if problems:
        raise SnapshotError(f"snapshot {str(snap)!r} is incomplete: {'; '.join(problems)}")
    if reference is not None:
        _check_shapes(model, reference, snap)
    model.to(device).eval()
    _check_finite(model, snap)
    return model


_CONFIG_NOISE = ("_name_or_path", "transformers_version", "torch_dtype", "dtype")
_ACCEPTED_CONFIG = "_nexrl_config_json"  # a served model's config.json bytes, once checked


def _config_key(config: Any) -> dict[str, Any]:
    d = config.to_dict()
    return {k: v for k, v in d.items() if k not in _CONFIG_NOISE}


@torch.no_grad()
def _load_into_copy(snap: Path, reference: Any, spare: Any | None = None) -> Any | None:
    """The served model's copy with ``snap``'s tensors, or None where the snapshot is
    not a clean set of the same parameters (the caller then loads it the full way).
    The copy is ``spare`` with the tensors copied in, when ``spare`` came from this path
    with the same config (a copy of the served model costs ~5 ms on 2 cores for a tiny
    one; copying the tensors in, their bytes); else a deep copy of ``reference``."""
    import copy

    from safetensors.torch import load_file
    from transformers import AutoConfig

    try:
        raw = (snap / "config.json").read_bytes()
        # the same bytes as the config last accepted: no need to parse it again (~5 ms
        # through AutoConfig on 2 cores, for every reload of a run)
        if raw != getattr(reference, _ACCEPTED_CONFIG, None):
            config = AutoConfig.from_pretrained(snap, local_files_only=True)
            if _config_key(config) != _config_key(reference.config):
                return None
        index = snap / "model.safetensors.index.json"
        files = (
            sorted(set(json.loads(index.read_text())["weight_map"].values()))
            if index.is_file()
            else ["model.safetensors"]
        )
        state: dict[str, torch.Tensor] = {}
        for name in files:
            state.update(load_file(str(snap / name)))
    except Exception:
        return None
    expected = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    tied = set(getattr(reference, "_tied_weights_keys", None) or ())
    if not getattr(reference.config, "tie_word_embeddings", False):
        tied = set()
    if set(state) - set(expected) or set(expected) - set(state) - tied:
        return None
    if any(tuple(t.shape) != expected[k] for k, t in state.items()):
        return None
    if not all_finite(state.values()):
        return None
    model: Any
    if (
        spare is not None
        and spare is not reference
        and getattr(spare, _ACCEPTED_CONFIG, None) == raw
    ):
        model = spare  # (same config bytes, accepted above: the same parameter set)
    else:
        model = copy.deepcopy(reference)
    model.load_state_dict(state, strict=False)
    setattr(model, _ACCEPTED_CONFIG, raw)
    return model.eval()


def all_finite(tensors: Iterable[torch.Tensor]) -> bool:
    """True when no floating-point tensor holds a NaN or an infinity.

    Checked through each tensor's sum, accumulated in float32 (float64 for float64
    tensors): a NaN or an infinity anywhere makes the sum non-finite, and a sum is one
    vectorised pass without the boolean copy ``isfinite(t).all()`` makes: for a
    358M-parameter bf16 snapshot on 2 cores 0.08-0.10 s instead of 0.65-0.82 s
    (docs/benchmarks.md). Finite values can also overflow a sum; only then is the
    tensor checked element by element, so the answer is exactly ``isfinite``'s.
    """
    for t in tensors:
        if not t.is_floating_point() or t.numel() == 0:
            continue
        acc = torch.float64 if t.dtype == torch.float64 else torch.float32
        if bool(torch.isfinite(t.sum(dtype=acc))):
            continue
        if not bool(torch.isfinite(t).all()):
            return False
    return True


def _check_shapes(model: Any, reference: Any, snap: Path) -> None:
    new = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    old = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    if new.keys() != old.keys():
        diff = sorted(set(new) ^ set(old))[:5]
        raise SnapshotError(f"snapshot {str(snap)!r}: parameter names differ: {diff}")
    bad = [f"{k}: {new[k]} != {old[k]}" for k in new if new[k] != old[k]]
    if bad:
        raise SnapshotError(f"snapshot {str(snap)!r}: shape mismatch: {bad[:5]}")


@torch.inference_mode()
def _check_finite(model: Any, snap: Path) -> None:
    device = next(model.parameters()).device
    logits = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device)).logits
    if not bool(torch.isfinite(logits).all()):
        raise SnapshotError(f"snapshot {str(snap)!r}: weights give non-finite logits")


def adapter_base_path(path: str | Path) -> str:
    """The base model folder an adapter snapshot names (``base_model_name_or_path``)."""
    try:
        return adapter_base_model(path)
    except ValueError as exc:  # as this module's error: the server answers 400
        raise SnapshotError(f"snapshot {str(path)!r}: {exc}") from None


def load_adapter_snapshot(path: str | Path, *, base: Any, device: torch.device) -> Any:
    """A copy of ``base`` with the LoRA adapter at ``path`` merged in (``W + alpha/r B A``).

    ``base`` (the served base model) is untouched, so the next adapter is merged
    into the base again, not into the previous policy.
    """
    import copy

    from peft import PeftModel

    snap = Path(path)
    if not snap.is_dir():
        raise SnapshotError(f"model_path {str(snap)!r} is not a directory")
    if not (snap / ADAPTER_WEIGHTS).is_file():
        raise SnapshotError(f"snapshot {str(snap)!r} has no {ADAPTER_WEIGHTS}")
    model = copy.deepcopy(base)
    try:
        if not _merge_plain_lora(model, snap):  # DoRA, embeddings, ...: PEFT's own merge
            model = PeftModel.from_pretrained(model, str(snap), is_trainable=False)
            model = model.merge_and_unload()
    except Exception as exc:  # wrong base, truncated file, missing target modules, ...
        raise SnapshotError(f"adapter snapshot {str(snap)!r} failed to load: {exc}") from None
    merged: Any = model
    merged.to(device).eval()
    _check_finite(merged, snap)
    return merged


@torch.no_grad()
def _merge_plain_lora(model: Any, snap: Path) -> bool:
    """``W += (alpha / r) B A`` in place for every adapted ``nn.Linear`` (PEFT's merge for
    plain LoRA, without building the PEFT wrapper); False when the adapter is not plain
    LoRA on linear layers (nothing is changed then)."""
    from safetensors.torch import load_file

    config = json.loads((snap / ADAPTER_CONFIG).read_text())
    if config.get("peft_type") != "LORA" or config.get("use_dora") or config.get("fan_in_fan_out"):
        return False
    if config.get("rank_pattern") or config.get("alpha_pattern") or config.get("modules_to_save"):
        return False
    r, alpha = int(config["r"]), float(config["lora_alpha"])
    scale = alpha / r**0.5 if config.get("use_rslora") else alpha / r
    tensors = load_file(str(snap / ADAPTER_WEIGHTS))
    updates = []
    for key, a in tensors.items():
        if not key.endswith(".lora_A.weight"):
            if not key.endswith(".lora_B.weight"):
                return False
            continue
        prefix = key.removesuffix(".lora_A.weight")
        b = tensors.get(prefix + ".lora_B.weight")
        module = model.get_submodule(prefix.removeprefix("base_model.model."))
        if b is None or not isinstance(module, torch.nn.Linear):
            return False
        updates.append((module.weight, b, a))
    for weight, b, a in updates:
        delta = (b.to(torch.float32) @ a.to(torch.float32)) * scale
        weight.add_(delta.to(device=weight.device, dtype=weight.dtype))
    return True


def load_model_dir(
    path: str | Path, *, device: torch.device, dtype: torch.dtype
) -> tuple[Any, Any]:
    """``(model, base)`` for the server's start: a full snapshot is its own base; an
    adapter snapshot is merged into the base folder its config names."""
    if is_adapter_snapshot(path):
        base = load_snapshot(adapter_base_path(path), device=device, dtype=dtype)
        return load_adapter_snapshot(path, base=base, device=device), base
    model = load_snapshot(path, device=device, dtype=dtype)
    return model, model
