"""Which keys a browser remote lets reach its browser: the one policy for every input path.

Holds :func:`browser_command` (a key pressed with modifiers held -> what Chromium would
do with it instead of the page, or None when it is the page's key) and :class:`KeyGuard`
(sans-I/O: a stream of our input events -> the same stream without those commands; one
guard per way into the browser: the X display and DevTools input). Action strings are
refused with a message from :func:`browser_command` (``runtimes.web_keys``); events from
VNC clients, the rewarder, MCP, OpenEnv and dm_env_rpc pass a guard on their way in,
whoever sends them (docs/browser.md, "Keys the browser keeps").

**Why an allow list for Control.** Chromium has dozens of Control shortcuts (tabs,
windows, zoom, reload, the address bar, find, print, save, DevTools, history...), and
each version adds some; a page needs a few: select all, copy, cut, paste, undo, redo,
and the word-wise editing keys. Those pass; every other Control combination is the
browser's. Alt (and Meta, Super, Hyper) with a key is always the browser's (menus,
history), as are the function keys, the context-menu key and the XF86 media and
browser keys. Modifiers alone, Shift with a key and plain keys are the page's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from .base import InputEvent, KeyEvent, PointerEvent

#: Keysyms that are modifiers, by the kind a shortcut cares about.
MODIFIER_KINDS: Final = {
    "Control_L": "Control", "Control_R": "Control", "Shift_L": "Shift", "Shift_R": "Shift",
    **{f"{name}_{side}": "Alt" for name in ("Alt", "Meta", "Super", "Hyper") for side in "LR"},
}
#: Keys a page may take with Control held (Shift or not): select all, copy, cut, paste,
#: undo, redo, and moving or deleting by words and to the ends.
CONTROL_PAGE_KEYS: Final = frozenset(
    {"a", "c", "v", "x", "y", "z", "Left", "Right", "Up", "Down", "Home", "End",
     "BackSpace", "Delete", "Return", "space"}
)
#: Letters a page may take with Control and Shift held: redo and paste as plain text
#: (Control+Shift+a, c, i, j, n, t, w... are Chromium's).
CONTROL_SHIFT_LETTERS: Final = frozenset({"v", "z"})
#: What some Control shortcuts do, for the refusal's message (keys lowercase).
CONTROL_COMMANDS: Final = {
    **dict.fromkeys(("t", "n"), "opens a tab or window"),
    **dict.fromkeys(("w", "q", "F4"), "closes the page"),
    **dict.fromkeys(("plus", "minus", "equal", "underscore", "0", "KP_Add", "KP_Subtract",
                     "KP_0"), "zooms"),
    **dict.fromkeys(("r", "F5"), "reloads the page"),
    **dict.fromkeys(("l", "k", "e", "d"), "goes to the address bar"),
    **dict.fromkeys(("i", "j", "u"), "opens DevTools or the page's source"),
    **dict.fromkeys(("o", "s", "p"), "opens a file, save or print dialog"),
    **dict.fromkeys(("f", "g", "h"), "opens the find bar or history"),
}
#: VNC button-mask bits of the wheel (buttons 4-7): with Control held they zoom.
WHEEL_BITS: Final = 0b1111000
_FUNCTION_KEY: Final = re.compile(r"F\d{1,2}|KP_F\d")
#: Keys that are the browser's alone, whatever is held.
BROWSER_ALONE: Final = frozenset({"Menu", "Help", "Find", "Cancel"})


def _folded(key: str) -> str:
    """A letter in lowercase (Control+T is Control+t to Chromium); other names as they are."""
    return key.lower() if len(key) == 1 else key


def browser_command(held: Iterable[str], key: str) -> str | None:
    """What Chromium does when ``key`` (a keysym name) is pressed with the modifier keysyms
    ``held`` down, when that is a command to the browser rather than a key for the page;
    None for the page's keys (and for modifiers themselves)."""
    if key in MODIFIER_KINDS:
        return None
    kinds = {MODIFIER_KINDS[k] for k in held if k in MODIFIER_KINDS}
    key = _folded(key)
    if _FUNCTION_KEY.fullmatch(key):
        return "is a function key (F5 reloads, F11 leaves full screen, F12 opens DevTools)"
    if key in BROWSER_ALONE or key.startswith("XF86"):
        return "is a key of the browser's own (menus, history, media)"
    if "Alt" in kinds:
        return "with Alt, Meta or Super is the browser's (Alt+Left goes back, Alt+F opens its menu)"
    if "Control" in kinds:
        allowed = key in CONTROL_PAGE_KEYS and (
            "Shift" not in kinds or len(key) > 1 or key in CONTROL_SHIFT_LETTERS
        )
        if not allowed:
            what = CONTROL_COMMANDS.get(key, "is a browser shortcut (tabs, zoom, reload, DevTools...)")
            return what
    return None


class KeyGuard:
    """Drops the browser's commands from a stream of input events (:func:`browser_command`),
    knowing which modifiers the stream holds: a key press that is a command goes nowhere,
    nor does its release; with Control held, the wheel (zoom) is taken off pointer events.
    Everything else passes unchanged, in order. Sans-I/O: one per way into the browser."""

    def __init__(self) -> None:
        self.held: set[str] = set()  # modifier keysyms down, as the stream left them
        self._dropped: set[str] = set()  # presses dropped: their releases go too
        #: Commands dropped so far, and the last one's description (for logs and tests).
        self.refused = 0
        self.last_refused: str | None = None

    def filter(self, events: Sequence[InputEvent]) -> list[InputEvent]:
        """``events`` without the browser's commands."""
        out: list[InputEvent] = []
        for event in events:
            if isinstance(event, KeyEvent):
                if event.key in MODIFIER_KINDS:
                    (self.held.add if event.down else self.held.discard)(event.key)
                elif event.down:
                    what = browser_command(self.held, event.key)
                    if what is not None:
                        self._dropped.add(event.key)
                        self.refused += 1
                        self.last_refused = f"{'+'.join([*sorted(self.held), event.key])} {what}"
                        continue
                elif event.key in self._dropped:
                    self._dropped.discard(event.key)
                    continue
            elif isinstance(event, PointerEvent) and event.buttonmask & WHEEL_BITS and any(
                MODIFIER_KINDS[k] == "Control" for k in self.held
            ):
                self.refused += 1
                self.last_refused = "Control+wheel zooms"
                event = event._replace(buttonmask=event.buttonmask & ~WHEEL_BITS)
            out.append(event)
        return out

    def forget(self) -> None:
        """Everything was let go of (a reset released the keys): nothing held."""
        self.held.clear()
        self._dropped.clear()
