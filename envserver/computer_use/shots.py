"""How much of the screen an answer carries (``"screenshot": "full" | "changed" |
"none"``): the whole screenshot, only the box that changed since the last one this
session was sent (or "unchanged"), or none. Sans-I/O: arrays in, boxes out.

Why: every acting call answering with the whole screen costs a model's context the
same image again when a keypress changed one line (Playwright MCP's most-asked fix was
incremental replies). The box is of the screenshot as scaled for the model, so pasting
it at ``region`` onto the last screenshot gives exactly the new one.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from .errors import ToolError

#: What ``screenshot`` may ask for; true is "full" (the default), false "none".
SHOT_MODES: Final = ("full", "changed", "none")


def shot_mode(value: Any) -> str:
    """The answer's screenshot mode for a call's ``screenshot`` argument."""
    if value is True:
        return "full"
    if value is False:
        return "none"
    if value not in SHOT_MODES:
        raise ToolError(f"'screenshot' is full (the default), changed (only the box that changed "
                        f"since this session's last screenshot, or none if nothing did) or none; "
                        f"not {str(value)[:20]!r}")
    return str(value)


def changed_box(before: np.ndarray | None, after: np.ndarray) -> tuple[int, int, int, int] | None:
    """The box ``(x0, y0, x1, y1)`` (x1, y1 excluded) outside which ``after`` equals
    ``before``; None when nothing differs. A missing or other-sized ``before`` is all changed."""
    height, width = after.shape[:2]
    if before is None or before.shape != after.shape:
        return 0, 0, width, height
    differs = (before != after).any(axis=2)
    rows, cols = np.flatnonzero(differs.any(axis=1)), np.flatnonzero(differs.any(axis=0))
    if rows.size == 0:
        return None
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1
