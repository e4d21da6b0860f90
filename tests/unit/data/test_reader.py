"""Reading parquet and JSON-lines prompt files: order, bad rows, unusable files."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.core.data import DataError, read_rows
from tests.unit.data._datafiles import numbered_prompts, write_jsonl, write_parquet

CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]


def test_several_files_are_concatenated_in_the_order_given(tmp_path: Path) -> None:
    a = write_parquet(tmp_path / "a.parquet", numbered_prompts(0, 3))
    b = write_jsonl(tmp_path / "b.jsonl", numbered_prompts(3, 2))
    c = write_parquet(tmp_path / "c.pq", numbered_prompts(5, 1))
    result = read_rows([b, a, c])
    assert [r.data["answer"] for r in result.rows] == ["3", "4", "0", "1", "2", "5"]
    assert [(r.file, r.position) for r in result.rows[:3]] == [
        (b, "line 1"),
        (b, "line 2"),
        (a, "row 1"),
    ]
    assert result.skipped == []


def test_chat_prompts_keep_their_structure_in_both_formats(tmp_path: Path) -> None:
    rows = [{"messages": CHAT, "id": 7}]
    for path in (
        write_parquet(tmp_path / "c.parquet", rows),
        write_jsonl(tmp_path / "c.jsonl", rows),
    ):
        (row,) = read_rows([path], prompt_key="messages").rows
        assert row.data == {"messages": CHAT, "id": 7}


def test_blank_jsonl_lines_are_ignored_but_counted_in_line_numbers(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}, "", "   ", {"prompt": "b"}])
    rows = read_rows([path]).rows
    assert [(r.position, r.data["prompt"]) for r in rows] == [("line 1", "a"), ("line 4", "b")]


BAD_JSONL_LINES = [
    ('{"prompt": "ok"', "invalid JSON (Expecting ',' delimiter at column 16)"),
    ('{"prompt": "ok', "invalid JSON (Unterminated string starting at column 12)"),
    ('{"prompt": "ok"} x', "invalid JSON (Extra data at column 18)"),
    ('["prompt"]', "must be a JSON object, got list"),
    ('{"question": "x"}', "no 'prompt' field"),
    ('{"prompt": 3}', "must be a string or a list"),
    ('{"prompt": ""}', "empty string"),
    ('{"prompt": []}', "empty message list"),
    ('{"prompt": [{"role": "user"}]}', "message 1: 'content' must be a string"),
    ('{"prompt": ["hi"]}', "message 1 is a str"),
]


@pytest.mark.parametrize(("line", "problem"), BAD_JSONL_LINES)
def test_bad_jsonl_row_is_an_error_naming_file_and_line(
    tmp_path: Path, line: str, problem: str
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "fine"}, {"prompt": "fine too"}, line])
    with pytest.raises(DataError) as info:
        read_rows([path])
    msg = str(info.value)
    assert msg.startswith(f"{path}, line 3: ")
    assert problem in msg
    assert "data.bad_rows=skip" in msg


def test_bad_parquet_row_is_an_error_naming_file_and_row(tmp_path: Path) -> None:
    path = write_parquet(
        tmp_path / "p.parquet", [{"prompt": "a"}, {"prompt": None}, {"prompt": "c"}]
    )
    with pytest.raises(DataError) as info:
        read_rows([path])
    assert str(info.value).startswith(f"{path}, row 2: 'prompt' must be a string")


def test_skip_mode_drops_and_counts_bad_rows(tmp_path: Path) -> None:
    good = write_parquet(tmp_path / "good.parquet", numbered_prompts(0, 2))
    lines: list[dict[str, object] | str] = [{"prompt": "x"}, *(line for line, _ in BAD_JSONL_LINES)]
    bad = write_jsonl(tmp_path / "bad.jsonl", [*lines, {"prompt": "y"}])
    result = read_rows([good, bad], bad_rows="skip")
    assert [r.data["prompt"] for r in result.rows] == ["question 0", "question 1", "x", "y"]
    assert len(result.skipped) == len(BAD_JSONL_LINES)
    assert result.skipped[0].startswith(f"{bad}, line 2: invalid JSON")
    assert result.skipped[-1].startswith(f"{bad}, line {len(BAD_JSONL_LINES) + 1}: ")


def test_missing_file_names_the_file_and_the_setting(tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", numbered_prompts(0, 1))
    missing = str(tmp_path / "nope.parquet")
    with pytest.raises(DataError) as info:
        read_rows([good, missing])
    assert str(info.value).startswith(f"{missing}: data file not found")
    assert "data.data_files" in str(info.value)


def test_unusable_files_are_errors_in_skip_mode_too(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match=r"corrupt.parquet: cannot read as parquet"):
        read_rows([str(corrupt)], bad_rows="skip")

    csv = tmp_path / "rows.csv"
    csv.write_text("prompt\nhi\n")
    with pytest.raises(DataError, match=r"unsupported file type '.csv'.*\.parquet.*\.jsonl"):
        read_rows([str(csv)], bad_rows="skip")

    with pytest.raises(DataError, match="is a folder"):
        read_rows([str(tmp_path)])

    with pytest.raises(DataError, match="no data files given"):
        read_rows([])


def test_parquet_without_the_prompt_column_names_columns_and_setting(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "q.parquet", [{"question": "a", "answer": "b"}])
    with pytest.raises(DataError) as info:
        read_rows([path], bad_rows="skip")
    msg = str(info.value)
    assert msg.startswith(f"{path}: no column 'prompt'")
    assert "'question'" in msg and "data.prompt_key" in msg
    assert len(read_rows([path], prompt_key="question").rows) == 1


def test_invalid_utf8_line_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    result = read_rows([str(path)], bad_rows="skip")
    assert len(result.rows) == 1
    assert result.skipped == [f"{path}, line 2: not valid UTF-8 text"]


def test_a_file_saved_with_a_byte_order_mark_and_crlf_reads(tmp_path: Path) -> None:
    """As Notepad or Excel write a file: every row was read, the first refused
    ("Unexpected UTF-8 BOM")."""
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "one"}\r\n{"prompt": "two"}\r\n')
    result = read_rows([str(path)])
    assert [r.data["prompt"] for r in result.rows] == ["one", "two"]
    assert result.skipped == []


def test_a_json_file_is_an_array_of_rows_or_json_lines(tmp_path: Path) -> None:
    """``json.dump(rows, f)`` writes an array; ``datasets.Dataset.to_json`` writes JSON
    lines under a .json name: both read (a .json file was refused as unsupported)."""
    array = tmp_path / "array.json"
    array.write_text('\n [{"prompt": "one"},\n {"prompt": "two"}, 3]\n')
    result = read_rows([str(array)], bad_rows="skip")
    assert [(r.position, r.data["prompt"]) for r in result.rows] == [
        ("item 1", "one"),
        ("item 2", "two"),
    ]
    assert result.skipped == [f"{array}, item 3: a row must be a JSON object, got int"]
    lines = write_jsonl(tmp_path / "lines.json", [{"prompt": "a"}, {"prompt": "b"}])
    assert [r.position for r in read_rows([lines]).rows] == ["line 1", "line 2"]
    broken = tmp_path / "broken.json"
    broken.write_text('[{"prompt": "one"},\n {"prompt": }]')
    with pytest.raises(DataError) as err:
        read_rows([str(broken)])
    assert str(err.value) == f"{broken}: invalid JSON (Expecting value at line 2, column 13)"


def test_head_rows_reads_every_row_with_n_none(tmp_path: Path) -> None:
    """``--check --all-rows`` reads every row of a parquet file (several row groups) and of
    a JSON-lines file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nexrl.core.data.reader import head_rows

    path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist(numbered_prompts(0, 7)), path, row_group_size=3)
    assert len(head_rows(str(path), 2)) == 2
    every = head_rows(str(path), None)
    assert [p for p, _ in every] == [f"row {i}" for i in range(1, 8)]
    jsonl = write_jsonl(tmp_path / "j.jsonl", numbered_prompts(0, 7))
    assert len(head_rows(jsonl, None)) == 7
