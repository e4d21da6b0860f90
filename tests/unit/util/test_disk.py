"""``no_space_left``: a full disk recognised behind the shapes its errors take."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from nexrl.core.util.disk import free_bytes, human_bytes, no_space_left, says_no_space


def test_an_enospc_oserror_names_its_file(tmp_path: Path) -> None:
    err = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "pool.zarr" / "c0"))
    assert no_space_left(err, [tmp_path]) == tmp_path / "pool.zarr" / "c0"


def test_an_enospc_without_a_file_names_the_fullest_written_folder(tmp_path: Path) -> None:
    # a write() that fails has no filename: the folder with the least free space is named
    try:
        with open("/dev/full", "wb", buffering=0) as fh:  # every write: ENOSPC
            fh.write(b"x")
        raise AssertionError("/dev/full accepted a write")
    except OSError as full:
        assert full.errno == errno.ENOSPC and full.filename is None
        wrapped = RuntimeError("saving the checkpoint failed")
        wrapped.__cause__ = full
    assert no_space_left(wrapped, [tmp_path]) == tmp_path


def test_the_text_of_another_process_s_error_is_recognised(tmp_path: Path) -> None:
    # a trainer rank's or a Dask task's error arrives as text
    text = (
        "trainer step failed on rank(s) 0; rank 0: OSError: [Errno 28] No space left on "
        "device: '/runs/x/snapshots/.tmp-v4/model.safetensors'"
    )
    assert says_no_space(text)
    assert no_space_left(RuntimeError(text), [tmp_path]) == Path(
        "/runs/x/snapshots/.tmp-v4/model.safetensors"
    )


def test_a_lost_errno_counts_only_when_a_written_folder_is_really_full(tmp_path: Path) -> None:
    # torch.save: "PytorchStreamWriter failed writing file data/0: file write failed"
    torch_error = RuntimeError(
        "[enforce fail] PytorchStreamWriter failed writing file data/0: file write failed"
    )
    assert shutil.disk_usage(tmp_path).free > 1 << 20  # this folder has room: not a full disk
    assert no_space_left(torch_error, [tmp_path]) is None
    assert no_space_left(ValueError("bad row 3"), [tmp_path]) is None


def test_free_bytes_of_a_path_not_created_yet_is_its_parent_s(tmp_path: Path) -> None:
    # the other tests write meanwhile: the same disk's figure, within a few MiB
    before = shutil.disk_usage(tmp_path).free
    got = free_bytes(tmp_path / "a" / "b")
    assert got is not None
    after = shutil.disk_usage(tmp_path).free
    assert min(before, after) - (8 << 20) <= got <= max(before, after) + (8 << 20)
    assert human_bytes(512) == "512 B" and human_bytes(3 << 20) == "3.0 MiB"
