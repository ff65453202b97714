"""The tile differ and rectangle geometry (``vncdriver.tiles``), against naive versions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from vncdriver.errors import LocalProtocolError
from vncdriver.tiles import (
    TileDiffer,
    changed_tile_mask,
    changed_tiles,
    clip_rect,
    rects_inside,
    rects_to_tile_mask,
    tile_mask_to_rects,
)


def reference_mask(prev: np.ndarray, cur: np.ndarray, tile: int) -> np.ndarray:
    h, w = cur.shape[:2]
    mask = np.zeros((-(-h // tile), -(-w // tile)), bool)
    for ty in range(mask.shape[0]):
        for tx in range(mask.shape[1]):
            sl = np.s_[ty * tile : (ty + 1) * tile, tx * tile : (tx + 1) * tile]
            mask[ty, tx] = not np.array_equal(prev[sl], cur[sl])
    return mask


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 200),
    w=st.integers(1, 200),
    seed=st.integers(0, 2**32),
    changes=st.integers(0, 6),
    tile=st.sampled_from([64, 16, 32]),
)
def test_changed_tiles_match_a_naive_diff(
    h: int, w: int, seed: int, changes: int, tile: int
) -> None:
    rng = np.random.default_rng(seed)
    prev = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    cur = prev.copy()
    for _ in range(changes):
        y, x = rng.integers(0, h), rng.integers(0, w)
        cur[y, x, rng.integers(0, 3)] ^= 1 << int(rng.integers(0, 8))
    mask = changed_tile_mask(prev, cur, tile)
    assert np.array_equal(mask, reference_mask(prev, cur, tile))
    rects = changed_tiles(prev, cur, tile)
    covered = np.zeros((h, w), bool)
    for x, y, rw, rh in rects:
        assert rw > 0 and rh > 0 and x + rw <= w and y + rh <= h
        assert not covered[y : y + rh, x : x + rw].any()  # no overlaps
        covered[y : y + rh, x : x + rw] = True
    expected = np.repeat(np.repeat(mask, tile, 0), tile, 1)[:h, :w]
    assert np.array_equal(covered, expected)


def test_tile_rects_merge_rows_and_columns() -> None:
    mask = np.array([[1, 1, 0, 1], [1, 1, 0, 0], [0, 0, 0, 1]], bool)
    assert tile_mask_to_rects(mask, 250, 150) == [
        (0, 0, 128, 128),
        (192, 0, 58, 64),
        (192, 128, 58, 22),
    ]


def test_changed_tiles_full_frame_is_one_rect() -> None:
    a = np.zeros((768, 1024, 3), np.uint8)
    assert changed_tiles(a, a + 1) == [(0, 0, 1024, 768)]
    assert changed_tiles(a, a) == []


@settings(max_examples=40, deadline=None)
@given(
    h=st.integers(1, 150),
    w=st.integers(1, 150),
    seed=st.integers(0, 2**32),
    tile=st.sampled_from([64, 16, 32]),
)
def test_tile_differ_matches_changed_tile_mask_frame_after_frame(
    h: int, w: int, seed: int, tile: int
) -> None:
    rng = np.random.default_rng(seed)
    prev = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    cur = prev.copy()
    differ = TileDiffer(tile)
    for _ in range(4):  # the same two arrays, changed in place, as a server has them
        y, x = rng.integers(0, h), rng.integers(0, w)
        cur[y, x, rng.integers(0, 3)] ^= 1 << int(rng.integers(0, 8))
        assert np.array_equal(differ.mask(prev, cur), changed_tile_mask(prev, cur, tile))
        prev[...] = cur
        assert not differ.mask(prev, cur).any()
    other = rng.integers(0, 256, (h + 1, w, 3), dtype=np.uint8)  # new arrays, new shape
    assert np.array_equal(differ.mask(other, other.copy()), changed_tile_mask(other, other, tile))
    with pytest.raises(LocalProtocolError, match="differ in shape"):
        differ.mask(prev, other)


def test_rects_to_tile_mask_marks_every_tile_a_rect_touches() -> None:
    mask = rects_to_tile_mask([(63, 0, 2, 1), (0, 140, 1, 500), (10, 10, 0, 5)], 200, 150)
    assert mask.tolist() == [
        [True, True, False, False],
        [False, False, False, False],
        [True, False, False, False],
    ]


def test_clip_rect_and_rects_inside_cut_to_the_area() -> None:
    assert clip_rect((10, 10, 50, 50), 20, 0, 40, 30) == (20, 10, 20, 20)
    assert clip_rect((0, 0, 5, 5), 10, 10, 20, 20)[2:] == (0, 0)  # outside: empty
    assert rects_inside([(-5, -5, 10, 10), (190, 140, 50, 50), (300, 0, 5, 5)], 200, 150) == [
        (0, 0, 5, 5),
        (190, 140, 10, 10),
    ]
