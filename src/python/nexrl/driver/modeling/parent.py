"""Starting a run from another run's weights (staged training): ``model.path`` may
name a Hugging Face model folder, another run's snapshot (``runs/<name>/snapshots/vN``
or ``.../latest``), its snapshot folder (``runs/<name>/snapshots``) or the run folder
itself (``runs/<name>``). A run folder or snapshot folder is resolved to the snapshot
its ``latest`` names (else its newest complete one); a snapshot is checked against
its ``checksums.json`` before the run uses it.

The run that starts from a snapshot records where its weights came from in
``<output_dir>/parent.json`` (written when the run starts fresh, kept when it resumes)::

    {"model_path": "runs/stage1",               # model.path as the recipe gave it
     "snapshot": "/abs/runs/stage1/snapshots/v40", "version": 40,
     "run": "/abs/runs/stage1", "experiment_name": "stage1",
     "fingerprint": "sha256:...",                # of the snapshot's checksums.json
     "parent": {...}}                            # the parent's own parent.json, if any

Both the recipe check (``nexrl.driver.modeling.checks.model_folder``) and the driver's
model preparation (``nexrl.driver.modeling.prepare``) resolve ``model.path`` here; a snapshot
is hashed once per process while its files stay as they are.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nexrl.core.util.adapters import ADAPTER_WEIGHTS, is_adapter_snapshot
from nexrl.core.util.files import atomic_write_text
from nexrl.core.util.run_parent import PARENT_FILE, describe_parent, read_parent
from nexrl.core.weights.snapshot_read import (
    CHECKSUMS_FILE,
    LATEST_NAME,
    VERSION_FILE,
    latest_snapshot,
    list_snapshots,
    read_version,
    verify_snapshot,
)
from nexrl.driver.modeling.folder import ModelSetupError

__all__ = [
    "PARENT_FILE",
    "ModelSource",
    "describe_parent",
    "read_parent",
    "record_parent",
    "resolve_model_source",
]

logger = logging.getLogger(__name__)

SNAPSHOTS = "snapshots"  # a run folder's snapshot folder (weight.snapshot_dir's default)


@dataclass(frozen=True)
class ModelSource:
    """The folder a run loads for ``model.path`` and, when it is another run's
    snapshot, the ``parent`` record (``parent.json``'s content; None otherwise)."""

    path: Path
    parent: dict[str, Any] | None = None


def _is_snapshot(folder: Path) -> bool:
    """A snapshot (complete or not): its ``version`` or ``checksums.json``, or a ``vN``
    folder that is not a model folder."""
    name = folder.name
    return (
        (folder / VERSION_FILE).exists()
        or (folder / CHECKSUMS_FILE).exists()
        or (name[:1] == "v" and name[1:].isdigit() and not (folder / "config.json").exists())
    )


def _run_config(run: Path) -> dict[str, Any]:
    """A run folder's recorded ``config.yaml`` as a dict ({} when absent or unreadable)."""
    path = run / "config.yaml"
    if not path.is_file():
        return {}
    try:
        import yaml

        data: Any = yaml.safe_load(path.read_text())
    except Exception:  # a damaged record: the snapshot folder's default is used
        return {}
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}


def _snapshot_root_of_run(run: Path) -> Path:
    """Where a run folder's snapshots are: ``<run>/snapshots`` (the default, which moves
    with a copied run folder), else its recorded ``weight.snapshot_dir``."""
    if (run / SNAPSHOTS).is_dir():
        return run / SNAPSHOTS
    recorded = (_run_config(run).get("weight") or {}).get("snapshot_dir")
    if isinstance(recorded, str) and "${" not in recorded:
        root = Path(recorded)
        root = root if root.is_absolute() else run / root
        if root.is_dir():
            return root
    return run / SNAPSHOTS


def _fix(field: str) -> str:
    return (
        f"point {field} at a complete snapshot (runs/<name>/snapshots/vN) or a Hugging "
        "Face model folder"
    )


@functools.lru_cache(maxsize=32)
def _verified(path: str, files: tuple[tuple[str, int, int], ...]) -> str | None:
    """``verify_snapshot`` once per snapshot state (``files``: names, sizes, mtimes)."""
    del files  # part of the cache key only
    return verify_snapshot(path)


def _verify(snapshot: Path) -> str | None:
    real = Path(os.path.realpath(snapshot))
    try:
        files = tuple(
            sorted(
                (e.name, e.stat().st_size, e.stat().st_mtime_ns)
                for e in real.iterdir()
                if e.is_file()
            )
        )
    except OSError as exc:
        return f"{snapshot} cannot be read ({exc.strerror or exc})"
    return _verified(str(real), files)


def _fingerprint(snapshot: Path) -> str | None:
    try:
        return "sha256:" + hashlib.sha256((snapshot / CHECKSUMS_FILE).read_bytes()).hexdigest()
    except OSError:
        return None  # published before checksums were recorded


def _others(root: Path, version: int) -> str:
    older = [p.name for v, p in list_snapshots(root) if v != version]
    return f" (other snapshots there: {', '.join(older[-3:])})" if older else ""


def _not_an_adapter(text: str, snapshot: Path, version: int, field: str) -> None:
    if is_adapter_snapshot(snapshot):
        raise ModelSetupError(
            f"{field}: {text}: snapshot v{version} is a LoRA adapter ({ADAPTER_WEIGHTS}), "
            "not a model; start the next stage from a run that trains the whole model "
            "(no trainer.lora), or merge the adapter into its base (PEFT merge_and_unload, "
            "save_pretrained) and point model.path at that folder"
        )


def _parent_record(
    value: str, snapshot: Path, version: int, run: Path | None = None
) -> dict[str, Any]:
    real = Path(os.path.realpath(snapshot))
    run = Path(os.path.realpath(run)) if run is not None else real.parent.parent
    if not (run / "config.yaml").is_file():  # a snapshot folder outside a run folder
        run_out: str | None = None
        experiment = None
    else:
        run_out, experiment = str(run), _run_config(run).get("experiment_name")
    record: dict[str, Any] = {
        "model_path": value,
        "snapshot": str(real),
        "version": version,
        "run": run_out,
        "experiment_name": experiment,
        "fingerprint": _fingerprint(real),
    }
    grand = read_parent(run) if run_out else None
    if grand is not None:
        record["parent"] = grand
    return record


def resolve_model_source(
    value: str | Path, folder: Path | None = None, field: str = "model.path"
) -> ModelSource:
    """The model folder that ``value`` (``model.path`` as written; ``folder``: where it
    was found, default ``value`` itself) names, with its parent record when it is
    another run's snapshot. ``ModelSetupError`` (one line naming ``field`` and the fix)
    when a run or snapshot folder has no complete snapshot, or the snapshot is
    incomplete or does not match its checksums."""
    text = str(value)
    path = Path(folder if folder is not None else value)
    if not path.is_dir() or ((path / "config.json").is_file() and not _is_snapshot(path)):
        return ModelSource(path)  # a model folder (or none: the path checks say so)
    if _is_snapshot(path):
        version = read_version(path)
        if version is None:
            raise ModelSetupError(
                f"{field}: {text} is an incomplete snapshot (no {VERSION_FILE} file: its "
                f"publish was interrupted){_others(path.parent, -1)}; {_fix(field)}"
            )
        problem = _verify(path)
        if problem is not None:
            raise ModelSetupError(
                f"{field}: snapshot {text} is damaged ({problem}){_others(path.parent, version)}"
                f"; {_fix(field)}"
            )
        _not_an_adapter(text, path, version, field)
        return ModelSource(path, _parent_record(text, path, version))
    # a run folder (config.yaml, snapshots/) or a snapshot folder (vN/, latest)
    is_root = (path / LATEST_NAME).is_symlink() or bool(list_snapshots(path))
    root = path if is_root else _snapshot_root_of_run(path)
    found = latest_snapshot(root)
    if found is None:
        if not is_root and not (path / "config.yaml").is_file() and not root.exists():
            return ModelSource(path)  # neither a run nor a model folder: the checks say so
        raise ModelSetupError(
            f"{field}: {text} has no complete snapshot under {root} (the run has not "
            f"published one yet: let it train at least weight.sync_every steps, or "
            f"resume it to its end); {_fix(field)}"
        )
    version, snapshot = found
    _not_an_adapter(text, snapshot, version, field)
    problem = _verify(snapshot)
    if problem is not None:
        raise ModelSetupError(
            f"{field}: {text}: its newest snapshot v{version} is damaged ({problem})"
            f"{_others(root, version)}; {_fix(field)}"
        )
    return ModelSource(snapshot, _parent_record(text, snapshot, version, None if is_root else path))


def record_parent(output_dir: str | Path, parent: dict[str, Any], resumed: bool) -> None:
    """Write ``<output_dir>/parent.json`` on a fresh start (a resumed run keeps the one
    it started with: its weights come from its own checkpoint) and log where the run
    starts from."""
    out = Path(output_dir)
    kept = read_parent(out) if resumed else None
    if kept is not None:
        logger.info(
            "model.path: this run resumes from its own checkpoint; it started from %s (%s)",
            describe_parent(kept),
            PARENT_FILE,
        )
        return
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(parent, indent=2) + "\n"
    atomic_write_text(out / PARENT_FILE, text, fsync=False, fsync_parent=False)
    logger.info("model.path: starts from %s (recorded in %s)", describe_parent(parent), PARENT_FILE)
