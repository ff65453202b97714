"""Keys of web agents' action strings: names as BrowserGym (Playwright) or X spells them,
key combinations, the text ``fill`` and ``keyboard_type`` type, and the browser's own
shortcuts, which are refused (:func:`runtimes.browser_keys.browser_command`, the policy
every input path shares).

Holds :class:`ActionError` (what :mod:`runtimes.web_actions` raises too),
:func:`key_name`, :func:`key_combination`, :func:`combination_events`,
:func:`type_events` (any Unicode text as keysyms: X's name, else ``U+XXXX``; what X11
desktops type), :func:`text_events` (what a page is typed: keys for the keyboard's
characters, an :class:`InsertText` through DevTools for the rest) and their limits.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from vncdriver import keysyms
from vncdriver.errors import UnknownKey

from .base import InputEvent, KeyEvent
from .browser_keys import browser_command

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
    what = browser_command(keys[:-1], keys[-1])
    if what is not None:
        raise ActionError(f"{where}: {comb!r} is a command to the browser, not a key for the "
                          f"page ({comb} {what}); it is not sent (a browser remote keeps its "
                          "one page: docs/browser.md)")
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
#: Latin-1's keysyms are its code points; other characters' are 0x01000000 + theirs.
_LATIN1_END: Final = 0x100
UNICODE_KEYSYM: Final = 0x01000000


@dataclass(frozen=True, slots=True)
class InsertText:
    """Text that goes into the focused element through DevTools (``Input.insertText``),
    not as keys: what no key types, such as a tab ``fill`` keeps as text (the Tab key
    moves the focus)."""

    text: str


def char_key(char: str) -> str:
    """The keysym name that types ``char``: X's name (``eacute``, ``exclam``), else
    ``U+XXXX`` (Xvnc gives such a keysym a key code of its own, and Chromium types it)."""
    try:
        return keysyms.canonical(char)
    except UnknownKey:
        pass
    number = ord(char) if ord(char) < _LATIN1_END else UNICODE_KEYSYM + ord(char)
    named = keysyms.name(number)
    return named if not named.startswith("0x") else f"U+{ord(char):04X}"


def type_events(text: str, shift_letters: bool = True) -> list[InputEvent]:
    """Key events that type ``text`` (any script, newlines, tabs)."""
    events: list[InputEvent] = []
    for char in text:
        name = _TYPED.get(char)
        if name is None:
            if unicodedata.category(char) in ("Cc", "Cs"):
                raise ActionError(f"cannot type {char!r} (U+{ord(char):04X}): a control "
                                  "character; type text, newlines and tabs")
            name = char_key(char)
        events += tap(name, shift_letters)
    return events


def text_events(
    text: str, shift_letters: bool = True, tabs_as_text: bool = False
) -> list[InputEvent | InsertText]:
    """What types ``text`` into a page: a key for each character the keyboard has
    (printable ASCII, newlines; tabs unless ``tabs_as_text``), and an :class:`InsertText`
    for each run of the others (any script, emoji) and, with ``tabs_as_text``, of tabs.

    Why not their keysyms (:func:`type_events`): Xvnc gives a keysym it has no key for
    one of a few spare key codes, and reuses them; measured, 400 distinct CJK characters
    typed that way reached the page as 20 characters, most of them wrong.
    """
    events: list[InputEvent | InsertText] = []
    inserted = ""
    for char in text:
        keyed = char in _TYPED and not (char == "\t" and tabs_as_text)
        if not keyed:
            try:
                keysyms.canonical(char)
                keyed = len(char) == 1 and char.isascii()
            except UnknownKey:
                pass
        if keyed:
            if inserted:
                events.append(InsertText(inserted))
                inserted = ""
            events += type_events(char, shift_letters)
        else:
            if unicodedata.category(char) in ("Cc", "Cs") and char != "\t":
                raise ActionError(f"cannot type {char!r} (U+{ord(char):04X}): a control "
                                  "character; type text, newlines and tabs")
            inserted += char
    if inserted:
        events.append(InsertText(inserted))
    return events
