"""nexrl.core.util.files: a file appears whole or not at all, and no temporary entry stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nexrl.core.util.files import (
    atomic_path,
    atomic_symlink,
    atomic_write_bytes,
    atomic_write_text,
    fsync_tree,
    replace_dir,
)


class Boom(Exception):
    pass


def _names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("fsync", [True, False])
def test_write_bytes_replaces_the_file(tmp_path: Path, fsync: bool) -> None:
    out = tmp_path / "f.bin"
    out.write_bytes(b"old")
    assert atomic_write_bytes(out, b"new", fsync=fsync, fsync_parent=fsync) is True
    assert out.read_bytes() == b"new"
    assert _names(tmp_path) == ["f.bin"]


def test_write_text_encodes(tmp_path: Path) -> None:
    out = tmp_path / "f.txt"
    atomic_write_text(out, "héllo\n", fsync=False, fsync_parent=False)
    assert out.read_bytes() == "héllo\n".encode()
    assert _names(tmp_path) == ["f.txt"]


def test_exclusive_never_replaces_an_existing_name(tmp_path: Path) -> None:
    out = tmp_path / "marker"
    assert atomic_write_bytes(out, b"first", exclusive=True) is True
    assert atomic_write_bytes(out, b"second", exclusive=True) is False
    assert out.read_bytes() == b"first"
    assert _names(tmp_path) == ["marker"]


def test_mode_is_the_new_files_permissions(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        atomic_write_bytes(tmp_path / "a", b"", mode=0o644)
        atomic_write_bytes(tmp_path / "b", b"")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o664  # as open(): 0o666 less umask


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "f.bin"
    out.write_bytes(b"old")
    # The temporary file exists by the time write() refuses a str.
    with pytest.raises(TypeError):
        atomic_write_bytes(out, "not bytes")  # type: ignore[arg-type]
    assert out.read_bytes() == b"old"
    assert _names(tmp_path) == ["f.bin"]


def test_atomic_path_publishes_what_the_block_wrote(tmp_path: Path) -> None:
    out = tmp_path / "plot.png"
    out.write_bytes(b"old")
    with atomic_path(out) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".plot.png.tmp-")
        tmp.write_bytes(b"new, part 1;")
        assert out.read_bytes() == b"old"  # not visible before the block ends
        with tmp.open("ab") as f:
            f.write(b" part 2")
    assert out.read_bytes() == b"new, part 1; part 2"
    assert _names(tmp_path) == ["plot.png"]


@pytest.mark.parametrize("existed", [True, False])
def test_a_writer_that_raises_midway_leaves_the_old_state_and_no_temporary(
    tmp_path: Path, existed: bool
) -> None:
    out = tmp_path / "summary.json"
    if existed:
        out.write_text('{"old": true}\n')
    with pytest.raises(Boom), atomic_path(out, fsync=False, fsync_parent=False) as tmp:
        tmp.write_text('{"half": ')
        raise Boom("writer died")
    if existed:
        assert out.read_text() == '{"old": true}\n'
        assert _names(tmp_path) == ["summary.json"]
    else:
        assert _names(tmp_path) == []


def test_atomic_symlink_repoints(tmp_path: Path) -> None:
    link = tmp_path / "latest"
    atomic_symlink("v1", link)
    atomic_symlink("v2", link)
    assert os.readlink(link) == "v2"
    assert _names(tmp_path) == ["latest"]


def test_replace_dir_swaps_a_whole_folder(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "half").write_text("unfinished")
    new = tmp_path / "model.building"
    new.mkdir()
    (new / "config.json").write_text("{}")
    replace_dir(new, tmp_path / "model")
    assert _names(tmp_path) == ["model"]
    assert _names(tmp_path / "model") == ["config.json"]


def test_a_write_that_fails_names_the_file_it_was_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The temporary file is opened on /dev/full, which fails every write with ENOSPC as a
    # full disk does; that error names no file, so atomic_write_bytes names the one it
    # was writing.
    import errno

    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, flags, mode=0o777: real_open("/dev/full", os.O_WRONLY)
    )
    with pytest.raises(OSError) as err:
        atomic_write_bytes(tmp_path / "cursor.json", b"{}")
    monkeypatch.undo()
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / "cursor.json")
    assert not (tmp_path / "cursor.json").exists()


def _fsync_and_hash_in_child(root: str) -> None:
    from nexrl.core.util.checksums import tree_checksums

    fsync_tree(root)
    assert len(tree_checksums(root)) == 3


def test_a_forked_child_fsyncs_and_hashes_on_its_own_threads(tmp_path: Path) -> None:
    """The shared I/O pool used in the parent, then a fork (as a multiprocessing
    ``fork`` start or an evaluator's sandbox does): the child's fsyncs and file hashes
    finish instead of waiting on the parent's threads, which the child does not have."""
    import multiprocessing

    from nexrl.core.util.checksums import tree_checksums

    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode() * 1000)
    assert fsync_tree(tmp_path) == 3000 and len(tree_checksums(tmp_path)) == 3  # parent's pool
    child = multiprocessing.get_context("fork").Process(
        target=_fsync_and_hash_in_child, args=(str(tmp_path),)
    )
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
