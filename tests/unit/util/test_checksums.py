"""check_tree names the first file that is missing, shorter or altered."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any, cast

import pytest

from nexrl.core.util import checksums
from nexrl.core.util.checksums import check_tree, tree_checksums, write_hashed
from nexrl.core.util.files import start_writeback


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


@pytest.mark.parametrize("writeback", [False, True])
@pytest.mark.parametrize("buffering", [-1, 0])
@pytest.mark.parametrize("inline", [0, 2500, 1 << 20])
def test_write_hashed_writes_and_hashes_every_byte_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writeback: bool, buffering: int, inline: int
) -> None:
    """Buffers larger and smaller than a piece, empty ones, several kinds of bytes-like,
    a buffered and a raw file, hashed all on the hashing thread, first on the caller's
    thread then on the hashing thread, or all on the caller's: the file holds them in
    order and the digest is the file's sha256. With ``writeback`` the kernel is asked
    to start writing the bytes as they are written, in ranges of at most a piece: the
    ranges asked for cover the file exactly, in order."""
    monkeypatch.setattr(checksums, "WRITE_CHUNK", 1000)  # many pieces per buffer
    monkeypatch.setattr(checksums, "INLINE_HASH_BYTES", inline)
    ranges: list[tuple[int, int]] = []

    def recording(fd: int, offset: int, nbytes: int) -> None:
        ranges.append((offset, nbytes))
        start_writeback(fd, offset, nbytes)  # the real call, on the real file

    monkeypatch.setattr(checksums, "start_writeback", recording)
    import numpy as np

    buffers = [b"head", bytes(range(256)) * 20, b"", bytearray(b"x" * 999),
               memoryview(cast(Any, np.arange(3000, dtype=np.int16))), b"tail"]  # fmt: skip
    path = tmp_path / "f.bin"
    with path.open("wb", buffering=buffering) as fh:
        digest = write_hashed(fh, buffers, writeback=writeback)
    expected = b"".join(bytes(memoryview(b).cast("B")) for b in buffers)
    assert path.read_bytes() == expected
    assert digest == hashlib.sha256(expected).hexdigest()
    if writeback:
        assert ranges[0][0] == 0 and max(n for _, n in ranges) <= 1000
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(ranges))
        assert sum(n for _, n in ranges) == len(expected)
    else:
        assert ranges == []


def test_writeback_on_what_cannot_take_it_is_a_no_op() -> None:
    """A pipe (the kernel refuses sync_file_range there) and an in-memory file (no
    descriptor): the bytes and the digest are as without writeback."""
    import io
    import os
    import threading

    read, write = os.pipe()
    got: list[bytes] = []

    def drain() -> None:
        with os.fdopen(read, "rb") as fh:
            got.append(fh.read())

    reader = threading.Thread(target=drain)
    reader.start()
    with os.fdopen(write, "wb") as fh:
        digest = write_hashed(fh, [b"abc" * 1000], writeback=True)
    reader.join()
    assert got == [b"abc" * 1000] and digest == hashlib.sha256(b"abc" * 1000).hexdigest()
    start_writeback(-1, 0, 10)  # a bad descriptor: refused quietly
    mem = io.BytesIO()
    assert write_hashed(mem, [b"xyz"], writeback=True) == hashlib.sha256(b"xyz").hexdigest()
    assert mem.getvalue() == b"xyz"


def test_write_hashed_stops_its_thread_when_a_write_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full disk (Linux's /dev/full answers every write with ENOSPC): the error
    reaches the caller and the hashing thread is gone."""
    import threading

    monkeypatch.setattr(checksums, "INLINE_HASH_BYTES", 0)  # the thread starts at once
    with open("/dev/full", "wb", buffering=0) as fh, pytest.raises(OSError) as info:
        write_hashed(fh, [b"a" * 10, b"b" * 10])
    assert info.value.errno == 28  # ENOSPC
    assert not [t for t in threading.enumerate() if t.name == "write-hashed"]
