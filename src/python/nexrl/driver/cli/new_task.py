"""``nexrl train --new-task FOLDER``: scaffold a task from the template.

Writes ``FOLDER/make_data.py`` (the data script), ``FOLDER/evaluator.py`` (an
evaluator with partial credit and metrics) and ``FOLDER/<name>.yaml`` (a
complete tiny recipe), where ``<name>`` is the folder's last part. The template
is a toy task that learns in a few minutes on a CPU; docs/train-your-own-task.md
walks through it. Nothing is overwritten: if any of the files exists, none is
written.
"""

from __future__ import annotations

import re
from pathlib import Path

from nexrl.core.errors import NexrlError

__all__ = ["NewTaskError", "new_task", "template_files"]

TEMPLATE_DIR = Path(__file__).resolve().parent / "task_template"


class NewTaskError(NexrlError):
    """The task folder cannot be scaffolded (a bad name, or files already there)."""


def template_files(folder: str) -> dict[str, str]:
    """``{relative file name: text}`` of the task scaffolded into ``folder``."""
    name = Path(folder).name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise NewTaskError(
            f"--new-task {folder}: the folder's name {name!r} names the recipe and the "
            "run folder; use letters, digits and '_' (e.g. recipes/my_task)"
        )
    shown = folder.rstrip("/")
    out = {}
    for src, dst in (
        ("make_data.py.tmpl", "make_data.py"),
        ("evaluator.py.tmpl", "evaluator.py"),
        ("recipe.yaml.tmpl", f"{name}.yaml"),
    ):
        text = (TEMPLATE_DIR / src).read_text()
        out[dst] = text.replace("{{folder}}", shown).replace("{{name}}", name)
    return out


def new_task(folder: str) -> list[Path]:
    """Write the scaffold into ``folder``; the paths written. Refuses to overwrite."""
    files = template_files(folder)
    root = Path(folder)
    existing = [str(root / f) for f in files if (root / f).exists()]
    if existing:
        raise NewTaskError(
            f"--new-task {folder}: {', '.join(existing)} already exist(s); nothing was "
            "written. Choose a new folder, or move those files away first"
        )
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for rel, text in files.items():
        path = root / rel
        with open(path, "x") as f:  # exclusive: never replaces a file
            f.write(text)
        written.append(path)
    return written
