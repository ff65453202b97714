"""What a runtime drew since the remote last asked: :class:`Damage`, for
:meth:`~runtimes.base.Runtime.take_damage`.

A game that redraws only what moved (the built-in games: a sprite's old place restored
from the base frame, its new place drawn, a HUD gauge whose count changed) knows exactly
which rectangles changed. Reported, they spare the VNC server its compare of the whole
frame against the last one, which was a fifth of a Catch frame's cost in a process of 16
games (py-spy, issue 28).
"""

from __future__ import annotations

import numpy as np

Rect = tuple[int, int, int, int]


def clip(x: int, y: int, w: int, h: int, width: int, height: int) -> Rect | None:
    """(x, y, w, h) cut to a ``width`` x ``height`` screen; None if nothing is left."""
    left, top = max(x, 0), max(y, 0)
    right, bottom = min(x + w, width), min(y + h, height)
    if left >= right or top >= bottom:
        return None
    return left, top, right - left, bottom - top


def restore(fb: np.ndarray, base: np.ndarray, rect: Rect) -> None:
    """Copy ``rect`` of ``base`` onto ``fb`` (erase a sprite from where it was)."""
    x, y, w, h = rect
    fb[y : y + h, x : x + w] = base[y : y + h, x : x + w]


class Damage:
    """The rectangles drawn since :meth:`take`; None after a whole new frame (the server
    then compares it, sending only what really differs)."""

    __slots__ = ("rects",)

    def __init__(self) -> None:
        self.rects: list[Rect] | None = None

    def everything(self) -> None:
        """The whole frame was drawn anew."""
        self.rects = None

    def add(self, rect: Rect | None) -> None:
        if rect is not None and self.rects is not None:
            self.rects.append(rect)

    def take(self) -> list[Rect] | None:
        rects, self.rects = self.rects, []
        return rects
