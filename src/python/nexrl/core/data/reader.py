"""Read prompt rows from parquet, JSON-lines and JSON files.

A ``.json`` file is either one JSON array of row objects (``json.dump(rows, f)``;
a row's position is ``item N``) or JSON lines under a ``.json`` name (what
``datasets.Dataset.to_json`` writes).

Files are read whole and concatenated in the order given. A file that is
missing, a folder, of an unknown type or unreadable is always a ``DataError``.
A bad row (invalid JSON line, not an object, missing or ill-typed prompt, or
missing a field the evaluator reads: ``required``, its ``required_fields``) is
named with its file and 1-based position (``row N`` in a parquet file, ``line N``
in a JSON-lines file, blank lines included in the count). Every row of every
file is read: with ``bad_rows="error"`` the ``DataError`` names every bad row
(one line per file and problem, its rows listed), with ``bad_rows="skip"`` they
are dropped and listed in ``ReadResult.skipped``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nexrl.core.data.errors import DataError

PARQUET_SUFFIXES = (".parquet", ".pq")
JSONL_SUFFIXES = (".jsonl", ".json")  # .json: an array of rows, or JSON lines
_SKIP_HINT = "fix the row, or set data.bad_rows=skip to drop bad rows"


@dataclass
class SourceRow:
    """One usable row and where it came from."""

    file: str
    position: str  # "row 3" (parquet) or "line 3" (jsonl), 1-based
    data: dict[str, Any]


@dataclass
class ReadResult:
    rows: list[SourceRow] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "file, line N: problem" per dropped row
    #: the bad rows folded: one "file: N bad rows (line 3, line 7): problem" per file and problem
    folded: list[str] = field(default_factory=list)


SHOWN_POSITIONS = 10  # rows listed per file and problem; the rest counted


def fold_positions(bad: list[tuple[str, str, str]]) -> list[str]:
    """``(file, position, problem)`` triples as one line per file and problem, in order
    of first appearance: ``file, line 3: problem`` for one row, ``file: 12 rows (line 3,
    line 7, ... and 2 more): problem`` for several (a renamed field: one line, not one
    per row)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for file, position, problem in bad:
        groups.setdefault((file, problem), []).append(position)
    out = []
    for (file, problem), positions in groups.items():
        if len(positions) == 1:
            out.append(f"{file}, {positions[0]}: {problem}")
            continue
        shown = ", ".join(positions[:SHOWN_POSITIONS])
        more = len(positions) - SHOWN_POSITIONS
        shown += f", ... and {more} more" if more > 0 else ""
        out.append(f"{file}: {len(positions)} rows ({shown}): {problem}")
    return out


def missing_fields_problem(row: dict[str, Any], required: Sequence[tuple[str, str]]) -> str | None:
    """The first field of ``required`` (``(field, who reads it)``) that ``row`` lacks."""
    for name, who in required:
        if name not in row:
            return f"no '{name}' field, which {who} reads (its required_fields)"
    return None


def read_rows(
    files: Sequence[str],
    prompt_key: str = "prompt",
    bad_rows: str = "error",
    field: str = "data.data_files",
    required: Sequence[tuple[str, str]] = (),
) -> ReadResult:
    """Read every row of ``files`` in order; see the module doc for error handling.
    ``field``: the recipe field that lists ``files``, named in errors; ``required``:
    ``(field, who reads it)`` of the fields every row must hold besides the prompt."""
    if bad_rows not in ("error", "skip"):
        raise DataError(f"data.bad_rows: must be 'error' or 'skip', got {bad_rows!r}")
    if not files:
        raise DataError(f"{field}: no data files given; list at least one .parquet or .jsonl file")
    result = ReadResult()
    bad: list[tuple[str, str, str]] = []
    for file in files:
        path = _check_file(file, field)
        rows = (
            _parquet_rows(file, path, prompt_key)
            if path.suffix in PARQUET_SUFFIXES
            else _jsonl_rows(file, path)
        )
        for position, data in rows:
            problem = data if isinstance(data, str) else prompt_problem(data, prompt_key)
            if problem is None:
                assert isinstance(data, dict)
                problem = missing_fields_problem(data, required)
            if problem is None:
                assert isinstance(data, dict)
                result.rows.append(SourceRow(file, position, data))
            else:
                bad.append((file, position, problem))
                result.skipped.append(f"{file}, {position}: {problem}")
    result.folded = fold_positions(bad)
    if bad and bad_rows != "skip":
        count = "" if len(bad) == 1 else f"{len(bad)} bad rows: "
        raise DataError(f"{count}{'; '.join(result.folded)}; {_SKIP_HINT}")
    return result


def head_rows(
    file: str, n: int | None, path: Path | None = None, field: str = "data.data_files"
) -> list[tuple[str, dict[str, Any] | str]]:
    """The first ``n`` rows (every row: ``n=None``) of one data file as ``(position,
    row)``, ``row`` a problem string for a line that is not a JSON object (``--check``
    reads these); ``path`` is where the file is, when ``file`` is relative to another
    folder."""
    path = _check_file(str(path or file), field)
    if path.suffix in PARQUET_SUFFIXES:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            if n is None:
                table = pq.read_table(path)
            else:
                table = pq.ParquetFile(path).read_row_group(0) if n else None
        except (pa.ArrowException, OSError, IndexError) as exc:
            raise DataError(f"{file}: cannot read as parquet ({exc})") from None
        rows = [] if table is None else table.slice(0, n).to_pylist()
        return [(f"row {i}", r) for i, r in enumerate(rows, start=1)]
    return list(itertools.islice(_jsonl_rows(file, path), n))


def _array_rows(file: str, data: bytes) -> Iterator[tuple[str, dict[str, Any] | str]]:
    """The items of a JSON array of rows as ``(item N, row)``; a row that is no JSON
    object is a problem string. A file that does not parse is a ``DataError``."""
    try:
        items = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise DataError(f"{file}: not valid UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{file}: invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    for i, item in enumerate(items, start=1):
        if isinstance(item, dict):
            yield f"item {i}", item
        else:
            yield f"item {i}", f"a row must be a JSON object, got {type(item).__name__}"


def _check_file(file: str, field: str = "data.data_files") -> Path:
    path = Path(file).expanduser()
    if not path.exists():
        raise DataError(
            f"{file}: data file not found (looked for {path.resolve()}); fix the path in {field}"
        )
    if path.is_dir():
        raise DataError(f"{file}: is a folder; list the data files inside it in {field}")
    if path.suffix not in PARQUET_SUFFIXES + JSONL_SUFFIXES:
        raise DataError(
            f"{file}: unsupported file type '{path.suffix}'; data files must be parquet "
            f"({', '.join(PARQUET_SUFFIXES)}), JSON lines (.jsonl) or JSON (.json: an "
            "array of rows, or JSON lines)"
        )
    return path


def _parquet_rows(file: str, path: Path, prompt_key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(
            f"{file}: cannot read as parquet ({exc}); check it is a valid parquet file, "
            "e.g. re-write it with pandas.DataFrame.to_parquet"
        ) from None
    if prompt_key not in table.column_names:
        raise DataError(
            f"{file}: no column '{prompt_key}' (columns: {table.column_names}); "
            "set data.prompt_key to the column holding the prompt"
        )
    for i, data in enumerate(table.to_pylist(), start=1):
        yield f"row {i}", data


def _jsonl_rows(file: str, path: Path) -> Iterator[tuple[str, dict[str, Any] | str]]:
    """Yield ``(position, row)``; ``row`` is a problem string when the line is not a JSON
    object. A ``.json`` file that holds one JSON array: its items (``_array_rows``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{file}: cannot read ({exc}); check the file's permissions") from None
    if path.suffix == ".json" and data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        yield from _array_rows(file, data)
        return
    lines = data.splitlines()
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            # utf-8-sig: a file saved with a byte-order mark (Notepad, Excel) reads too
            data = json.loads(raw.decode("utf-8-sig" if i == 1 else "utf-8"))
        except UnicodeDecodeError:
            yield f"line {i}", "not valid UTF-8 text"
            continue
        except json.JSONDecodeError as exc:
            yield f"line {i}", f"invalid JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})"
            continue
        if not isinstance(data, dict):
            yield f"line {i}", f"a row must be a JSON object, got {type(data).__name__}"
            continue
        yield f"line {i}", data


def prompt_problem(row: dict[str, Any], prompt_key: str) -> str | None:
    """What is wrong with ``row[prompt_key]`` as a prompt, or ``None`` when it is usable.

    A prompt is a non-empty string or a non-empty list of ``{role, content}``
    messages whose role and content are strings.
    """
    if prompt_key not in row:
        return (
            f"no '{prompt_key}' field (fields: {sorted(row)}); "
            "set data.prompt_key to the field holding the prompt"
        )
    value = row[prompt_key]
    if isinstance(value, str):
        return None if value.strip() else f"'{prompt_key}' is an empty string"
    if isinstance(value, list):
        if not value:
            return f"'{prompt_key}' is an empty message list"
        for j, msg in enumerate(value, start=1):
            if not isinstance(msg, dict):
                return f"'{prompt_key}' message {j} is a {type(msg).__name__}, not a {{role, content}} object"
            for key in ("role", "content"):
                if not isinstance(msg.get(key), str):
                    return f"'{prompt_key}' message {j}: '{key}' must be a string, got {msg.get(key)!r}"
        return None
    return (
        f"'{prompt_key}' must be a string or a list of {{role, content}} messages, "
        f"got {type(value).__name__}"
    )
