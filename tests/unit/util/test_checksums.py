"""check_tree names the first file that is missing, shorter or altered."""

from __future__ import annotations

import hashlib
from pathlib import Path

from nexrl.util.checksums import check_tree, tree_checksums


def _folder(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"abc")
    (tmp_path / "sub" / "b.bin").write_bytes(bytes(range(256)) * 5000)  # > 1 MiB chunk
    (tmp_path / "manifest.json").write_text("{}")
    return tmp_path


def test_the_manifest_holds_size_and_sha256_of_each_file(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    sums = tree_checksums(root, exclude={"manifest.json"})
    assert sums == {
        "a.bin": {"bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()},
        "sub/b.bin": {
            "bytes": 1_280_000,
            "sha256": hashlib.sha256(bytes(range(256)) * 5000).hexdigest(),
        },
    }
    assert check_tree(root, sums) is None


def test_missing_truncated_and_altered_files_are_named(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    sums = tree_checksums(root, exclude={"manifest.json"})
    b = root / "sub" / "b.bin"
    data = bytearray(b.read_bytes())
    data[700_000] ^= 0x80
    b.write_bytes(bytes(data))  # same length, one bit
    assert check_tree(root, sums) == f"{b} does not match its sha256 checksum (its bytes changed)"
    b.write_bytes(bytes(data[:10]))
    assert check_tree(root, sums) == f"{b} has 10 bytes, 1280000 were written (truncated?)"
    (root / "a.bin").unlink()
    assert check_tree(root, sums) == f"{root / 'a.bin'} is missing"
