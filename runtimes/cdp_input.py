"""Our input events as Chrome DevTools input: keys and pointer straight into the page.

Holds :class:`InputMapper` (VNC-style :class:`~runtimes.base.KeyEvent` and
:class:`~runtimes.base.PointerEvent` -> CDP ``Input.dispatchKeyEvent`` /
``Input.dispatchMouseEvent`` commands, keeping the buttons, keys and modifiers held),
:class:`CDPInput` (sends them), :data:`KEYS` (the keys it knows) and the limits.

**Why.** X input reaches Chromium on its own time: nothing says it was handled before
the page's clock moves on. A DevTools input command returns once the renderer handled
the event (its listeners ran), so in lockstep (``runtimes.page_clock``) an action lands
in the step it was sent in, every run. Coordinates are CSS pixels of the page, which
are screen pixels for a kiosk window at (0, 0) with device scale factor 1.

**Keys** are X keysym names (``"a"``, ``"A"``, ``"exclam"``, ``"Return"``, ``"Shift_L"``):
printable ASCII types its character (US layout ``code`` and Windows key code, which
Blink's editing shortcuts read: Ctrl+A selects all); Return, BackSpace, Tab, Delete,
Escape, the arrows, Home, End, Prior, Next, and Shift/Control left and right (other
text goes in as ``Input.insertText``: :func:`runtimes.web_keys.text_events`). A key held
over several steps does not repeat (X's auto-repeat is a wall-clock thing). The
browser's own shortcuts never reach it: every event passes a
:class:`~runtimes.browser_keys.KeyGuard` first.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NamedTuple

from vncdriver import keysyms
from vncdriver.errors import UnknownKey

from .base import InputEvent, KeyEvent, PointerEvent
from .browser_keys import KeyGuard
from .cdp import CALL_TIMEOUT, CDPClient

#: Two presses of a button closer than this in time (page ms) and space (px) make a
#: double click (GTK's defaults: gtk-double-click-time 400, gtk-double-click-distance 5).
DOUBLE_CLICK_MS: Final = 400.0
DOUBLE_CLICK_DISTANCE: Final = 5
#: CSS pixels one wheel notch scrolls: what Chromium 156 scrolls for one X wheel button
#: press on Xvnc (measured: 120, animated over ~100 ms of wall time; a DevTools wheel event
#: scrolls its delta at once). tests/runtimes/test_page_clock.py checks both paths agree.
WHEEL_PIXELS: Final = 120.0
#: Largest pointer coordinate sent (X and VNC coordinates are 16-bit): Chromium never
#: answered a mouse event at (-1e308, 1e308), and every later input queued behind it.
MAX_COORDINATE: Final = 0xFFFF
#: Seconds a run of input commands may take past :data:`~runtimes.cdp.CALL_TIMEOUT`, per
#: command: a 2,000-character text is 4,000 key commands in one run, which Chromium takes
#: in about 1.2 s on a quiet machine here (0.3 ms each); 5 ms each allows for a loaded one.
COMMAND_SECONDS: Final = 0.005
#: CDP ``modifiers`` bits.
ALT, CTRL, META, SHIFT = 1, 2, 4, 8


class Key(NamedTuple):
    """What Chromium needs to know of a key: DOM ``key`` and ``code``, the Windows
    virtual key code, the text it types ("" for none), location (1 left, 2 right), and
    the modifier bit it is (0 for none)."""

    key: str
    code: str
    vk: int
    text: str = ""
    location: int = 0
    modifier: int = 0


# US layout: the key each punctuation character is on, its Windows key code, shifted or not.
_PUNCTUATION: Final = {
    "-": ("Minus", 189), "_": ("Minus", 189), "=": ("Equal", 187), "+": ("Equal", 187),
    "[": ("BracketLeft", 219), "{": ("BracketLeft", 219),
    "]": ("BracketRight", 221), "}": ("BracketRight", 221),
    "\\": ("Backslash", 220), "|": ("Backslash", 220), ";": ("Semicolon", 186),
    ":": ("Semicolon", 186), "'": ("Quote", 222), '"': ("Quote", 222), ",": ("Comma", 188),
    "<": ("Comma", 188), ".": ("Period", 190), ">": ("Period", 190), "/": ("Slash", 191),
    "?": ("Slash", 191), "`": ("Backquote", 192), "~": ("Backquote", 192),
    " ": ("Space", 32),
}
_SHIFTED_DIGITS: Final = ")!@#$%^&*("  # the character above each digit 0-9

_SPECIAL: Final = {
    "Return": Key("Enter", "Enter", 13, "\r"),
    "BackSpace": Key("Backspace", "Backspace", 8),
    "Tab": Key("Tab", "Tab", 9),
    "Delete": Key("Delete", "Delete", 46),
    "Escape": Key("Escape", "Escape", 27),
    "Left": Key("ArrowLeft", "ArrowLeft", 37),
    "Up": Key("ArrowUp", "ArrowUp", 38),
    "Right": Key("ArrowRight", "ArrowRight", 39),
    "Down": Key("ArrowDown", "ArrowDown", 40),
    "Home": Key("Home", "Home", 36),
    "End": Key("End", "End", 35),
    "Prior": Key("PageUp", "PageUp", 33),
    "Next": Key("PageDown", "PageDown", 34),
    "Shift_L": Key("Shift", "ShiftLeft", 16, location=1, modifier=SHIFT),
    "Shift_R": Key("Shift", "ShiftRight", 16, location=2, modifier=SHIFT),
    "Control_L": Key("Control", "ControlLeft", 17, location=1, modifier=CTRL),
    "Control_R": Key("Control", "ControlRight", 17, location=2, modifier=CTRL),
}


def _printable(char: str) -> Key:
    if char.isascii() and char.isalpha():
        return Key(char, f"Key{char.upper()}", ord(char.upper()), char)
    if char.isdigit():
        return Key(char, f"Digit{char}", ord(char), char)
    if char in _SHIFTED_DIGITS:
        digit = str(_SHIFTED_DIGITS.index(char))
        return Key(char, f"Digit{digit}", ord(digit), char)
    code, vk = _PUNCTUATION[char]
    return Key(char, code, vk, char)


#: X keysym name -> :class:`Key`, for every key this module can send.
KEYS: Final[dict[str, Key]] = {
    **{keysyms.canonical(chr(c)): _printable(chr(c)) for c in range(0x20, 0x7F)},
    **_SPECIAL,
}

#: VNC button mask bits -> CDP button names and ``buttons`` bits.
_BUTTONS: Final = ((0, "left", 1), (1, "middle", 4), (2, "right", 2))
_WHEEL: Final = ((3, -1.0), (4, 1.0))  # bit 3 wheel up, bit 4 wheel down

Command = tuple[str, dict[str, Any]]


#: Environment variable: ``sequential`` sends every command and waits for its reply
#: before the next (the old way, for benchmarks that compare) instead of in runs.
INPUT_ENV: Final = "UNIVERSE_REMOTE_CDP_INPUT"


class InputMapper:
    """Turns our events into CDP commands, remembering what is held between calls.

    ``now()`` gives the time in milliseconds that double clicks are judged by: the page's
    clock in lockstep (so a double click is one whatever the wall time between steps),
    monotonic wall time by default.
    """

    def __init__(self, now: Callable[[], float] | None = None) -> None:
        self.now = now or (lambda: time.monotonic() * 1000)
        self.position: tuple[int, int] | None = None
        self.mask = 0
        self.keys: dict[str, Key] = {}  # keysym name -> key, held down
        self._last_press: tuple[str, float, int, int] | None = None  # button, time, x, y
        self._click_count = 0

    @property
    def modifiers(self) -> int:
        bits = 0
        for key in self.keys.values():
            bits |= key.modifier
        return bits

    def map(self, event: InputEvent) -> list[Command]:
        """The commands for one event (none when it changes nothing). Raises ValueError
        for a key this module cannot send or a point past :data:`MAX_COORDINATE`."""
        if isinstance(event, KeyEvent):
            return self._key(event)
        if isinstance(event, PointerEvent):
            return self._pointer(event)
        raise TypeError(f"not an input event: {event!r}")

    def release(self) -> list[Command]:
        """Commands that let go of every key and button held (a reset, a mode switch),
        and the click history forgotten: an episode's first click is never the second
        of a double click begun in the one before (or on the page an env switch left)."""
        self._last_press, self._click_count = None, 0
        commands: list[Command] = []
        if self.position is not None and self.mask:
            x, y = self.position
            commands += self._pointer(PointerEvent(x, y, 0))
        for name in list(self.keys):
            commands += self._key(KeyEvent(name, False))
        return commands

    # Keys ----------------------------------------------------------------------------------

    def _key(self, event: KeyEvent) -> list[Command]:
        try:
            name = keysyms.canonical(event.key)
        except UnknownKey:
            name = event.key
        key = KEYS.get(name)
        if key is None:
            raise ValueError(
                f"no DevTools key for {event.key!r}: printable ASCII and "
                f"{', '.join(_SPECIAL)} are sent (other text goes in as Input.insertText)"
            )
        if event.down:
            self.keys[name] = key
        else:
            self.keys.pop(name, None)
        modifiers = self.modifiers
        params: dict[str, Any] = {
            "modifiers": modifiers,
            "key": key.key,
            "code": key.code,
            "windowsVirtualKeyCode": key.vk,
            "nativeVirtualKeyCode": key.vk,
            "location": key.location,
        }
        if not event.down:
            return [("Input.dispatchKeyEvent", {"type": "keyUp", **params})]
        # Ctrl/Alt/Meta + a key is a shortcut, not typing (Blink reads the key code).
        text = key.text if not modifiers & (CTRL | ALT | META) else ""
        if text:
            params.update(type="keyDown", text=text, unmodifiedText=text)
        else:
            params["type"] = "rawKeyDown"
        return [("Input.dispatchKeyEvent", params)]

    # Pointer -------------------------------------------------------------------------------

    def _pointer(self, event: PointerEvent) -> list[Command]:
        x, y, mask = int(event.x), int(event.y), int(event.buttonmask)
        if not (0 <= x <= MAX_COORDINATE and 0 <= y <= MAX_COORDINATE):
            raise ValueError(f"pointer ({x}, {y}) is off any screen: coordinates are 0..{MAX_COORDINATE}")
        commands: list[Command] = []
        if (x, y) != self.position:
            self.position = (x, y)
            commands.append(self._mouse("mouseMoved", self._held_button(self.mask), 0))
        for bit, button, _ in _BUTTONS:
            was, now = self.mask >> bit & 1, mask >> bit & 1
            if now and not was:
                self.mask |= 1 << bit
                count = self._count_click(button, x, y)
                commands.append(self._mouse("mousePressed", button, count))
            elif was and not now:
                self.mask &= ~(1 << bit)
                commands.append(self._mouse("mouseReleased", button, self._click_count))
        for bit, direction in _WHEEL:
            was, now = self.mask >> bit & 1, mask >> bit & 1
            if now and not was:  # a notch is a press (and its release) of the wheel button
                wheel = self._mouse("mouseWheel", "none", 0)
                wheel[1].update(deltaX=0, deltaY=direction * WHEEL_PIXELS)
                commands.append(wheel)
            self.mask = self.mask | 1 << bit if now else self.mask & ~(1 << bit)
        return commands

    def _count_click(self, button: str, x: int, y: int) -> int:
        now = self.now()
        last = self._last_press
        if (
            last is not None
            and last[0] == button
            and now - last[1] <= DOUBLE_CLICK_MS
            and math.hypot(x - last[2], y - last[3]) <= DOUBLE_CLICK_DISTANCE
        ):
            self._click_count += 1
        else:
            self._click_count = 1
        self._last_press = (button, now, x, y)
        return self._click_count

    def _held_button(self, mask: int) -> str:
        return next((button for bit, button, _ in _BUTTONS if mask >> bit & 1), "none")

    def _mouse(self, kind: str, button: str, count: int) -> Command:
        assert self.position is not None
        buttons = sum(cdp_bit for bit, _, cdp_bit in _BUTTONS if self.mask >> bit & 1)
        x, y = self.position
        return (
            "Input.dispatchMouseEvent",
            {
                "type": kind, "x": x, "y": y, "button": button, "buttons": buttons,
                "clickCount": count, "modifiers": self.modifiers,
            },
        )


class CDPInput:
    """Sends our events to the page behind ``cdp``, in order, each handled by the page
    before the next, all before :meth:`send` returns."""

    def __init__(
        self,
        cdp: CDPClient,
        now: Callable[[], float] | None = None,
        after_wheel: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.cdp = cdp
        self.mapper = InputMapper(now)
        #: Takes the browser's shortcuts out of every event stream sent here.
        self.guard = KeyGuard()
        #: Awaited after a wheel event: the compositor scrolls on its own thread and the
        #: page sees it at Chromium's next frame (``PageClock.rendered`` waits for that).
        self.after_wheel = after_wheel

    async def send(self, events: Sequence[InputEvent]) -> None:
        """Send ``events``' commands in runs, each run in one write and one round trip
        instead of one per command: Chromium hands a page its input in the order it came,
        so each event is still handled before the next. A run holds keys only or mouse
        events only, and at most one pointer move (Blink merges moves that wait together,
        and whether two waited together would depend on timing); a wheel notch goes alone
        and waits for the frame that scrolls (:attr:`after_wheel`)."""
        events = self.guard.filter(events)
        if os.environ.get(INPUT_ENV) == "sequential":  # the old way, for benchmarks
            for event in events:
                for method, params in self.mapper.map(event):
                    await self.cdp.call(method, params)
                    if params["type"] == "mouseWheel" and self.after_wheel is not None:
                        await self.after_wheel()
            return
        run: list[Command] = []
        kind, moved = "", False
        for event in events:
            for method, params in self.mapper.map(event):
                wheel = params["type"] == "mouseWheel"
                move = params["type"] == "mouseMoved"
                if run and (method != kind or wheel or (move and moved)):
                    await self.cdp.call_many(run, _run_timeout(run))
                    run, moved = [], False
                if wheel:
                    await self.cdp.call(method, params)
                    if self.after_wheel is not None:
                        await self.after_wheel()
                    continue
                run.append((method, params))
                kind, moved = method, moved or move
        if run:
            await self.cdp.call_many(run, _run_timeout(run))

    async def unbuffered(self) -> None:
        """Have Chromium dispatch pointer moves at once instead of at its next frame.

        Blink holds ``mousemove`` (and wheel) events until the next animation frame and
        the command returns after it (a frame period); with DevTools' overlay on
        (``DOM.enable`` then ``Overlay.enable``, which draws nothing until asked) it
        dispatches them as they come, as for a debugger (benchmarks/RESULTS.md).
        """
        await self.cdp.call("DOM.enable")
        await self.cdp.call("Overlay.enable")

    async def release(self) -> None:
        """Let go of every key and button held."""
        for method, params in self.mapper.release():
            await self.cdp.call(method, params)
        self.guard.forget()


def _run_timeout(run: Sequence[Command]) -> float:
    """Seconds a run of commands may take (:data:`COMMAND_SECONDS`)."""
    return CALL_TIMEOUT + len(run) * COMMAND_SECONDS
