"""A cache of built tiny models, shared by runs: the same ``model.tiny`` -> the same files.

Building the recipe's tiny model costs a new run several seconds of the driver's
start-up before anything else can go on (importing transformers' model code alone is
~3 s on a 2-core machine; a warm start trains for more). The build is deterministic (a
seeded init; a seeded warm start), so the result is kept under a key of everything it
depends on and copied into the next run's ``<output_dir>/model``:

* every ``model.tiny`` field that reaches the builder, the warm start's settings and
  the bytes of its demonstration files;
* the versions of torch, transformers and tokenizers, and the source of the builder
  (``nexrl/driver/modeling/tiny.py``, ``warm_start.py``): changing any of them builds anew.

The cache folder is ``$NEXRL_CACHE_DIR/models`` (default
``${XDG_CACHE_HOME:-~/.cache}/nexrl/models``); ``model.tiny.cache: false`` skips it.
An entry is written under a temporary name and renamed when whole, with a manifest of
its files' SHA-256 sums; an entry whose files do not match its manifest (edited,
truncated) is removed and built again, never copied. Two runs building the same entry
at once both finish; the first rename wins and the other's copy is dropped. A cache
that cannot be written (read-only home) only costs the build: the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from nexrl.core.util.checksums import check_tree, file_sha256, tree_checksums
from nexrl.core.util.files import remove_tree, replace_dir

__all__ = ["CACHE_ENV", "build_into", "cache_root", "cached_build", "tiny_model_key"]

logger = logging.getLogger(__name__)

CACHE_ENV = "NEXRL_CACHE_DIR"
MANIFEST = "nexrl-cache.json"
_BUILDER_SOURCES = ("tiny.py", "warm_start.py")
_LIBRARIES = ("torch", "transformers", "tokenizers")
_NO_MANIFEST = shutil.ignore_patterns(MANIFEST)


def cache_root() -> Path:
    """Where built models are kept: ``$NEXRL_CACHE_DIR/models``, else
    ``${XDG_CACHE_HOME:-~/.cache}/nexrl/models``."""
    base = os.environ.get(CACHE_ENV)
    if base:
        return Path(base).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    if not xdg:
        try:
            xdg = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no home directory (a bare container user)
            xdg = os.path.join(tempfile.gettempdir(), f"nexrl-cache-{os.getuid()}")
    return Path(xdg).expanduser() / "nexrl" / "models"


def tiny_model_key(tiny: Any, demos: Sequence[Path]) -> str:
    """The cache key of ``model.tiny`` (with its warm start on ``demos``): a SHA-256 of
    the builder's inputs, the libraries' versions and the builder's source."""
    ws = tiny.warm_start
    inputs: dict[str, Any] = {
        "vocab": [str(w) for w in tiny.vocab],
        "seed": int(tiny.seed),
        "byte_fallback": bool(tiny.byte_fallback),
        "added_tokens": [str(t) for t in tiny.added_tokens],
        "init_std": float(tiny.init_std),
        "hidden_size": int(tiny.hidden_size),
        "num_layers": int(tiny.num_layers),
        "num_heads": int(tiny.num_heads),
        "num_kv_heads": int(tiny.num_kv_heads),
        "intermediate_size": int(tiny.intermediate_size),
        "warm_start": None
        if not demos
        else {
            "steps": int(ws.steps),
            "lr": float(ws.lr),
            "batch_size": int(ws.batch_size),
            "demos": [file_sha256(p) for p in demos],
        },
        "libraries": {name: _version(name) for name in _LIBRARIES},
        "builder": [file_sha256(Path(__file__).with_name(n)) for n in _BUILDER_SOURCES],
    }
    blob = json.dumps(inputs, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def cached_build(key: str, out: Path, build: Callable[[Path], None]) -> bool:
    """Make ``out`` (absent) the model of ``key``: copied from the cache if there, else
    built by ``build(folder)`` and stored. True when it came from the cache."""
    root = cache_root()
    entry = root / key
    if _copy_entry(entry, out):
        logger.info("model: the tiny model from the cache (%s)", entry)
        return True
    build_into(out, build, keep=lambda built: _store(built, entry))
    return False


def build_into(
    out: Path, build: Callable[[Path], None], keep: Callable[[Path], None] | None = None
) -> None:
    """Make ``out`` by ``build(folder)`` in a temporary folder beside it, renamed to
    ``out`` when complete (a run killed while building leaves no half model under
    ``out``; an existing unfinished ``out`` is replaced). ``keep(folder)`` runs on the
    finished folder before the rename."""
    tmp = out.with_name(f"{out.name}.building-{os.getpid()}")
    remove_tree(tmp)
    try:
        build(tmp)
        if keep is not None:
            keep(tmp)
    except BaseException:
        remove_tree(tmp)
        raise
    replace_dir(tmp, out)


def _copy_entry(entry: Path, out: Path) -> bool:
    if not (entry.exists() or entry.is_symlink()):
        return False
    try:
        problem = check_tree(entry, json.loads((entry / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        problem = f"{MANIFEST}: {exc}"
    if problem is not None:
        logger.warning(
            "model cache: %s does not match its manifest (%s): removed, building anew",
            entry,
            problem,
        )
        remove_tree(entry)
        return False

    def copy(tmp: Path) -> None:
        shutil.copytree(entry, tmp, ignore=_NO_MANIFEST)

    build_into(out, copy)
    return True


def _store(built: Path, entry: Path) -> None:
    """Copy ``built`` into the cache as ``entry``, whole or not at all."""
    tmp = entry.with_name(f".{entry.name}.tmp-{os.getpid()}")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        remove_tree(tmp)
        shutil.copytree(built, tmp)
        (tmp / MANIFEST).write_text(json.dumps({"files": tree_checksums(tmp)}, indent=1))
        try:
            tmp.rename(entry)
        except OSError:  # another run stored the same entry first: keep theirs
            remove_tree(tmp)
    except OSError as exc:
        remove_tree(tmp)
        logger.warning("model cache: could not store the built model under %s: %s", entry, exc)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"
