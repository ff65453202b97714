"""Keys of web agents' action strings: names as BrowserGym (Playwright) or X spells them,
key combinations, the text ``fill`` and ``keyboard_type`` type, and the browser's own
shortcuts, which are refused (a zoom stays on for the page's origin).

Holds :class:`ActionError` (what :mod:`runtimes.web_actions` raises too),
:func:`key_name`, :func:`key_combination`, :func:`combination_events`,
:func:`type_events` and their limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from vncdriver import keysyms
from vncdriver.errors import UnknownKey

from .base import InputEvent, KeyEvent

#: Keys in one combination (modifiers and the key): Control+Alt+Shift+Meta+x is five.
MAX_COMBINATION_KEYS: Final = 5
#: Key names of Playwright (BrowserGym's key combinations) that X spells otherwise; its
#: ``KeyA``, ``Digit1``, ``Numpad1`` and ``ShiftLeft`` forms are read by rule
#: (:func:`key_name`), and X's own names are taken as they are.
KEY_NAMES: Final = {
    "ControlOrMeta": "Control_L", "Control": "Control_L", "Shift": "Shift_L", "Alt": "Alt_L",
    "Meta": "Meta_L", "Enter": "Return", "Backspace": "BackSpace", "Escape": "Escape",
    "ArrowLeft": "Left", "ArrowRight": "Right", "ArrowUp": "Up", "ArrowDown": "Down",
    "PageUp": "Prior", "PageDown": "Next", "Space": "space", " ": "space",
    "PrintScreen": "Print", "ContextMenu": "Menu", "CapsLock": "Caps_Lock", "NumLock": "Num_Lock",
    "ScrollLock": "Scroll_Lock", "AltGraph": "ISO_Level3_Shift", "OS": "Super_L",
    "Backquote": "grave", "Quote": "apostrophe",
}
#: Playwright's sided modifiers (``ShiftLeft``, ``MetaRight``): X's ``Shift_L``, ``Meta_R``.
_SIDES: Final = {"Left": "_L", "Right": "_R"}
#: Key combinations Chromium takes as commands to itself, not keys for the page: zoom
#: (it stays on for the page's origin, so every later click lands off its element) and
#: closing, quitting or opening windows (the kiosk's one window gone). Keysyms, the
#: modifiers as X names them; letters lowercase.
BROWSER_SHORTCUTS: Final = frozenset(
    [(mod, key) for mod in ("Control_L", "Control_R", "Meta_L", "Meta_R")
     for key in ("plus", "minus", "equal", "underscore", "0", "KP_Add", "KP_Subtract",
                 "w", "q", "t", "n", "F4")]
    + [("Alt_L", "F4"), ("Alt_R", "F4")]
)
#: Keys Chromium takes alone: F11 leaves the kiosk's full screen.
BROWSER_KEYS: Final = frozenset({"F11"})


class ActionError(ValueError):
    """An action string that is not a call we run; the message says what to write."""


def key_name(name: str, where: str = "key") -> str:
    """The X keysym name of one key as BrowserGym (Playwright) or X spells it."""
    if name in KEY_NAMES:
        return KEY_NAMES[name]
    if len(name) == 4 and name.startswith("Key") and name[3].isalpha():
        return name[3].lower()
    if len(name) == 6 and name.startswith("Digit") and name[5].isdigit():
        return name[5]
    x_name = name
    if name.startswith("Numpad") and len(name) > 6:  # Numpad1, NumpadAdd: the keypad's KP_
        x_name = "KP_" + name[6:]
    for side, suffix in _SIDES.items():
        if name.endswith(side) and name[:-len(side)] in ("Shift", "Control", "Alt", "Meta"):
            x_name = name[:-len(side)] + suffix
    try:
        return keysyms.name(keysyms.keysym(x_name))  # the keysym's own name: Page_Down is Next
    except UnknownKey:
        raise ActionError(f"{where}: unknown key {name!r} (use names such as Enter, Tab, "
                          "ArrowLeft, Control, Shift, a, A, 1, F5, Numpad0, PrintScreen, or an X "
                          "keysym name: KP_0, Super_L)") from None


def key_combination(comb: str, where: str = "key_comb") -> list[str]:
    """``"Control+a"`` -> ``["Control_L", "a"]``: modifiers first, the key last."""
    if not comb:
        raise ActionError(f"{where}: the key combination is empty; write e.g. 'Enter' or 'Control+a'")
    # Keys joined by "+"; the "+" key itself is last: "+" alone, or after one: "Shift++".
    if comb == "+":
        parts = ["+"]
    elif comb.endswith("++"):
        parts = [*comb[:-2].split("+"), "+"]
    else:
        parts = comb.split("+")
    if any(part == "" for part in parts):
        raise ActionError(f"{where}: {comb!r} is not a key combination such as 'Control+a' "
                          "(keys joined by '+'; the '+' key itself comes last: 'Shift++')")
    if len(parts) > MAX_COMBINATION_KEYS:
        raise ActionError(f"{where}: {comb!r} has {len(parts)} keys; at most "
                          f"{MAX_COMBINATION_KEYS} (MAX_COMBINATION_KEYS)")
    keys = [key_name(part, where) for part in parts]
    last = keys[-1].lower() if len(keys[-1]) == 1 else keys[-1]
    if last in BROWSER_KEYS or any((held, last) in BROWSER_SHORTCUTS for held in keys[:-1]):
        raise ActionError(f"{where}: {comb!r} is a command to the browser (zoom, windows, full "
                          "screen), not a key for the page; it is not sent")
    return keys


def tap(name: str, shift_letters: bool) -> list[InputEvent]:
    """Press and release one key; an uppercase letter inside Shift (``shift_letters``).

    The letter's own keysym is sent even under Shift: TigerVNC gives X exactly the
    keysym asked for, releasing Shift on its own for a lowercase one (Shift + ``a``
    types "a" there), and DevTools input types the keysym's character.
    """
    if shift_letters and len(name) == 1 and name.isascii() and name.isupper():
        return [KeyEvent("Shift_L", True), KeyEvent(name, True), KeyEvent(name, False),
                KeyEvent("Shift_L", False)]
    return [KeyEvent(name, True), KeyEvent(name, False)]


def combination_events(keys: Sequence[str], shift_letters: bool = True) -> list[InputEvent]:
    """Hold the modifiers, tap the last key, let go in reverse order. With modifiers
    held, a letter's case follows Shift (``Control+A`` is Control and ``a``;
    ``Shift+a`` types "A")."""
    *held, last = keys
    events: list[InputEvent] = [KeyEvent(k, True) for k in held]
    if held and len(last) == 1 and last.isascii() and last.isalpha():
        shifted = "Shift_L" in held or "Shift_R" in held
        events += tap(last.upper() if shifted else last.lower(), False)
    else:
        events += tap(last, shift_letters)
    return events + [KeyEvent(k, False) for k in reversed(held)]


_TYPED: Final = {"\n": "Return", "\t": "Tab", " ": "space"}


def type_events(text: str, shift_letters: bool = True) -> list[InputEvent]:
    """Key events that type ``text`` (printable characters, newlines, tabs)."""
    events: list[InputEvent] = []
    for char in text:
        try:
            name = _TYPED.get(char) or keysyms.canonical(char)
        except UnknownKey:
            raise ActionError(f"cannot type {char!r} (U+{ord(char):04X}): it has no X keysym") from None
        events += tap(name, shift_letters)
    return events
