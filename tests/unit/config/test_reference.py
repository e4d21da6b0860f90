"""docs/config-reference.md is generated from the schema and kept in sync."""

from __future__ import annotations

from pathlib import Path

from nexrl.core.config.reference import render
from nexrl.core.config.schema import RecipeConfig
from nexrl.core.config.structure import schema_leaves


def test_committed_reference_matches_schema() -> None:
    committed = Path("docs/config-reference.md").read_text()
    assert committed == render(), (
        "docs/config-reference.md is stale: regenerate it with "
        "./pants run src/python/nexrl/core/config/reference.py > docs/config-reference.md"
    )


def test_every_field_is_documented() -> None:
    undocumented = [p for p, f in schema_leaves(RecipeConfig) if not f.metadata.get("help")]
    assert undocumented == []
    text = render()
    for path, _ in schema_leaves(RecipeConfig):
        assert f"`{path}`" in text
