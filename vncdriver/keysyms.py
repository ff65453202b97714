"""X keysym names and numbers, with the aliases agents and browsers use.

Holds :func:`keysym` (name -> number), :func:`name` (number -> canonical name) and
:func:`canonical` (any accepted spelling -> the X name; a character of any script is
its keysym too, ``U+XXXX`` where X has no name for it). The table is the `keysymdef`
package's copy of X11's ``keysymdef.h``; we only add aliases on top of it.
"""

from __future__ import annotations

import functools
import re
from typing import Final

import keysymdef as _keysymdef

from .errors import UnknownKey

#: Common spellings (browser ``KeyboardEvent.key``, Universe's names, short forms) -> X name.
ALIASES: dict[str, str] = {
    "left": "Left", "arrowleft": "Left",
    "right": "Right", "arrowright": "Right",
    "up": "Up", "arrowup": "Up",
    "down": "Down", "arrowdown": "Down",
    "enter": "Return", "return": "Return",
    "esc": "Escape", "escape": "Escape",
    "backspace": "BackSpace", "tab": "Tab", "delete": "Delete", "del": "Delete",
    "insert": "Insert", "home": "Home", "end": "End",
    "pageup": "Prior", "pagedown": "Next", "pgup": "Prior", "pgdn": "Next",
    "space": "space", " ": "space", "spacebar": "space",
    "ctrl": "Control_L", "control": "Control_L", "lctrl": "Control_L", "rctrl": "Control_R",
    "shift": "Shift_L", "lshift": "Shift_L", "rshift": "Shift_R",
    "alt": "Alt_L", "lalt": "Alt_L", "ralt": "Alt_R", "option": "Alt_L",
    "meta": "Meta_L", "super": "Super_L", "win": "Super_L", "cmd": "Super_L",
    "capslock": "Caps_Lock",
}

_BY_NAME: dict[str, int] = {}
_BY_FOLDED: dict[str, str] = {}
_BY_NUMBER: dict[int, str] = {}
for _name, _number, _unicode in (*_keysymdef.keysymdef, *_keysymdef.xf86keysym):
    _BY_NAME.setdefault(_name, _number)
    _BY_NUMBER.setdefault(_number, _name)
    if len(_name) > 1:
        _BY_FOLDED.setdefault(_name.lower(), _name)
# Printable characters by their own glyph: "1" -> "1", "!" -> "exclam".
_BY_CHAR: dict[str, str] = {
    chr(u): n for n, _k, u in _keysymdef.keysymdef if u is not None and 0x20 <= u < 0x7F
}
# Latin-1's other characters by their code point (their keysyms): U+00E9 -> "eacute".
_BY_CODE_POINT: dict[int, str] = {
    u: n for n, k, u in _keysymdef.keysymdef if u is not None and 0xA0 <= u < 0x100 and k == u
}
#: X11's Unicode keysyms: 0x01000000 + the code point, for code points from U+0100 on
#: (below it, Latin-1's keysyms are the code points themselves and all have names).
UNICODE_KEYSYM: Final = 0x01000000
_UNICODE_NAME: Final = re.compile(r"[Uu]\+?([0-9A-Fa-f]{4,6})")


def _code_point_name(code_point: int) -> str | None:
    """The name of the keysym that types ``code_point``: Latin-1's X name, else X11's
    Unicode keysym ``U+XXXX`` (not a legacy name such as ``hebrew_shin``: one rule)."""
    if code_point in _BY_CODE_POINT:
        return _BY_CODE_POINT[code_point]
    if 0x100 <= code_point <= 0x10FFFF:
        return f"U+{code_point:04X}"
    return None


@functools.lru_cache(maxsize=4096)
def canonical(key: str) -> str:
    """The X keysym name for ``key``: an X name, an alias, or a printable character.

    Single letters keep their case ("a" and "A" are different keysyms); longer names are
    matched without case ("return", "RETURN" and "Return" are one key).
    """
    if key in _BY_NAME:
        return key
    if len(key) == 1 and key in _BY_CHAR:
        return _BY_CHAR[key]
    if len(key) == 1 and (named := _code_point_name(ord(key))) is not None:
        return named  # a character of any script: "é" -> "eacute", "日" -> "U+65E5"
    if (match := _UNICODE_NAME.fullmatch(key)) and (named := _code_point_name(int(match[1], 16))):
        return named  # xkb's "U65E5" and our "U+65E5"
    folded = key.lower()
    if folded in ALIASES:
        return ALIASES[folded]
    if folded in _BY_FOLDED:
        return _BY_FOLDED[folded]
    raise UnknownKey(key)


def keysym(key: str) -> int:
    """The keysym number of ``key`` (any spelling :func:`canonical` accepts)."""
    known = canonical(key)
    if known.startswith("U+"):
        return UNICODE_KEYSYM + int(known[2:], 16)
    return _BY_NAME[known]


def name(number: int) -> str:
    """The X name of keysym ``number``; unnamed Unicode keysyms come back as ``U+XXXX``."""
    try:
        return _BY_NUMBER[number]
    except KeyError:
        if UNICODE_KEYSYM + 0x100 <= number <= UNICODE_KEYSYM + 0x10FFFF:
            return _code_point_name(number - UNICODE_KEYSYM) or f"0x{number:x}"
        return f"0x{number:x}"
