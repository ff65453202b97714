"""Change tracking in tiles, sans I/O: which parts of a frame changed, as rectangles.

Holds the tile differ (:func:`changed_tile_mask`, its allocation-free form
:class:`TileDiffer`, :func:`changed_tiles`), the conversions between tile masks and
rectangles (:func:`tile_mask_to_rects`, :func:`rows_to_rects`, :func:`rects_to_tile_mask`)
and rectangle geometry (:func:`merge_rects`, :func:`clip_rect`, :func:`rects_inside`).
:class:`~.server.VNCServer` diffs each frame once here for all its clients;
:class:`~.server_protocol.ServerProtocol` turns a client's dirty tiles or damage into the
rectangles of its next update. numpy only: no asyncio, no sockets.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import LocalProtocolError

__all__ = [
    "MERGE_SLACK_PIXELS",
    "TILE",
    "Rect",
    "TileDiffer",
    "changed_tile_mask",
    "changed_tiles",
    "clip_rect",
    "merge_rects",
    "rects_inside",
    "rects_to_tile_mask",
    "rows_to_rects",
    "tile_mask_to_rects",
]

#: (x, y, width, height)
Rect = tuple[int, int, int, int]

#: Tile edge for change tracking: 64 like ZRLE's tiles, 192 bytes a row (a multiple of 8).
TILE = 64
#: Two damage rectangles are sent as their bounding box when it is no more than this
#: many pixels larger than the two: a rectangle's header and its decoder's fixed costs
#: (a few numpy calls on each side) are worth about this many pixels of Raw.
MERGE_SLACK_PIXELS = 1024

def changed_tile_mask(prev: np.ndarray, cur: np.ndarray, tile: int = TILE) -> np.ndarray:
    """bool[tiles down, tiles across]: which tiles differ between two uint8[H, W, 3] frames.

    Rows are compared as uint64 (or the widest unit the row length allows), never pixel
    by pixel; ``tile * 3`` must be a multiple of that unit, which 64 is for every unit.
    The plan (unit, reduce indices) is cached per shape: on a 160x210 frame the numpy
    calls' fixed costs are most of the work.
    """
    if prev.shape != cur.shape:
        raise LocalProtocolError(f"frames differ in shape: {prev.shape} and {cur.shape}")
    h, w = cur.shape[:2]
    channels = cur.shape[2] if cur.ndim == 3 else 1
    dtype, cols, rows = _diff_plan(h, w, channels, tile)
    a = np.ascontiguousarray(prev).view(np.uint8).reshape(h, -1).view(dtype)
    b = np.ascontiguousarray(cur).view(np.uint8).reshape(h, -1).view(dtype)
    differ = a != b
    return np.logical_or.reduceat(np.logical_or.reduceat(differ, cols, axis=1), rows, axis=0)


@functools.lru_cache(maxsize=32)
def _diff_plan(
    h: int, w: int, channels: int, tile: int
) -> tuple[np.dtype[Any], np.ndarray, np.ndarray]:
    """(compare unit, first unit of each tile column, first row of each tile row) for
    frames of this shape."""
    row_bytes, tile_bytes = w * channels, tile * channels
    unit = next(u for u in (8, 4, 2, 1) if row_bytes % u == 0 and tile_bytes % u == 0)
    cols = np.arange(0, row_bytes // unit, tile_bytes // unit)
    rows = np.arange(0, h, tile)
    cols.flags.writeable = rows.flags.writeable = False
    return np.dtype(f"u{unit}"), cols, rows


class TileDiffer:
    """:func:`changed_tile_mask` for a server that diffs the same two arrays every frame.

    It keeps the arrays' compare views and the intermediate and result buffers, so a
    frame costs three numpy calls and no allocation (the fixed costs are most of the work
    on a 160x210 frame). The mask it returns is its own and is overwritten by the next
    call: use it before then.
    """

    def __init__(self, tile: int = TILE) -> None:
        self.tile = tile
        self._key: tuple[Any, ...] = ()
        self._views: tuple[np.ndarray, np.ndarray] | None = None
        self._differ = self._columns = self._mask = np.zeros((0, 0), bool)
        self._cols = self._rows = np.zeros(0, np.intp)

    def mask(self, prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
        """bool[tiles down, tiles across]: which tiles differ (as :func:`changed_tile_mask`)."""
        key = self._key  # the arrays themselves (kept alive here) and their shapes
        if not key or prev is not key[0] or cur is not key[1] or key[2] != (prev.shape, cur.shape):
            if prev.shape != cur.shape:
                raise LocalProtocolError(f"frames differ in shape: {prev.shape} and {cur.shape}")
            if not (prev.flags.c_contiguous and cur.flags.c_contiguous):
                return changed_tile_mask(prev, cur, self.tile)
            h, w = cur.shape[:2]
            channels = cur.shape[2] if cur.ndim == 3 else 1
            dtype, self._cols, self._rows = _diff_plan(h, w, channels, self.tile)
            a = prev.view(np.uint8).reshape(h, -1).view(dtype)
            b = cur.view(np.uint8).reshape(h, -1).view(dtype)
            self._views = (a, b)
            self._differ = np.empty(a.shape, bool)
            self._columns = np.empty((h, len(self._cols)), bool)
            self._mask = np.empty((len(self._rows), len(self._cols)), bool)
            self._key = (prev, cur, (prev.shape, cur.shape))
        assert self._views is not None
        a, b = self._views
        np.not_equal(a, b, out=self._differ)
        np.logical_or.reduceat(self._differ, self._cols, axis=1, out=self._columns)
        np.logical_or.reduceat(self._columns, self._rows, axis=0, out=self._mask)
        return self._mask


def rects_to_tile_mask(
    rects: Sequence[Rect], width: int, height: int, tile: int = TILE
) -> np.ndarray:
    """bool[tiles down, tiles across]: the tiles the rectangles touch (a damage report)."""
    mask = np.zeros((-(-height // tile), -(-width // tile)), bool)
    for x, y, w, h in rects:
        if w > 0 and h > 0:
            mask[max(y, 0) // tile : (min(y + h, height) - 1) // tile + 1,
                 max(x, 0) // tile : (min(x + w, width) - 1) // tile + 1] = True
    return mask


def tile_mask_to_rects(mask: np.ndarray, width: int, height: int, tile: int = TILE) -> list[Rect]:
    """Rectangles covering the true tiles: runs in a row merged, equal runs stacked.

    Plain Python over ``mask.tolist()``: masks are small (12 tiles at 160x210, 192 at
    1024x768), where a numpy call per row cost more than the loop."""
    return rows_to_rects(mask.tolist(), width, height, tile)


def rows_to_rects(rows: list[list[bool]], width: int, height: int, tile: int) -> list[Rect]:
    """:func:`tile_mask_to_rects` of a mask already turned into lists (a part of a client's
    dirty tiles, which :class:`~.server_protocol.ServerProtocol` reads as lists anyway)."""
    rects: list[Rect] = []
    open_spans: dict[tuple[int, int], int] = {}  # (first col, end col) -> first row
    for r in range(len(rows) + 1):
        spans: set[tuple[int, int]] = set()
        if r < len(rows):
            row = rows[r]
            c, n = 0, len(row)
            while c < n:
                if row[c]:
                    start = c
                    while c < n and row[c]:
                        c += 1
                    spans.add((start, c))
                else:
                    c += 1
        if open_spans:
            for span in list(open_spans):
                if span not in spans:
                    first_row = open_spans.pop(span)
                    x, y = span[0] * tile, first_row * tile
                    rects.append(
                        (x, y, min(span[1] * tile, width) - x, min(r * tile, height) - y)
                    )
        for span in spans:
            open_spans.setdefault(span, r)
    rects.sort(key=_top_left)
    return rects


def _top_left(rect: Rect) -> tuple[int, int]:
    return rect[1], rect[0]


def changed_tiles(prev: np.ndarray, cur: np.ndarray, tile: int = TILE) -> list[Rect]:
    """The changed areas between two frames as rectangles of whole tiles (clipped)."""
    h, w = cur.shape[:2]
    return tile_mask_to_rects(changed_tile_mask(prev, cur, tile), w, h, tile)

def merge_rects(rects: Sequence[Rect]) -> list[Rect]:
    """Rectangles that cover ``rects``: repeats dropped, and two replaced by their bounding
    box wherever it is at most :data:`MERGE_SLACK_PIXELS` larger than both (a sprite's
    old and new places, which overlap, become one)."""
    out: list[Rect] = []
    for rect in dict.fromkeys(rects):  # repeats out, order kept
        x, y, w, h = rect
        if w <= 0 or h <= 0:
            continue
        merged = True
        while merged:
            merged = False
            for i, (ox, oy, ow, oh) in enumerate(out):
                left, top = min(x, ox), min(y, oy)
                right, bottom = max(x + w, ox + ow), max(y + h, oy + oh)
                if (right - left) * (bottom - top) <= w * h + ow * oh + MERGE_SLACK_PIXELS:
                    x, y, w, h = left, top, right - left, bottom - top
                    del out[i]
                    merged = True
                    break
        out.append((x, y, w, h))
    return out


def clip_rect(rect: Rect, x0: int, y0: int, x1: int, y1: int) -> Rect:
    """``rect`` cut to the area from (x0, y0) to (x1, y1), possibly empty."""
    x, y, w, h = rect
    cx0, cy0 = max(x, x0), max(y, y0)
    cx1, cy1 = min(x + w, x1), min(y + h, y1)
    return cx0, cy0, max(0, cx1 - cx0), max(0, cy1 - cy0)


def rects_inside(rects: Sequence[Rect], width: int, height: int) -> list[Rect]:
    """``rects`` cut to a width x height screen, the empty ones dropped (a runtime's report
    is trusted for what changed, not for its bounds)."""
    out = []
    for x, y, w, h in rects:
        left, top = max(x, 0), max(y, 0)
        right, bottom = min(x + w, width), min(y + h, height)
        if left < right and top < bottom:
            out.append((left, top, right - left, bottom - top))
    return out
