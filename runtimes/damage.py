"""What a runtime drew since the remote last asked: :class:`Damage`, for
:meth:`~runtimes.base.Runtime.take_damage`.

A game that redraws only what moved (the built-in games: a sprite's old place restored
from the base frame, its new place drawn, a HUD gauge whose count changed) knows exactly
which rectangles changed. Reported, they spare the VNC server its compare of the whole
frame against the last one, which was a fifth of a Catch frame's cost in a process of 16
games (py-spy, issue 28).
"""

from __future__ import annotations

from typing import Final

import numpy as np

Rect = tuple[int, int, int, int]

#: Rectangles kept between two takes; past it the damage is "unknown" (None), so a
#: runtime nobody asks (a gymnasium wrapper of the game, a benchmark) holds no growing
#: list, and the server compares instead of sending a long list of small rectangles.
MAX_DAMAGE_RECTS: Final = 64


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
        rects = self.rects
        if rect is not None and rects is not None:
            if len(rects) >= MAX_DAMAGE_RECTS:
                self.rects = None
            else:
                rects.append(rect)

    def take(self) -> list[Rect] | None:
        rects, self.rects = self.rects, []
        return rects
