"""A batch's frames in one segment (rewarder/shm_slots.py): the remote's SlotSegment
writes them, the agent's SlotReader copies chosen slots into chosen rows of a batch
with one ``preadv`` and says which frame each slot held (no sockets: the file itself)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rewarder.shm import PIXELS_AT
from rewarder.shm_slots import SlotReader, SlotSegment, stride_of

#: (height, width): slots with a pad to the next 64-byte boundary, and slots without one.
SIZES = [(3, 5), (4, 16)]


@pytest.mark.parametrize("size", SIZES, ids=["padded", "unpadded"])
def test_slots_go_into_the_rows_asked_each_named_by_its_header(size: tuple[int, int]) -> None:
    height, width = size
    assert (stride_of(height, width) > PIXELS_AT + height * width * 3) is (size == SIZES[0])
    segment = SlotSegment(4, height, width)
    try:
        frames = [np.full((height, width, 3), 10 + i, np.uint8) for i in range(4)]
        for slot in (0, 1, 3):
            segment.write(slot, frames[slot], 100 + slot, 7)
        reader = SlotReader(*segment.reply)
        for _ in range(2):  # (the second read reuses the first's buffers)
            batch = np.zeros((6, height, width, 3), np.uint8)
            held = reader.read_rows(batch, [5, 0, 2, 1])
            assert held == [(100, 7), (101, 7), None, (103, 7)]  # slot 2: never written
            assert (batch[5] == 10).all() and (batch[0] == 11).all() and (batch[1] == 13).all()
            assert not batch[[2, 3, 4]].any()  # (slot 2's zero pixels; rows not asked for)
        assert reader.read_rows(np.zeros((1, height, width, 3), np.uint8), [0]) == [(100, 7)]
        # read_plain: the same copies, and whether each slot held the frame named
        batch = np.zeros((6, height, width, 3), np.uint8)
        assert reader.read_plain(batch, (5, 0), [100, 101], [7, 7])
        assert (batch[5] == 10).all() and (batch[0] == 11).all() and not batch[1:5].any()
        assert reader.read_plain(batch, (1, 2, 3), [100, 101, 102], [7, 7, 7]) is False  # (slot 2: unwritten)
        assert reader.read_plain(batch, (1, 2), [100, 102], [7, 7]) is False  # another frame
        assert reader.read_plain(batch, (1, 2), [100, 101], [7, 8]) is False  # another episode
        turned = SlotReader(segment.name, width, height, segment.stride)  # (slots as long, turned)
        assert turned.read_plain(np.zeros((1, width, height, 3), np.uint8), (0,), [100], [7]) is False
        turned.close()
        reader.close()
    finally:
        segment.close()


def test_a_truncated_segment_or_a_slot_of_another_shape_is_an_error_not_a_frame() -> None:
    height, width = SIZES[0]
    segment = SlotSegment(2, height, width)
    try:
        segment.write(0, np.ones((height, width, 3), np.uint8), 1, 1)
        segment.write(1, np.ones((height, width, 3), np.uint8), 2, 1)
        reader = SlotReader(*segment.reply)
        batch = np.zeros((2, height, width, 3), np.uint8)
        with segment.path.open("r+b") as f:  # slot 1's header says another width
            f.seek(segment.stride + 28)
            f.write((width + 1).to_bytes(4, "little"))
        with pytest.raises(ValueError, match="slot 1 .* holds no"):
            reader.read_rows(batch, [0, 1])
        os.truncate(segment.path, segment.stride + PIXELS_AT)
        with pytest.raises(ValueError, match="truncated"):
            reader.read_rows(batch, [0, 1])
        reader.close()
    finally:
        segment.close()
