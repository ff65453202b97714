"""Set-of-marks: the page's elements drawn over a frame as boxes labelled with their bids.

Holds :func:`draw_marks` (an RGB frame and the elements of an observation -> a new frame
with a box around each and its bid in a filled tag at the box's top left: what
BrowserGym calls ``set_of_marks``, for agents that read pixels) and :func:`marked`
(which elements get a mark). Elements may be :class:`~runtimes.page_structure.Element`
objects or the dicts of an observation body. Needs Pillow (its built-in font).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import numpy as np

from .page_structure import Element

#: Colours of a mark's box and tag, and of the tag's text.
BOX_COLOUR: Final = (255, 0, 160)
TEXT_COLOUR: Final = (255, 255, 255)
#: Marks drawn at most; an observation of thousands of elements would hide the frame.
MAX_MARKS: Final = 500


def _fields(element: Element | Mapping[str, Any]) -> tuple[str, tuple[float, ...], float, bool]:
    if isinstance(element, Element):
        return element.bid, element.bbox, element.visibility, element.clickable
    return (str(element["bid"]), tuple(element["bbox"]), float(element.get("visibility", 0)),
            bool(element.get("clickable")))


def marked(
    elements: Iterable[Element | Mapping[str, Any]], *, clickable_only: bool = True
) -> list[tuple[str, tuple[float, ...]]]:
    """(bid, bbox) of the elements that get a mark: visible ones (and clickable ones
    only, by default), at most :data:`MAX_MARKS`."""
    out = []
    for element in elements:
        bid, bbox, visibility, clickable = _fields(element)
        if visibility > 0 and (clickable or not clickable_only) and bbox[2] > 0 and bbox[3] > 0:
            out.append((bid, bbox))
            if len(out) == MAX_MARKS:
                break
    return out


def draw_marks(
    frame: np.ndarray,
    elements: Iterable[Element | Mapping[str, Any]],
    *,
    frame_origin: tuple[int, int] = (0, 0),
    clickable_only: bool = True,
) -> np.ndarray:
    """A copy of ``frame`` (height x width x 3, uint8) with a box and bid tag for each
    marked element; boxes are screen pixels, ``frame_origin`` is where the frame starts
    on the screen."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ModuleNotFoundError as exc:  # pragma: no cover - Pillow comes with the test extra
        raise ModuleNotFoundError("set-of-marks needs Pillow: pip install Pillow", name=exc.name) from None
    image = Image.fromarray(np.ascontiguousarray(frame[..., :3]), "RGB")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    ox, oy = frame_origin
    marks = marked(elements, clickable_only=clickable_only)
    marks.sort(key=lambda mark: -mark[1][2] * mark[1][3])  # small ones last: their tags on top
    for bid, (x, y, w, h) in marks:
        left, top = round(x) - ox, round(y) - oy
        right, bottom = left + max(1, round(w)) - 1, top + max(1, round(h)) - 1
        draw.rectangle((left, top, right, bottom), outline=BOX_COLOUR)
        tx0, ty0, tx1, ty1 = draw.textbbox((left, top), bid, font=font)
        draw.rectangle((left, top, left + (tx1 - tx0) + 2, top + (ty1 - ty0) + 2), fill=BOX_COLOUR)
        draw.text((left + 1 - (tx0 - left), top + 1 - (ty0 - top)), bid, fill=TEXT_COLOUR, font=font)
    return np.asarray(image, dtype=np.uint8).copy()
