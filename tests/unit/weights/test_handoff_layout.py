"""The handoff buffer's layout: a state dict packed flat and read back as views, bit for
bit, in every dtype a snapshot holds; what does not fit is named; the channel on ``shm``
is seen by a second mapping (as the server maps it) and removed at close."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from nexrl.core.weights.handoff import LayoutError, WeightChannel, open_channel, pack, plan_layout
from nexrl.core.weights.handoff.layout import (
    ALIGN,
    HEADER_BYTES,
    layout_from_json,
    layout_to_json,
    read_stamp,
    unpack,
    write_stamp,
)
from nexrl.core.weights.snapshot import prepare_state_dict


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(11, 6, generator=g),
        "layer.0.w": torch.randn(6, 6, generator=g).to(torch.bfloat16),
        "layer.0.b": torch.randn(3, generator=g).to(torch.float16),
        "norm.scale": torch.randn(1, generator=g, dtype=torch.float64),
        "positions": torch.arange(5, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
        "scalar": torch.tensor(2.5),
        "strided": torch.randn(4, 6, generator=g).t(),  # not contiguous
    }


def test_pack_then_unpack_gives_every_tensor_back_exactly() -> None:
    state = _state()
    layout, nbytes = plan_layout(state)
    assert list(layout) == list(state)
    assert all(s.offset % ALIGN == 0 and s.offset >= HEADER_BYTES for s in layout.values())
    ends = sorted((s.offset, s.offset + s.nbytes) for s in layout.values())
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(ends))
    assert nbytes >= ends[-1][1] and nbytes % ALIGN == 0
    buffer = torch.zeros(nbytes, dtype=torch.uint8)
    pack(state, buffer, layout)
    views = unpack(buffer, layout)
    for name, t in state.items():
        assert views[name].dtype == t.dtype and views[name].shape == t.shape
        assert torch.equal(views[name], t), name
        assert views[name].untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()


def test_the_layout_travels_as_json() -> None:
    layout, _ = plan_layout(_state())
    assert layout_from_json(layout_to_json(layout)) == layout
    for bad in ([["w", 3, [2], "float32"]], [["w", 256, [2], "nodtype"]], [["w"]], {"w": 1}):
        with pytest.raises(LayoutError):
            layout_from_json(bad)


def test_tensors_that_do_not_fit_are_named_before_anything_is_copied() -> None:
    state = _state()
    layout, nbytes = plan_layout(state)
    buffer = torch.zeros(nbytes, dtype=torch.uint8)
    with pytest.raises(LayoutError, match="names differ"):
        pack({**state, "extra": torch.zeros(1)}, buffer, layout)
    with pytest.raises(LayoutError, match=r"embed\.weight"):
        pack({**state, "embed.weight": torch.zeros(12, 6)}, buffer, layout)
    with pytest.raises(LayoutError, match=r"layer\.0\.w"):
        pack({**state, "layer.0.w": torch.zeros(6, 6)}, buffer, layout)  # float32, not bf16
    assert not buffer.any()
    with pytest.raises(LayoutError, match="cannot hold"):
        unpack(buffer[:-ALIGN], layout)


def test_the_snapshot_state_dict_packs_with_tied_weights_once() -> None:
    embed = torch.randn(7, 4)
    state = {"embed.weight": embed, "lm_head.weight": embed, "w": torch.randn(4)}
    tensors = prepare_state_dict(state, tie_word_embeddings=True)
    layout, _ = plan_layout(tensors)
    assert list(layout) == ["embed.weight", "w"]


def test_an_shm_channel_is_seen_by_a_second_mapping_and_removed_at_close() -> None:
    state = _state()
    channel = WeightChannel("shm", torch.device("cpu"))
    try:
        desc = channel.write(state, 3)
        server = open_channel(desc)  # as the server maps it: a second mapping of the file
        assert server.stamp() == 3
        assert all(torch.equal(server.views[k], v) for k, v in state.items())
        state["embed.weight"] += 1
        channel.write(state, 4)  # the same buffer, new values, seen through the mapping
        assert server.stamp() == 4 and torch.equal(
            server.views["embed.weight"], state["embed.weight"]
        )
        assert channel.buffer is not None
        write_stamp(channel.buffer, -1)
        assert read_stamp(server.buffer) == -1
        assert channel.descriptor()["id"] == desc["id"]  # allocated once
    finally:
        channel.close()
    assert not os.path.exists(desc["path"])
